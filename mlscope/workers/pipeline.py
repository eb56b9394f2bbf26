"""The evaluation pipeline: record an admitted request, run it, store what came back.

    admit (workers.admission) → store (queued → running) → runner → predictor + scenarios
            → store (succeeded | failed)

Everything that can be the user's mistake is checked by `admit` before anything is stored, so a bad
request leaves the store as it was. A finished evaluation's result is never dropped for a store that
is briefly away (a lost connection, a full disk): its write is tried again with growing pauses.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast, overload

from mlscope.broker.tracing import export_spans
from mlscope.contract.cost import cost_section
from mlscope.contract.errors import StoreUnavailable
from mlscope.contract.events import RunEvent
from mlscope.contract.job import Job
from mlscope.contract.result import (
    Cost,
    ErrorInfo,
    EvaluationResult,
    PredictorResult,
    ResultMeasurement,
    SpooledResult,
)
from mlscope.contract.settings import Settings
from mlscope.contract.system_ids import system_ids
from mlscope.runtime.system import system_id
from mlscope.runtime.trace.spans import TraceContext, Tracer
from mlscope.store import Store
from mlscope.store.records import subsample_latencies
from mlscope.workers.admission import Admission
from mlscope.workers.leases import Lease, kept
from mlscope.workers.runners import Runner, RunOutcome, get_runner
from mlscope.workers.store_writes import StoreWrite, apply

__all__ = [
    "RESULT_WRITE_PAUSES_S",
    "RetriedWrites",
    "Writes",
    "evaluate",
    "job_for",
    "keep_spans",
    "outcome_status",
    "predictor_spans",
    "start_evaluation",
    "write_ends",
    "write_result",
]

# Told of an evaluation's events: the predictor's, and "created" once it is recorded.
Emit = Callable[[RunEvent], None]

log = logging.getLogger("mlscope.workers")

# The pauses between tries of a result write the store did not take: about two minutes in all, after
# which the error propagates (a farm worker then sends the job back to its queue).
RESULT_WRITE_PAUSES_S: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 60)


def write_result(write: Callable[[], None], what: str) -> None:
    """Run a store write, trying again after each pause of RESULT_WRITE_PAUSES_S while the store is
    unavailable (each failed try was rolled back, so trying again cannot write twice).

    Raises:
        StoreUnavailable: the last try failed too.
    """
    for pause in (*RESULT_WRITE_PAUSES_S, None):
        try:
            write()
            return
        except StoreUnavailable as exc:
            if pause is None:
                raise
            log.warning("%s: %s; trying again in %g s", what, exc.message, pause)
            time.sleep(pause)


class Writes(Protocol):
    """Where the pipeline's writes of an evaluation's end go (its result, its failure, its spans)."""

    def write(self, evaluation_id: str, op: StoreWrite, **kwargs: Any) -> bool:
        """Make the store write `op` for `evaluation_id`; True when the store has taken it now,
        False when it was kept to be written later (workers.spool)."""
        ...


class RetriedWrites:
    """Straight to the store, each write tried again while the store is briefly away (`write_result`):
    `mlscope run`'s writes, whose process waits for them."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def write(self, evaluation_id: str, op: StoreWrite, **kwargs: Any) -> bool:
        write_result(lambda: apply(self.store, op, evaluation_id, kwargs), f"{op} of {evaluation_id}")
        return True


@overload
def evaluate(
    admitted: Admission,
    *,
    store: Store,
    settings: Settings,
    emit: Emit = ...,
    evaluation_id: str | None = ...,
    system_extra: Mapping[str, Any] | None = ...,
    cancel: threading.Event | None = ...,
    tracer: Tracer | None = ...,
    lease: Lease | None = ...,
    writes: None = ...,
) -> EvaluationResult: ...


@overload
def evaluate(
    admitted: Admission,
    *,
    store: Store,
    settings: Settings,
    emit: Emit = ...,
    evaluation_id: str | None = ...,
    system_extra: Mapping[str, Any] | None = ...,
    cancel: threading.Event | None = ...,
    tracer: Tracer | None = ...,
    lease: Lease | None = ...,
    writes: Writes,
) -> EvaluationResult | SpooledResult: ...


def evaluate(
    admitted: Admission,
    *,
    store: Store,
    settings: Settings,
    emit: Emit = lambda event: None,
    evaluation_id: str | None = None,
    system_extra: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    tracer: Tracer | None = None,
    lease: Lease | None = None,
    writes: Writes | None = None,
) -> EvaluationResult | SpooledResult:
    """Run an admitted evaluation to its end and return the stored result.

    A job that fails is stored as failed with its error; only an interrupt (Ctrl-C) propagates,
    after the evaluation is marked cancelled.

    Args:
        evaluation_id: the id to store it under; an evaluation already recorded with this id (by the
            api, or by an earlier delivery of the same job) is continued, not duplicated.
        system_extra: facts added to the system description before it is stored (a farm worker adds
            its agent id and capabilities, which then count in the system's id).
        cancel: set it to end the running job (a farm worker does when the evaluation is cancelled).
        tracer: the caller's tracer, whose open span the predictor's spans hang under (a farm
            worker's task span); None starts a trace of its own at the request's trace_level,
            rooted in a span "run" of this process.
        lease: held on the evaluation while it runs, renewed until it ends (workers.leases); an
            evaluation started more than `lease.max_attempts` times fails without running.
        writes: where its end is written (a farm worker's spool); None: straight to `store`.

    Returns:
        The stored result; when `writes` kept the end for later (the store was unreachable), only
        {"id", "status", "spooled": True}.
    """
    ends = writes or RetriedWrites(store)

    def run(tracer: Tracer) -> EvaluationResult | SpooledResult:
        return _evaluate(
            admitted,
            store,
            settings,
            emit,
            evaluation_id,
            system_extra,
            cancel,
            tracer,
            lease,
            ends,
        )

    if tracer is not None:
        return run(tracer)
    tracer = Tracer(admitted.request.trace_level)
    with tracer.span("run", **{"mlscope.process": "cli"}):
        result = run(tracer)
    keep_spans(ends, settings, result["id"], tracer.drain())
    return result


def keep_spans(writes: Writes, settings: Settings, evaluation_id: str, spans: list[dict[str, Any]]) -> bool:
    """Store an evaluation's spans and, when MLSCOPE_OTLP_ENDPOINT is set, send them over OTLP; False
    when they were kept to be stored later."""
    if not spans:
        return True
    stored = writes.write(evaluation_id, StoreWrite.SAVE_SPANS, spans=spans)
    export_spans(settings, spans)
    return stored


def _evaluate(
    admitted: Admission,
    store: Store,
    settings: Settings,
    emit: Emit,
    evaluation_id: str | None,
    system_extra: Mapping[str, Any] | None,
    cancel: threading.Event | None,
    tracer: Tracer,
    lease: Lease | None,
    writes: Writes,
) -> EvaluationResult | SpooledResult:
    request = admitted.request
    traced = tracer.enabled("APPLICATION")
    evaluation_id = store.create_evaluation(
        id=evaluation_id, **admitted.record(), trace_id=tracer.trace_id if traced else None
    )
    emit({"event": "created", "id": evaluation_id})
    if not start_evaluation(store, evaluation_id, lease, writes):
        return store.get_evaluation(evaluation_id)
    traceparent = TraceContext(tracer.trace_id, tracer.current_id).traceparent() if traced else ""
    job = job_for(admitted, evaluation_id, settings, traceparent)
    runner = get_runner(request.runner, settings)
    try:
        with kept(store, evaluation_id, lease):
            outcome = _run(admitted, job, runner, emit, tracer, cancel)
    except KeyboardInterrupt:
        store.cancel_evaluation(evaluation_id)
        raise
    with tracer.span("store", status=outcome_status(outcome)):
        stored = write_ends([(evaluation_id, admitted)], outcome, settings, system_extra, writes)
    spans = [*predictor_spans(outcome), *tracer.drain()]
    stored = keep_spans(writes, settings, evaluation_id, spans) and stored
    if not stored:
        return {"id": evaluation_id, "status": outcome_status(outcome), "spooled": True}
    return store.get_evaluation(evaluation_id)


def job_for(admitted: Admission, evaluation_id: str, settings: Settings, traceparent: str = "") -> Job:
    """The job the predictor runs for the evaluation (`traceparent`: where its spans hang; "": an
    untraced one)."""
    return admitted.job(
        evaluation_id,
        cache_dir=str(settings.cache_dir),
        model_store=settings.model_store,
        traceparent=traceparent,
    )


def _run(
    admitted: Admission,
    job: Job,
    runner: Runner,
    emit: Emit,
    tracer: Tracer,
    cancel: threading.Event | None,
) -> RunOutcome:
    """The predictor's run, then the parity check's reference run when one was asked for."""
    request = admitted.request
    outcome = runner.run(
        job, emit, timeout_s=request.timeout_s, memory_limit_mb=request.memory_limit_mb, cancel=cancel
    )
    outputs = outcome.result.pop("outputs", None) if outcome.result is not None else None
    if outcome.result is not None and admitted.parity_manifest is not None and outputs is not None:
        # The parity check's modules (numpy) only for a request that asks for one.
        from mlscope.workers.parity import run_parity_check

        with tracer.span("parity", against=admitted.parity_against):
            outcome.result["parity"] = run_parity_check(
                admitted, job, outputs, runner, emit, timeout_s=request.timeout_s, cancel=cancel
            )
    return outcome


def start_evaluation(store: Store, evaluation_id: str, lease: Lease | None, writes: Writes) -> bool:
    """Mark the evaluation running (under `lease`); False when it has been started more than the
    lease allows, and is failed instead (each time, the process running it died)."""
    if lease is None:
        store.start_evaluation(evaluation_id)
        return True
    attempts = store.start_evaluation(evaluation_id, lease_owner=lease.owner, lease_s=lease.seconds)
    if attempts <= lease.max_attempts:
        return True
    error: ErrorInfo = {
        "type": "TooManyAttempts",
        "message": f"started {attempts} times and never ended: each time the process running it "
        f"died; not trying again (the limit is {lease.max_attempts})",
        "phase": "run",
    }
    writes.write(evaluation_id, StoreWrite.FAIL, error=error)
    return False


def write_ends(
    members: Sequence[tuple[str, Admission]],
    outcome: RunOutcome,
    settings: Settings,
    system_extra: Mapping[str, Any] | None,
    writes: Writes,
) -> bool:
    """Write how each evaluation of the job ended (`members`: each (evaluation id, admission), the
    job's own first; one, but for a brick group's job, workers.brick_jobs). An ordinary job (or a
    brick job that failed as a whole) ends every member alike; a brick job's result holds each
    brick's own end under `bricks`, by evaluation id, and the job's import figures go to the first
    brick's cold start. False when an end was kept for later."""
    result = outcome.result
    ends = result.get("bricks") if result is not None else None
    if result is None or ends is None:
        written = [_write_end(adm, outcome, id, settings, system_extra, writes) for id, adm in members]
        return all(written)
    shared: dict[str, Any] = {key: value for key, value in result.items() if key != "bricks"}
    written = []
    for index, (id, adm) in enumerate(members):
        end = ends.get(id) or {"error": {"type": "BrickError", "message": "its job returned nothing for it"}}
        if "error" in end:
            written.append(writes.write(id, StoreWrite.FAIL, error={"phase": "report", **end["error"]}))
            continue
        cold_start = (
            {**shared.get("cold_start", {}), **end["cold_start"]} if index == 0 else end["cold_start"]
        )
        own_result = {**shared, "cold_start": cold_start, "measurements": end["measurements"]}
        own = RunOutcome(result=cast(PredictorResult, own_result))
        written.append(_write_end(adm, own, id, settings, system_extra, writes))
    return all(written)


def outcome_status(outcome: RunOutcome) -> str:
    """How the job's run ended: "succeeded" when it returned a result, else "failed"."""
    return "succeeded" if outcome.result is not None else "failed"


def predictor_spans(outcome: RunOutcome) -> list[dict[str, Any]]:
    """The spans the predictor process traced, from its result or from its failure."""
    if outcome.result is not None:
        return list(outcome.result.get("trace", {}).get("spans", []))
    return outcome.spans


def _write_end(
    admitted: Admission,
    outcome: RunOutcome,
    evaluation_id: str,
    settings: Settings,
    system_extra: Mapping[str, Any] | None,
    writes: Writes,
) -> bool:
    """Write how the evaluation ended (its result or its error); False when kept for later."""
    if outcome.result is None:
        assert outcome.error is not None
        return writes.write(evaluation_id, StoreWrite.FAIL, error=outcome.error)
    result = outcome.result
    measurements = [
        _with_cost(
            cast(ResultMeasurement, subsample_latencies(m, settings.max_raw_latencies)),
            settings.price_per_hour,
        )
        for m in result["measurements"]
    ]
    return writes.write(
        evaluation_id,
        StoreWrite.FINISH,
        system=_described_system(result["system"], settings, system_extra, result["framework"]),
        framework={"name": admitted.request.framework, **result["framework"]},
        cold_start=result["cold_start"],
        measurements=measurements,
        accuracy=result.get("accuracy"),
        parity=result.get("parity"),
        memory=result.get("memory"),
    )


def _described_system(
    captured: Mapping[str, Any],
    settings: Settings,
    system_extra: Mapping[str, Any] | None,
    framework: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The system as stored: what the predictor process captured, the user's name for the machine
    (MLSCOPE_INSTANCE_TYPE, a fact of the machine, so part of its id) and the caller's facts; with its
    machine and stack ids (contract.system_ids), the stack's including the image `framework` records."""
    extra = dict(system_extra or {})
    if settings.instance_type:
        extra["instance_type"] = settings.instance_type
    system = dict(captured)
    if extra:
        system.update(extra)
        system["id"] = system_id(system)
    system["machine_id"], system["stack_id"] = system_ids(system, framework)
    return system


def _with_cost(measurement: ResultMeasurement, price_per_hour: float | None) -> ResultMeasurement:
    """The measurement with its `cost` section when this machine has a price (MLSCOPE_PRICE_PER_HOUR).

    The price is read here, where the worker (or `mlscope run`) stands, not in the predictor
    process: a container predictor does not inherit the worker's environment, and a price is the
    machine's, whatever runner isolates the predictor. It is recorded per measurement, not in the
    system: systems are content-addressed and kept as first saved, and a price changes over time.
    """
    if price_per_hour is None:
        return measurement
    section = cost_section(measurement, price_per_hour)
    return measurement if section is None else {**measurement, "cost": cast(Cost, section)}
