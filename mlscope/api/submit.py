"""Turning submissions into queued evaluations: check, plan, then record and send.

A submission is checked completely (framework, manifest, measurement settings, target, and for a
batch the whole matrix) before anything is stored; then each planned job is recorded as queued in the
store and sent to its queue. A job the broker refuses is marked failed in the store (phase `queue`),
so no evaluation stays queued that no queue holds.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import flask

from mlscope.api.context import ApiContext, redact_url
from mlscope.api.problems import ApiProblem
from mlscope.api.schemas import MAX_BATCH_JOBS, SHARED_REQUEST_FIELDS
from mlscope.broker.app import send_evaluation
from mlscope.broker.tasks import BrickGroupMessage, EvaluationMessage, TaskMessage
from mlscope.broker.tracing import export_spans
from mlscope.contract.errors import MlscopeError, UserError
from mlscope.contract.manifest import Manifest
from mlscope.contract.queues import AGENT_PREFIX, Target, parse_target
from mlscope.contract.request import EvaluationRequest
from mlscope.registry.agents import AgentInfo, AgentRegistry, LiveCache
from mlscope.registry.models import ModelRegistry
from mlscope.registry.references import ModelOptions
from mlscope.runtime.frameworks import check_runnable, get_framework
from mlscope.runtime.trace.spans import TraceContext, Tracer
from mlscope.workers.admission import Admission, admit, check_measure

__all__ = [
    "BatchPlan",
    "BrokerUnavailable",
    "LiveAgents",
    "PlannedJob",
    "TracedSubmit",
    "enqueue",
    "enqueue_together",
    "enqueue_with_ids",
    "plan_batch",
    "plan_one",
    "submit_span",
    "together",
]

# The most bricks one message (one predictor job) carries: a job's time limit is its first request's
# (30 min by default), and a brick costs its job at most its measure settings' max_seconds (0.25 s
# for `mlscope bricks`) plus its session.
MAX_BRICKS_PER_JOB = 200

logger = logging.getLogger("mlscope.api")


class BrokerUnavailable(MlscopeError):
    """The broker did not take a job; the evaluation `evaluation_id` is recorded as failed.

    Args:
        evaluation_id: the evaluation that could not be queued.
        message: what the broker said, with its URL (password removed).
    """

    def __init__(self, evaluation_id: str, message: str) -> None:
        super().__init__(message)
        self.evaluation_id = evaluation_id
        self.message = message


@dataclass(frozen=True)
class LiveAgents:
    """The live agents when a submission was planned, or why they could not be read.

    Attributes:
        agents: the live agents.
        error: why the registry could not be read, or None.
        by_queue: queue → ids of the agents consuming it, when the read indexed them.
    """

    agents: tuple[AgentInfo, ...] = ()
    error: str | None = None
    by_queue: Mapping[str, tuple[str, ...]] | None = None

    @classmethod
    def read(cls, live: LiveCache) -> LiveAgents:
        """The registry's live agents, as routing sees them (`LiveCache`: one registry read when
        nothing changed); an unreachable registry gives none, with the reason."""
        try:
            snapshot = live.snapshot()
        except UserError as exc:
            return cls(error=exc.message)
        return cls(snapshot.agents, by_queue=snapshot.by_queue)

    @classmethod
    def read_current(cls, registry: AgentRegistry) -> LiveAgents:
        """The registry's live agents with their status as of now (`live()`: every agent's record),
        for a choice that weighs what agents are doing; an unreachable registry gives none, with the
        reason."""
        try:
            return cls(tuple(registry.live()))
        except UserError as exc:
            return cls(error=exc.message)

    def serving(self, queue: str) -> list[str]:
        """Ids of the agents consuming `queue`."""
        if self.by_queue is not None:
            return list(self.by_queue.get(queue, ()))
        return [agent.id for agent in self.agents if queue in agent.queues]

    def matching(self, target: Target, framework: str) -> list[AgentInfo]:
        """The agents that serve `target` and have `framework` installed."""
        return [
            agent
            for agent in self.agents
            if framework in agent.frameworks and target.matches(agent.id, agent.capabilities)
        ]

    def queue_warning(self, queue: str, framework: str, target: Target) -> str | None:
        """A warning when no live agent consumes `queue`, or when that cannot be told."""
        if self.error is not None:
            return f"cannot tell whether a live worker serves {queue}: {self.error}"
        if self.serving(queue):
            return None
        if target.agent_id is not None:
            how = f"`mlscope worker` with agent id {target.agent_id}"
        else:
            how = f"`mlscope worker` on a machine with {framework} and capability {target.capability}"
        return f"no live worker serves {queue} yet: the job waits in the queue until one starts ({how})"


@dataclass(frozen=True)
class PlannedJob:
    """One admitted evaluation and the queue it goes to, ready to record and send (the job a predictor
    runs is the contract's `Job`, made from the request when a worker takes it)."""

    admission: Admission
    queue: str
    warnings: tuple[str, ...] = ()
    # The live agents consuming `queue` when it was planned; None when the registry could not be read.
    served_by: tuple[str, ...] | None = None

    @property
    def request(self) -> EvaluationRequest:
        return self.admission.request

    @property
    def target(self) -> str:
        return self.request.effective_target


@dataclass
class BatchPlan:
    """The jobs of a batch, the (model, framework) pairs it skipped and why, and its own warnings."""

    jobs: list[PlannedJob] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # The models are bricks (options.brick): each queue's are sent as one job (`together`).
    bricks: bool = False


def _job(admission: Admission, live: LiveAgents) -> PlannedJob:
    request = admission.request
    target = parse_target(request.effective_target)
    queue = target.queue(request.framework)
    warning = live.queue_warning(queue, request.framework, target)
    served_by = None if live.error is not None else tuple(live.serving(queue))
    return PlannedJob(admission, queue, (warning,) if warning else (), served_by)


def plan_one(request: EvaluationRequest, models: ModelRegistry, live: LiveAgents) -> PlannedJob:
    """Admit one validated request (`workers.admission.admit`, as a farm's api: the worker checks
    its own machine when it takes the job) and route it to its queue.

    Raises:
        UserError: the framework is unknown (field `framework`), the model is unknown or has no
            manifest for the framework (`model`/`framework`, with suggestions), or a measurement
            setting is unknown or out of range (`measure.<name>`).
    """
    return _job(admit(request, models), live)


def _too_many(count: int) -> ApiProblem:
    return ApiProblem(
        422,
        f"the batch expands to {count} evaluations; at most {MAX_BATCH_JOBS} are accepted at once: "
        "split it into smaller batches",
        errors={"models": [f"the matrix expands to {count} evaluations (at most {MAX_BATCH_JOBS})"]},
    )


def _pinned_targets(
    text: str, framework: str, fan_out: bool, live: LiveAgents, warnings: list[str]
) -> list[str]:
    target = parse_target(text)
    if not fan_out or target.agent_id is not None:
        return [text]
    matching = live.matching(target, framework)
    if not matching:
        warnings.append(
            f"fan_out: no live agent matches {text} with {framework}; one job waits on "
            f"{target.queue(framework)} instead"
        )
        return [text]
    return [f"{AGENT_PREFIX}{agent.id}" for agent in matching]


def plan_batch(body: Mapping[str, Any], models: ModelRegistry, live: LiveAgents) -> BatchPlan:
    """Expand a validated batch body into jobs: one per (model, framework, target or agent).

    Args:
        body: the loaded `BatchRequestSchema` document.
        models: the manifests.
        live: the live agents, for fan-out and warnings.

    Raises:
        UserError: an unknown framework (`frameworks.<i>`) or model (`models.<i>`), or a bad
            measurement setting (`measure.<name>`).
        ApiProblem: 422 when no pair has a manifest or the batch expands beyond MAX_BATCH_JOBS;
            503 when fan_out needs the agent registry and it cannot be read.
    """
    frameworks: list[str] = list(dict.fromkeys(body["frameworks"]))
    names: list[str] = list(dict.fromkeys(body["models"]))
    for index, framework in enumerate(body["frameworks"]):
        try:
            check_runnable(get_framework(framework))
        except UserError as exc:
            raise UserError(exc.message, field=f"frameworks.{index}") from None
    for index, name in enumerate(body["models"]):
        try:
            models.frameworks_for(name)
        except UserError as exc:
            raise UserError(exc.message, field=f"models.{index}") from None
    shared = {name: body[name] for name in SHARED_REQUEST_FIELDS if name in body}
    check_measure(shared.get("measure") or {})
    if body.get("bricks"):
        shared["options"] = {**(shared.get("options") or {}), "brick": True}

    plan = BatchPlan(bricks=bool(body.get("bricks")))
    pairs: list[tuple[str, str, Manifest]] = []
    options = ModelOptions.from_dict(shared.get("model_options"))
    for name in names:
        for framework in frameworks:
            try:
                pairs.append((name, framework, models.get(name, framework, options)))
            except UserError as exc:
                plan.skipped.append({"model": name, "framework": framework, "reason": exc.message})
    if not pairs:
        raise ApiProblem(
            422,
            "nothing to evaluate: none of the models has a manifest for any of the frameworks",
            errors={"frameworks": [s["reason"] for s in plan.skipped]},
            skipped=plan.skipped,
        )
    targets: list[str] = body.get("targets") or ["cpu" if shared.get("device", "cpu") == "cpu" else "gpu"]
    targets = list(dict.fromkeys(targets))
    if len(pairs) * len(targets) > MAX_BATCH_JOBS:
        raise _too_many(len(pairs) * len(targets))
    fan_out = bool(body.get("fan_out"))
    if fan_out and live.error is not None:
        raise ApiProblem(503, f"fan_out needs the live agents, but they cannot be read: {live.error}")

    # Each (model, framework, target or agent) once, in order; each admitted by the one admission.
    expanded: dict[tuple[str, str, str], None] = {}
    for name, framework, _ in pairs:
        for text in targets:
            for pinned in _pinned_targets(text, framework, fan_out, live, plan.warnings):
                expanded.setdefault((name, framework, pinned), None)
    if len(expanded) > MAX_BATCH_JOBS:
        raise _too_many(len(expanded))
    for name, framework, pinned in expanded:
        document = {**shared, "model": name, "framework": framework, "target": pinned}
        plan.jobs.append(_job(admit(document, models), live))
    plan.warnings = list(dict.fromkeys(plan.warnings))
    return plan


@contextlib.contextmanager
def submit_span(ctx: ApiContext, trace_level: str, route: str) -> Iterator[TracedSubmit]:
    """Trace a submission: the api's span "POST <route>" (child of the HTTP request's W3C
    `traceparent` when it has one), under which every job it enqueues is traced. When the span
    ends it is stored with each evaluation it created (and sent over OTLP when configured)."""
    tracer = Tracer(trace_level, TraceContext.parse(flask.request.headers.get("traceparent")))
    submit = TracedSubmit(tracer)
    attributes = {"mlscope.process": "api", "http.request.method": "POST", "http.route": route}
    with tracer.span(f"POST {route}", **attributes):
        yield submit
    spans = tracer.drain()
    if not spans or not submit.evaluation_ids:
        return
    try:
        for evaluation_id in submit.evaluation_ids:
            ctx.store.save_spans(evaluation_id, spans)
        export_spans(ctx.settings, spans)
    except Exception as exc:  # the jobs are queued; only the api's own span is missing from the trace
        logger.warning("the api's span of trace %s was not kept: %s", tracer.trace_id, exc)


@dataclass
class TracedSubmit:
    """The tracer of one submission and the evaluations it created."""

    tracer: Tracer
    evaluation_ids: list[str] = field(default_factory=list)


def enqueue(ctx: ApiContext, job: PlannedJob, traced: TracedSubmit | None = None) -> str:
    """Record the job as a queued evaluation and send it to its queue.

    Args:
        traced: the submission's tracer: the evaluation records its trace id, and the message
            carries the W3C trace context the worker continues.

    Returns:
        The evaluation id (also the Celery task id).

    Raises:
        BrokerUnavailable: the broker did not take it; the evaluation is recorded as failed.
        UserError: the store refused the record (naming the field).
    """
    return enqueue_together(ctx, [job], traced)[0]


def enqueue_together(
    ctx: ApiContext, jobs: list[PlannedJob], traced: TracedSubmit | None = None
) -> list[str]:
    """`enqueue_with_ids` with new ids."""
    return enqueue_with_ids(ctx, jobs, [None] * len(jobs), traced)


def enqueue_with_ids(
    ctx: ApiContext, jobs: list[PlannedJob], given: list[str | None], traced: TracedSubmit | None = None
) -> list[str]:
    """Record every job as a queued evaluation and send them to their (one) queue as one message: one
    job's `EvaluationMessage`, or several jobs' `BrickGroupMessage` (a system's bricks, measured in
    one predictor job).

    Returns:
        The evaluation ids, in the order of `jobs` (the first is the Celery task id).

    Raises:
        BrokerUnavailable: the broker did not take the message; every evaluation of it is recorded
            as failed.
        UserError: the store refused a record (naming the field).
    """
    lead = jobs[0]
    tracer = traced.tracer if traced is not None and traced.tracer.enabled("APPLICATION") else None
    ids = [
        ctx.store.create_evaluation(
            **job.admission.record(),
            trace_id=None if tracer is None else tracer.trace_id,
            queue=job.queue,
            id=id,
        )
        for job, id in zip(jobs, given, strict=True)
    ]
    traceparent = ""
    if tracer is not None and traced is not None:
        traced.evaluation_ids.extend(ids)
        traceparent = TraceContext(tracer.trace_id, tracer.current_id).traceparent()
    message: TaskMessage = (
        EvaluationMessage(ids[0], lead.request, lead.queue, traceparent=traceparent)
        if len(jobs) == 1
        else BrickGroupMessage(
            tuple((id, job.request) for id, job in zip(ids, jobs, strict=True)),
            lead.queue,
            traceparent=traceparent,
        )
    )
    try:
        send_evaluation(ctx.celery, message)
    except Exception as exc:  # kombu, redis and amqp each raise their own kinds
        message_text = f"the broker at {redact_url(ctx.broker_url)} did not take the job: {exc}"
        logger.warning("evaluation %s not queued: %s", ids[0], message_text)
        for id in ids:
            ctx.store.fail_evaluation(
                id, error={"type": "BrokerUnavailable", "message": message_text, "phase": "queue"}
            )
        raise BrokerUnavailable(ids[0], message_text) from None
    try:
        ctx.agents.note_queue(lead.queue)
    except UserError as exc:
        # The job is queued; only the queue listing (/queues, metrics) misses it until the next job.
        logger.warning("queue %s not noted in the agent registry: %s", lead.queue, exc)
    return ids


def together(plan: BatchPlan) -> list[list[PlannedJob]]:
    """The plan's jobs as they are sent: with `bricks`, one message per queue (each system's bricks
    in one predictor job, at most MAX_BRICKS_PER_JOB each); otherwise one per job."""
    if not plan.bricks:
        return [[job] for job in plan.jobs]
    by_queue: dict[str, list[PlannedJob]] = {}
    for job in plan.jobs:
        by_queue.setdefault(job.queue, []).append(job)
    return [
        jobs[start : start + MAX_BRICKS_PER_JOB]
        for jobs in by_queue.values()
        for start in range(0, len(jobs), MAX_BRICKS_PER_JOB)
    ]
