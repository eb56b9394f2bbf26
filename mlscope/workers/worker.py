"""The farm's worker: `mlscope worker` on any machine joins the farm.

It detects the machine's capabilities and installed frameworks, consumes exactly the queues it can
serve (broker.queues), registers itself in the agent registry with a heartbeat, and runs each job
through the same pipeline as `mlscope run`, under the id the api recorded it with; a brick group (a
farm's bricks measured in one predictor job) is a job of its own (workers.brick_jobs).

Delivery: one job at a time (prefetch of one, Celery's solo pool: the job runs in this process's
main thread, its predictor in a child process or container). A job is acknowledged when it has ended;
if this process dies, the broker hands the job to another worker, which continues the same
evaluation (running → running) and the store keeps one result. SIGTERM (or Ctrl-C) is a warm
shutdown: the running job is finished first; a second Ctrl-C, or SIGQUIT, ends it at once, and the
job goes back to its queue (Celery ignores a second SIGTERM).
"""

from __future__ import annotations

import itertools
import logging
import os
import platform
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import psutil
from celery import Celery, Task
from celery.exceptions import Reject

from mlscope import __version__
from mlscope.broker.app import make_celery
from mlscope.broker.tasks import BARE_TASK, EVALUATE_TASK, BrickGroupMessage, TaskMessage, read_message
from mlscope.contract.errors import StoreUnavailable, UserError
from mlscope.contract.queues import check_agent_id, check_capability, queues_for
from mlscope.contract.settings import Settings
from mlscope.registry.agents import DEFAULT_TTL_S, AgentInfo, AgentRegistry
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.system import cpu_facts, gpu_facts
from mlscope.runtime.trace.spans import TraceContext, Tracer
from mlscope.store import EvaluationNotFound, InvalidTransition, Store, open_store
from mlscope.workers.admission import Admission, admit
from mlscope.workers.brick_jobs import admit_group, evaluate_bricks
from mlscope.workers.capabilities import serving_capabilities, visible_gpus
from mlscope.workers.dataset_fetch import DatasetFetcher
from mlscope.workers.host_turn import HOST_LOCK, ConsumerGate, HostTurn
from mlscope.workers.leases import Lease
from mlscope.workers.model_fetch import ModelFetcher
from mlscope.workers.parts import complete_group, with_clock
from mlscope.workers.pipeline import RetriedWrites, Writes, evaluate, keep_spans
from mlscope.workers.runners import RUNNERS, frameworks_for, get_runner
from mlscope.workers.spool import DurableWrites, Spool, adopt_spools, spool_directory
from mlscope.workers.store_writes import StoreWrite
from mlscope.workers.sweeper import Sweeper
from mlscope.workers.upload_fetch import UploadFetchError

__all__ = ["HOST_LOCK", "Worker", "default_agent_id"]

log = logging.getLogger("mlscope.worker")

# An infrastructure failure (store unreachable) sends the job back this many times, this far apart,
# before it is given up as failed.
_INFRA_RETRIES = 5
_INFRA_RETRY_S = 10
# While the store is unreachable at a job's start, the worker holds the job and asks again after
# pauses growing to this (its heartbeat names the job, so no sweeper takes it).
_STORE_WAIT_MAX_S = 30.0


def _cold_shutdown() -> bool:
    """Whether this worker was told to stop at once (SIGQUIT, or a second Ctrl-C)."""
    from celery.worker import state

    return state.should_terminate not in (None, False)


def default_agent_id() -> str:
    """The machine's host name, made a valid agent id."""
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname())
    return name.strip(".-_")[:128] or "agent"


class Worker:
    """One agent of the farm.

    Args:
        settings: broker, store, registry, cache and manifests.
        agent_id: this agent's id (default: the host name); must be unique among live agents.
        capabilities: override the detected capabilities (to act as several systems on one machine).
        extra_capabilities: serve these as well as the detected (or overriding) ones: what the
            hardware does not say, e.g. the Slurm partition a worker runs in (`slurm.a100`).
        frameworks: serve only these of the installed frameworks (default: every installed one).
        runners: the runners requests may ask for here.
        heartbeat_ttl_s: the registry entry expires this long after the last heartbeat.
        exclusive: take turns with the other mlscope workers of this host, so that two agents on one
            machine never measure at the same time and perturb each other's figures (a host-wide
            file lock). Turn it off only for workers whose jobs are not measured for speed, or that
            are pinned to separate cores.

    Raises:
        UserError: an invalid id or capability, a framework that is not installed, an unknown runner,
            or another live agent with the same id.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        agent_id: str | None = None,
        capabilities: Sequence[str] | None = None,
        extra_capabilities: Sequence[str] = (),
        frameworks: Sequence[str] | None = None,
        runners: Sequence[str] = ("process", "inline"),
        heartbeat_ttl_s: float = DEFAULT_TTL_S,
        exclusive: bool = True,
    ) -> None:
        self.settings = settings
        self.exclusive = exclusive
        self.agent_id = check_agent_id(agent_id or default_agent_id(), "agent_id")
        # The GPUs its predictors may use (they inherit CUDA_VISIBLE_DEVICES): one worker per GPU
        # describes its own GPU, and a worker shown none claims no GPU capability.
        cpu = cpu_facts()
        gpus = visible_gpus(gpu_facts(), os.environ.get("CUDA_VISIBLE_DEVICES"))
        self.capabilities = tuple(
            serving_capabilities(
                cpu,
                gpus,
                explicit=[check_capability(c, "capability") for c in capabilities or ()],
                extra=[check_capability(c, "extra_capability") for c in extra_capabilities],
            )
        )
        unknown = [r for r in runners if r not in RUNNERS]
        if unknown or not runners:
            raise UserError(
                f"runner(s) {', '.join(unknown) or '(none)'}: expected some of {', '.join(RUNNERS)}",
                field="runners",
            )
        # What this agent can run: whatever any of its runners can (this Python's frameworks, their
        # own environments, their images).
        installed = frameworks_for([get_runner(name, settings) for name in runners])
        if frameworks:
            missing = [f for f in frameworks if f not in installed]
            if missing:
                raise UserError(
                    f"framework(s) {', '.join(missing)} not installed here; installed: "
                    f"{', '.join(sorted(installed)) or 'none'}",
                    field="frameworks",
                )
            installed = {f: installed[f] for f in frameworks}
        if not installed:
            raise UserError(
                "no framework is installed here: install mlscope[pytorch] or mlscope[onnxruntime]"
            )
        self.frameworks = installed
        self.runners = tuple(runners)
        self.queues = queues_for(self.frameworks, self.capabilities, self.agent_id)
        self.registry = AgentRegistry(settings.agent_registry_url, ttl_s=heartbeat_ttl_s)
        # Paths and factories in a request name the submitter's files, not this machine's; an upload
        # (sha256:<hex>) is fetched from the API into the cache.
        self.models = ModelRegistry.load(
            settings.manifests,
            local_files=False,
            uploads=ModelFetcher(settings),
            dataset_uploads=DatasetFetcher(settings),
        )
        self.store: Store = open_store(settings.store_url)
        self.app: Celery = make_celery(settings, name="mlscope-worker")
        self.turn = HostTurn(exclusive=exclusive)
        self.gate = ConsumerGate(self.turn, self.queues)
        # Straight to the store until `run` has claimed the agent id its spool is named by.
        self.writes: Writes = RetriedWrites(self.store)
        self._explicit_id = agent_id is not None
        self._register_tasks()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._cancel = threading.Event()
        self.info = AgentInfo(
            id=self.agent_id,
            hostname=socket.gethostname(),
            capabilities=self.capabilities,
            frameworks=dict(self.frameworks),
            runners=self.runners,
            queues=tuple(self.queues),
            system={
                "cpu": cpu.get("model"),
                "cores": cpu.get("logical_cores"),
                "gpus": [g.get("name") for g in gpus],
                "memory_bytes": psutil.virtual_memory().total,
                "os": platform.platform(),
                "python": platform.python_version(),
            },
            pid=os.getpid(),
            version=__version__,
        )

    # ----- the task ------------------------------------------------------------------------------

    def _register_tasks(self) -> None:
        worker = self

        @self.app.task(name=EVALUATE_TASK, bind=True, max_retries=_INFRA_RETRIES)
        def run_evaluation(task: Task, message: dict[str, Any]) -> None:
            delivery = task.request.delivery_info or {}
            worker.handle(message, redelivered=bool(delivery.get("redelivered")), task=task)

        @self.app.task(name=BARE_TASK)
        def noop(*args: Any, **kwargs: Any) -> None:
            """Does nothing: benchmarks/dispatch.py measures bare Celery with it."""

    def handle(self, raw: dict[str, Any], *, redelivered: bool = False, task: Task | None = None) -> None:
        """Run one job to its end; it is acknowledged when this returns."""
        try:
            message = read_message(raw)
        except UserError as exc:
            log.error("dropping a malformed task message: %s", exc.message)
            return
        evaluation_id = message.evaluation_id
        if not self.turn.try_take():
            # The other agent of this host is measuring: give the job back at once (an idle agent
            # elsewhere may take it) and take none until the turn is free.
            self.gate.close()
            raise Reject(f"job {evaluation_id}: this host's other agent is measuring", requeue=True)
        try:
            self._handle(message, redelivered, task)
        finally:
            self.turn.release()

    def _handle(self, message: TaskMessage, redelivered: bool, task: Task | None) -> None:
        evaluation_id = message.evaluation_id
        waited_s = time.time() - message.submitted_at
        log.info(
            "job %s (%s on %s) from %s after %.3f s in the queue%s",
            evaluation_id,
            message.request.model,
            message.request.framework,
            message.queue,
            waited_s,
            " (redelivered)" if redelivered else "",
        )
        self._set_job(evaluation_id)
        try:
            self._run_when_store_answers(message)
        except UserError as exc:
            self._fail(evaluation_id, "InvalidRequest", exc.message, "validate")
        except Exception as exc:
            if _cold_shutdown():
                # SIGQUIT (or a second Ctrl-C) ends the job where it stands (the solo pool cannot
                # end it otherwise: Celery's attempt raises here): back to its queue at once, for
                # another worker to continue under the same id; no failure, no retry spent.
                log.warning("job %s: handed back to its queue (cold shutdown: %s)", evaluation_id, exc)
                raise Reject(f"job {evaluation_id}: handed back at a cold shutdown", requeue=True) from None
            if task is None or task.request.retries >= _INFRA_RETRIES:
                log.exception("job %s failed in the worker", evaluation_id)
                self._fail(evaluation_id, "WorkerError", f"{type(exc).__name__}: {exc}", "report")
                return
            log.warning(
                "job %s: %s; sending it back to be retried in %d s", evaluation_id, exc, _INFRA_RETRY_S
            )
            raise task.retry(exc=exc, countdown=_INFRA_RETRY_S) from exc
        finally:
            self._set_job(None)

    def _run_when_store_answers(self, message: TaskMessage) -> None:
        """Run the job; while the store cannot record its start, hold it and ask again (the job has not
        run: its result can only be lost if it is dropped now, as it once was after five tries)."""
        pause = 1.0
        since = time.monotonic()
        while True:
            try:
                self._run(message)
                return
            except StoreUnavailable as exc:
                log.warning(
                    "job %s: the store is unreachable (%s); holding the job, asking again in %.0f s "
                    "(waiting %.0f s so far)",
                    message.evaluation_id,
                    exc.message,
                    pause,
                    time.monotonic() - since,
                )
                time.sleep(pause)
                pause = min(pause * 2, _STORE_WAIT_MAX_S)

    def _run(self, message: TaskMessage) -> None:
        """Run one job: an evaluation through the pipeline (workers.pipeline), a brick group as a job
        of its own (workers.brick_jobs); a part of a split load, once ended, may complete its group."""
        try:
            self._run_one(message)
        finally:
            if message.request.load.get("shard"):
                self._complete_group(message.request.load)

    def _complete_group(self, load: dict[str, Any]) -> None:
        try:
            status = complete_group(self.store, load)
        except Exception:  # the part is stored; a later part's worker, or a rerun, merges
            log.exception("split load %s: the merge failed", load["shard"].get("group"))
            return
        if status is not None:
            log.info("split load %s merged: %s", load["shard"]["group"], status)

    def _run_one(self, message: TaskMessage) -> None:
        evaluation_id, request = message.evaluation_id, message.request
        running_on = self._running_elsewhere(evaluation_id)
        if running_on is not None:
            # A second copy of a job a live agent runs (the broker gave back a message of a job that
            # outlasted its visibility timeout): running it twice would measure it twice.
            log.info("job %s is running on agent %s: not starting it twice", evaluation_id, running_on)
            return
        if request.runner not in self.runners:
            self._fail(
                evaluation_id,
                "UnsupportedRunner",
                f"runner {request.runner!r} is not allowed on agent {self.agent_id} "
                f"(it allows {', '.join(self.runners)})",
                "validate",
            )
            return
        if isinstance(message, BrickGroupMessage):
            group = admit_group(message, self.models, self.settings, self._fail)
            if group:
                self._traced(message, lambda tracer, lease: self._run_bricks(group, tracer, lease))
            return
        try:
            admitted = admit(request, self.models, here=self.settings)
        except UploadFetchError as exc:  # an uploaded model or dataset the API could not give
            self._fail(evaluation_id, type(exc).__name__, exc.message, "fetch")
            return
        except UserError as exc:
            self._fail(evaluation_id, "InvalidRequest", exc.message, "validate")
            return
        admitted = with_clock(admitted, self.registry)
        self._traced(message, lambda tracer, lease: self._evaluate(admitted, evaluation_id, tracer, lease))

    def _evaluate(self, admitted: Admission, evaluation_id: str, tracer: Tracer, lease: Lease) -> str:
        result = evaluate(
            admitted,
            store=self.store,
            settings=self.settings,
            evaluation_id=evaluation_id,
            system_extra={"agent": self._agent()},
            cancel=self._cancel,
            tracer=tracer,
            lease=lease,
            writes=self.writes,
        )
        kept = " (kept in the spool until the store is back)" if result.get("spooled") else ""
        return f"{result['status']}{kept}"

    def _run_bricks(self, group: list[tuple[str, Admission]], tracer: Tracer, lease: Lease) -> str:
        end = evaluate_bricks(
            group,
            store=self.store,
            settings=self.settings,
            system_extra={"agent": self._agent()},
            cancel=self._cancel,
            tracer=tracer,
            lease=lease,
            writes=self.writes,
        )
        kept = " (kept in the spool until the store is back)" if end.spooled else ""
        return f"{end.status}: a brick group, {len(end.started)} brick(s) measured{kept}"

    def _agent(self) -> dict[str, Any]:
        return {"id": self.agent_id, "capabilities": list(self.capabilities)}

    def _traced(self, message: TaskMessage, work: Callable[[Tracer, Lease], str]) -> None:
        """Run `work` under the job's task span (continuing the api's trace), with the job's lease, and
        keep the spans; `work` says how the job ended, for the log."""
        evaluation_id = message.evaluation_id
        tracer = Tracer(message.request.trace_level, TraceContext.parse(message.traceparent))
        task_span = tracer.span(
            EVALUATE_TASK,
            **{
                "mlscope.process": "worker",
                "messaging.system": "celery",
                "messaging.destination.name": message.queue,
            },
            agent=self.agent_id,
            evaluation_id=evaluation_id,
        )
        try:
            with task_span:
                # The api's clock stamped submitted_at: across machines this span is as good as
                # their clocks' agreement (NTP: milliseconds).
                received = tracer.clock.now()
                tracer.add(
                    "queue_wait",
                    "APPLICATION",
                    min(int(message.submitted_at * 1e9), received),
                    received,
                    attributes={"mlscope.process": "worker", "queue": message.queue},
                )
                # Two heartbeat lifetimes: a worker whose registry entry lapsed is dead, or frozen
                # for longer than any pause of a live one.
                ended = work(tracer, Lease(self.agent_id, seconds=2 * self.registry.ttl_s))
        except InvalidTransition as done:
            # Cancelled before it started, or a duplicate delivery of a job that has ended.
            log.info("job %s has already ended (%s): nothing to do", evaluation_id, done.current)
            return
        keep_spans(self.writes, self.settings, evaluation_id, tracer.drain())
        log.info("job %s %s", evaluation_id, ended)

    def _running_elsewhere(self, evaluation_id: str) -> str | None:
        """The live agent, other than this one, running `evaluation_id`, if any."""
        try:
            running = self.registry.running(evaluation_id)
        except UserError as exc:  # advisory: without the registry, the store's transitions still hold
            log.warning("agent registry: %s", exc.message)
            return None
        return next((a.id for a in running if a.id != self.agent_id), None)

    def _fail(self, evaluation_id: str, kind: str, message: str, phase: str) -> None:
        log.warning("job %s failed: %s: %s", evaluation_id, kind, message)
        try:
            self.writes.write(
                evaluation_id, StoreWrite.FAIL, error={"type": kind, "message": message, "phase": phase}
            )
        except EvaluationNotFound:
            log.error(
                "job %s is not in the store %s; nothing recorded", evaluation_id, self.settings.store_url
            )

    # ----- the agent registry --------------------------------------------------------------------

    def _set_job(self, evaluation_id: str | None) -> None:
        with self._lock:
            done = self.info.jobs_done + (1 if evaluation_id is None and self.info.current_job else 0)
            self.info = replace(self.info, current_job=evaluation_id, jobs_done=done)
            self._cancel.clear()
            info = self.info
        try:
            self.registry.register(info)
        except UserError as exc:  # the registry is advisory: a job never waits for it
            log.warning("agent registry: %s", exc.message)

    def _heartbeat(self) -> None:
        """Renew the registry entry every third of its lifetime; notice a cancelled running job; sweep
        for dead runners' evaluations (workers.sweeper)."""
        interval = self.registry.ttl_s / 3
        sweeper = Sweeper(
            self.store, self.registry, self.app, holder=self.agent_id, grace_s=2 * self.registry.ttl_s
        )
        while not self._stop.wait(interval):
            with self._lock:
                self.info = replace(self.info, spooled=tuple(self._spooled()))
                info = self.info
            try:
                self.registry.heartbeat(info)
                if info.current_job and not self._cancel.is_set():
                    status = self.store.get_evaluation(info.current_job)["status"]
                    if status == "cancelled":
                        log.info("job %s was cancelled: ending it", info.current_job)
                        self._cancel.set()
            except Exception as exc:
                log.warning("heartbeat: %s", exc)
            try:
                sweeper.sweep()
            except Exception as exc:
                log.warning("sweep: %s", exc)

    def _spooled(self) -> list[str]:
        """The evaluations whose ends wait in this worker's spool for the store."""
        return self.writes.spool.pending() if isinstance(self.writes, DurableWrites) else []

    def _claim_id(self) -> None:
        """Claim the agent id in the registry. Without --agent-id, a host name a live agent already
        holds becomes `<host>-2`, `-3`, ...: `mlscope worker` twice on one host gives two agents (which
        take turns measuring, HostTurn)."""
        base = self.agent_id
        for n in itertools.count(1):
            candidate = base if n == 1 else check_agent_id(f"{base[:120]}-{n}", "agent_id")
            info = replace(
                self.info,
                id=candidate,
                queues=tuple(queues_for(self.frameworks, self.capabilities, candidate)),
            )
            if self.registry.claim(info):
                break
            live = self.registry.get(candidate)
            if live is not None and (live.hostname, live.pid) == (self.info.hostname, self.info.pid):
                break
            if self._explicit_id:
                holder = f" (pid {live.pid} on {live.hostname})" if live is not None else ""
                raise UserError(
                    f"agent id {candidate!r} is already live{holder}: pass another --agent-id, or none "
                    "to get a free one",
                    field="agent_id",
                )
        if candidate != self.agent_id:
            log.info("agent id %s is taken by a live agent: this one is %s", base, candidate)
        self.agent_id, self.info, self.queues = candidate, info, list(info.queues)
        self.gate.queues = list(info.queues)

    # ----- running -------------------------------------------------------------------------------

    def run(self, *, loglevel: str = "INFO") -> None:
        """Register, consume until SIGTERM/SIGINT, unregister."""
        self._claim_id()
        self.gate.attach(self.app)
        spool = spool_directory(self.settings.cache_dir, self.agent_id)
        self.writes = DurableWrites(self.store, Spool(spool))
        self.writes.start_flusher()
        adopt_spools(spool, self.store, lambda agent_id: self.registry.get(agent_id) is not None)
        beat = threading.Thread(target=self._heartbeat, name="mlscope-heartbeat", daemon=True)
        beat.start()
        log.info(
            "agent %s: capabilities %s; frameworks %s; queues %s",
            self.agent_id,
            ", ".join(self.capabilities),
            ", ".join(f"{k} {v}" for k, v in self.frameworks.items()),
            ", ".join(self.queues),
        )
        try:
            self.app.worker_main(
                [
                    "worker",
                    "--pool=solo",
                    "--concurrency=1",
                    f"--queues={','.join(self.queues)}",
                    f"--hostname={self.agent_id}@%h",
                    f"--loglevel={loglevel}",
                    "--without-gossip",
                    "--without-mingle",
                    # Not --without-heartbeat: on RabbitMQ, a solo-pool worker without the heartbeat's
                    # timer was seen to sit ~10 s on a message after its previous job (the dispatch
                    # benchmark's first job after warm-up); with it, no such stall.
                ]
            )
        finally:
            self._stop.set()
            beat.join(timeout=5)
            if isinstance(self.writes, DurableWrites):
                self.writes.stop()
            try:
                self.registry.unregister(self.agent_id)
            except UserError as exc:
                log.warning("could not unregister: %s", exc)
            self.store.close()
            self.registry.close()
