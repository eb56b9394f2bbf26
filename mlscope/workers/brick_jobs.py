"""A brick group's job: a farm's bricks (options.brick) of one queue, each an evaluation the api
recorded as queued, measured together in ONE predictor job (mlscope.runtime.bricks), each still
ended on its own. A job kind of its own beside an evaluation's (workers.pipeline): it travels as a
`BrickGroupMessage` and the worker hands it here (docs/bricks.md).

    admit each member (`admit_group`) → store (each queued → running; one the store refuses is
        left out) → runner → one predictor job holding every started member (`Job.group`)
        → store (each member succeeded | failed, its own end from the job's `bricks`)
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlscope.broker.tasks import BrickGroupMessage
from mlscope.contract.errors import UserError
from mlscope.contract.settings import Settings
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.trace.spans import TraceContext, Tracer
from mlscope.store import EvaluationNotFound, InvalidTransition, Store
from mlscope.workers.admission import Admission, admit
from mlscope.workers.leases import Lease, kept
from mlscope.workers.pipeline import (
    Writes,
    keep_spans,
    outcome_status,
    predictor_spans,
    start_evaluation,
    write_ends,
)
from mlscope.workers.runners import get_runner
from mlscope.workers.upload_fetch import UploadFetchError

__all__ = ["SHARED_SETTINGS", "BrickGroupEnd", "Fail", "admit_group", "evaluate_bricks"]

log = logging.getLogger("mlscope.workers")

# Fail(evaluation id, error type, message, phase): how a member that cannot run is failed on its own.
Fail = Callable[[str, str, str, str], None]
# The request fields every member of a group shares with its first: one job measures them alike.
SHARED_SETTINGS = ("framework", "runner", "device", "measure", "options")


@dataclass(frozen=True)
class BrickGroupEnd:
    """How a brick group's job ended.

    Attributes:
        started: the members it measured (those the store started), by evaluation id, in order.
        status: the job's: "succeeded" when it returned each brick's end (a brick may still have
            failed alone), "failed" when it failed as a whole (every started member failed alike),
            "not started" when the store started no member.
        spooled: some end was kept in the spool for the store, to be written later.
    """

    started: tuple[str, ...]
    status: str
    spooled: bool = False


def admit_group(
    message: BrickGroupMessage, models: ModelRegistry, settings: Settings, fail: Fail
) -> list[tuple[str, Admission]]:
    """Each member of the group admitted on this machine, in the message's order; one that cannot be
    (its upload not to be had, a request this machine cannot run, settings that differ from the
    first member's, not a brick) is failed on its own through `fail`, and the others run."""
    first = message.request
    admitted = []
    for evaluation_id, request in message.members:
        differ = [name for name in SHARED_SETTINGS if getattr(request, name) != getattr(first, name)]
        if differ:
            fail(
                evaluation_id,
                "InvalidRequest",
                f"the bricks of one job are measured alike, but this one's {', '.join(differ)} "
                f"differ from its job's ({message.evaluation_id})",
                "validate",
            )
            continue
        if not request.options.get("brick"):
            fail(
                evaluation_id,
                "InvalidRequest",
                "a brick group's members are bricks (options.brick)",
                "validate",
            )
            continue
        try:
            admitted.append((evaluation_id, admit(request, models, here=settings)))
        except UploadFetchError as exc:  # an uploaded model the API could not give
            fail(evaluation_id, type(exc).__name__, exc.message, "fetch")
        except UserError as exc:
            fail(evaluation_id, "InvalidRequest", exc.message, "validate")
    return admitted


def evaluate_bricks(
    members: Sequence[tuple[str, Admission]],
    *,
    store: Store,
    settings: Settings,
    tracer: Tracer,
    writes: Writes,
    system_extra: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    lease: Lease | None = None,
) -> BrickGroupEnd:
    """Run a brick group's admitted members, recorded by the api, in one predictor job and write each
    one's end.

    A member whose start the store refuses (cancelled, or ended by an earlier delivery of the job) is
    left out, as is one started more often than `lease` allows (failed instead); the first started
    member is the job's own brick, the others its `Job.group`, and its evaluation keeps the job's
    spans. Only an interrupt (Ctrl-C) propagates, after every started member is marked cancelled.

    Args:
        members: each (evaluation id, admission), as `admit_group` returns them.
        tracer: the caller's tracer (a farm worker's task span is open in it).
        writes: where each end is written (a farm worker's spool).
        system_extra, cancel, lease: as `workers.pipeline.evaluate`'s.
    """
    started = _start_members(store, members, lease, writes)
    if not started:
        return BrickGroupEnd(started=(), status="not started")
    (own_id, own), *others = started
    traced = tracer.enabled("APPLICATION")
    job = dataclasses.replace(
        own.job(
            own_id,
            cache_dir=str(settings.cache_dir),
            model_store=settings.model_store,
            traceparent=TraceContext(tracer.trace_id, tracer.current_id).traceparent() if traced else "",
        ),
        group=[
            {
                "evaluation_id": id,
                "manifest": member.manifest.to_dict(),
                "origin": member.manifest.origin,
                "batch_size": member.request.batch_sizes[0],
            }
            for id, member in others
        ],
    )
    runner = get_runner(own.request.runner, settings)
    request = own.request
    try:
        with kept(store, [id for id, _ in started], lease):
            outcome = runner.run(
                job,
                lambda event: None,
                timeout_s=request.timeout_s,
                memory_limit_mb=request.memory_limit_mb,
                cancel=cancel,
            )
    except KeyboardInterrupt:
        for id, _ in started:
            store.cancel_evaluation(id)
        raise
    status = outcome_status(outcome)
    with tracer.span("store", status=status):
        stored = write_ends(started, outcome, settings, system_extra, writes)
    spans = [*predictor_spans(outcome), *tracer.drain()]
    stored = keep_spans(writes, settings, own_id, spans) and stored
    return BrickGroupEnd(started=tuple(id for id, _ in started), status=status, spooled=not stored)


def _start_members(
    store: Store, members: Sequence[tuple[str, Admission]], lease: Lease | None, writes: Writes
) -> list[tuple[str, Admission]]:
    """Start each member (recorded by the api as queued); those the store will not start (cancelled,
    or ended by an earlier delivery) are left out, as is one started too often."""
    started = []
    for id, member in members:
        try:
            if start_evaluation(store, id, lease, writes):
                started.append((id, member))
        except (InvalidTransition, EvaluationNotFound) as exc:
            log.info("brick %s is not started: %s", id, exc)
    return started
