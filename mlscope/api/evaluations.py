"""/api/v1/evaluations: submit one or a batch, list, read and cancel evaluations."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from flask import url_for
from flask.views import MethodView

from mlscope.api import export, traces
from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.context import ApiContext, bounded, context
from mlscope.api.problems import PROBLEM_MIMETYPE, ApiProblem, ProblemSchema
from mlscope.api.schemas import (
    BatchAcceptedSchema,
    BatchRequestSchema,
    CancelledSchema,
    EvaluationAcceptedSchema,
    EvaluationPageSchema,
    EvaluationQuerySchema,
    EvaluationRequestSchema,
    EvaluationSchema,
    ListQuerySchema,
)
from mlscope.api.split import enqueue_split, plan_split, split_requested
from mlscope.api.submit import (
    BrokerUnavailable,
    LiveAgents,
    PlannedJob,
    enqueue,
    enqueue_together,
    plan_batch,
    plan_one,
    submit_span,
    together,
)
from mlscope.contract.errors import UserError
from mlscope.contract.load import Shard
from mlscope.contract.request import EvaluationRequest
from mlscope.contract.result import EvaluationResult
from mlscope.store.errors import EvaluationNotFound

__all__ = ["blp", "list_filters"]

F = TypeVar("F", bound=Callable[..., Any])
logger = logging.getLogger("mlscope.api")
# Revoking tells live workers to drop the job; the store's `cancelled` is what counts, so a broker that
# is slow to take the broadcast is not waited for.
REVOKE_TIMEOUT_S = 2.0
WRITE_SECURITY: list[dict[str, list[str]]] = [{"bearerAuth": []}]

blp = ApiBlueprint(
    "evaluations",
    __name__,
    url_prefix="/api/v1/evaluations",
    description="Submit evaluations to the farm, follow them and cancel them.",
)
blp.register_blueprint(export.blp)
blp.register_blueprint(traces.blp)


def _a_write(broker_failure: str) -> Callable[[F], F]:
    """Documents what a write can answer besides success: no or a wrong token, writes disabled, the
    broker down; and that it needs the bearer token."""

    def document(view: F) -> F:
        for status, description in (
            (503, broker_failure),
            (403, "Writes are disabled (no tokens configured)"),
            (401, "No token, or a wrong one"),
        ):
            view = blp.alt_response(
                status, schema=ProblemSchema, content_type=PROBLEM_MIMETYPE, description=description
            )(view)
        documented: F = blp.doc(security=WRITE_SECURITY)(view)
        return documented

    return document


def list_filters(query: dict[str, Any]) -> dict[str, Any]:
    """The store's filters (Store.page_evaluations) from a ListQuerySchema query: what GET
    /api/v1/evaluations and the dashboard's list both filter by."""
    return {
        "model": query.get("model"),
        "framework": query.get("framework"),
        "system_id": query.get("system"),
        "status": query.get("status"),
        "since": query.get("since"),
        "until": query.get("until"),
    }


def _url(evaluation_id: str) -> str:
    return url_for("evaluations.EvaluationById", evaluation_id=evaluation_id)


def _served_by(job: PlannedJob) -> list[str] | None:
    return None if job.served_by is None else list(job.served_by)


def _unavailable(exc: BrokerUnavailable, **extra: Any) -> ApiProblem:
    return ApiProblem(
        503,
        f"evaluation {exc.evaluation_id} could not be queued and is recorded as failed: {exc.message}",
        failed=exc.evaluation_id,
        **extra,
    )


@blp.route("")
class Evaluations(MethodView):
    @blp.arguments(ListQuerySchema, location="query")
    @blp.response(200, EvaluationPageSchema)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """List evaluations, newest first

        Filters combine; `since` and `until` are ISO 8601 times with a timezone. Page by `offset`,
        or by `cursor`: the `next_cursor` of the previous page (null on the last one), which stays
        put while evaluations are added.
        """
        store = context().store
        filters = list_filters(query)
        items, next_cursor = store.page_evaluations(
            **filters, limit=query["limit"], offset=query["offset"], cursor=query.get("cursor")
        )
        total = store.count_evaluations(**filters)
        return {
            "items": items,
            "total": total,
            "limit": query["limit"],
            "offset": query["offset"],
            "next_cursor": next_cursor,
        }

    @blp.arguments(EvaluationRequestSchema, description="One model on one framework")
    @blp.response(
        202,
        EvaluationAcceptedSchema,
        headers={"Location": {"description": "the evaluation's URL", "schema": {"type": "string"}}},
    )
    @_a_write(broker_failure="The broker did not take the job")
    def post(self, request: EvaluationRequest) -> tuple[dict[str, Any], int, dict[str, str]]:
        """Submit an evaluation

        The job is recorded as queued and sent to the queue of its framework and target
        (`pytorch@cpu`, `agent@<id>`). `served_by` lists the live agents consuming that queue; when
        it is empty no live agent can run the job yet, and a warning says what would serve it.
        """
        ctx = context()
        if split_requested(request):
            return _post_split(ctx, request)
        job = plan_one(request, ctx.models, LiveAgents.read(ctx.live))
        try:
            with submit_span(ctx, request.trace_level, "/api/v1/evaluations") as traced:
                evaluation_id = enqueue(ctx, job, traced)
        except BrokerUnavailable as exc:
            raise _unavailable(exc) from None
        url = _url(evaluation_id)
        body = {
            "id": evaluation_id,
            "status": "queued",
            "queue": job.queue,
            "target": job.target,
            "warnings": list(job.warnings),
            "served_by": _served_by(job),
            "links": {"self": url},
        }
        return body, 202, {"Location": url}


def _post_split(ctx: ApiContext, request: EvaluationRequest) -> tuple[dict[str, Any], int, dict[str, str]]:
    """A load split across agents: the group's id answers, its parts listed (docs/farm.md)."""
    # Not the routing cache: the split prefers idle agents, and status is what the cache lets age.
    plan = plan_split(request, ctx.models, LiveAgents.read_current(ctx.agents), ctx.agents)
    try:
        with submit_span(ctx, request.trace_level, "/api/v1/evaluations") as traced:
            ids = enqueue_split(ctx, plan, traced)
    except BrokerUnavailable as exc:
        raise _unavailable(exc) from None
    url = _url(plan.group_id)
    parts = [
        {"id": part_id, "agent": (job.served_by or ("",))[0], "queue": job.queue}
        for part_id, job in zip(ids, plan.parts, strict=True)
    ]
    body = {
        "id": plan.group_id,
        "status": "queued",
        "target": request.target,
        "warnings": [],
        "served_by": [part["agent"] for part in parts],
        "parts": parts,
        "links": {"self": url},
    }
    return body, 202, {"Location": url}


def _revoke(ctx: ApiContext, evaluation_id: str) -> None:
    """Tell live workers to drop a cancelled evaluation's job."""
    try:
        bounded(lambda: ctx.celery.control.revoke(evaluation_id), REVOKE_TIMEOUT_S)
    except Exception as exc:  # the store already says cancelled; workers check it
        logger.warning("could not revoke %s through the broker: %s", evaluation_id, exc)


def _cancel_part(ctx: ApiContext, part_id: str) -> bool:
    """Cancel one part of a cancelled group; False when it is not (or no longer) running."""
    try:
        return ctx.store.cancel_evaluation(part_id)
    except EvaluationNotFound:  # a part the API could not record before the broker failed
        return False


@blp.route("/batch")
class EvaluationBatch(MethodView):
    @blp.arguments(BatchRequestSchema, description="Models × frameworks × targets")
    @blp.response(202, BatchAcceptedSchema)
    @_a_write(broker_failure="The broker did not take a job")
    def post(self, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """Submit a matrix of evaluations

        One evaluation per (model, framework, target), each measuring every batch size. With
        `fan_out`, a capability target becomes one evaluation per live agent that matches it and
        has the framework, pinned to that agent. Pairs without a manifest are skipped, with the
        reason. With `bricks`, every model is a brick (a one-node ONNX graph, `options.brick`) and
        each queue's are measured together in one predictor job, each still an evaluation of its
        own. Everything is checked before anything is stored; at most 500 evaluations.
        """
        ctx = context()
        if (body.get("load") or {}).get("shard") is not None or (body.get("load") or {}).get("agents", 1) > 1:
            raise UserError(
                "a batch runs each evaluation on one agent: submit a split load (load.agents) on its own",
                field="load.agents",
            )
        plan = plan_batch(body, ctx.models, LiveAgents.read(ctx.live))
        created: list[dict[str, Any]] = []
        # One trace for the whole batch: its evaluations are one comparison.
        trace_level = plan.jobs[0].request.trace_level if plan.jobs else "NO_TRACE"
        with submit_span(ctx, trace_level, "/api/v1/evaluations/batch") as traced:
            for jobs in together(plan):
                try:
                    evaluation_ids = enqueue_together(ctx, jobs, traced)
                except BrokerUnavailable as exc:
                    queued = [c["id"] for c in created]
                    raise _unavailable(
                        exc, queued=queued, not_submitted=len(plan.jobs) - len(created) - len(jobs)
                    ) from None
                created.extend(
                    {
                        "id": evaluation_id,
                        "model": job.request.model,
                        "framework": job.request.framework,
                        "target": job.target,
                        "queue": job.queue,
                        "warnings": list(job.warnings),
                        "served_by": _served_by(job),
                    }
                    for evaluation_id, job in zip(evaluation_ids, jobs, strict=True)
                )
        ids = ",".join(c["id"] for c in created)
        return {
            "evaluations": created,
            "skipped": plan.skipped,
            "warnings": plan.warnings,
            "compare_url": f"{url_for('compare.Compare')}?ids={ids}",
        }, 202


@blp.route("/<evaluation_id:evaluation_id>")
class EvaluationById(MethodView):
    @blp.arguments(EvaluationQuerySchema, location="query")
    @blp.response(200, EvaluationSchema)
    @blp.alt_response(
        404, schema=ProblemSchema, content_type=PROBLEM_MIMETYPE, description="No evaluation has this id"
    )
    def get(self, query: dict[str, Any], evaluation_id: str) -> EvaluationResult:
        """Read one evaluation

        `evaluation_id` is the id or a unique prefix of it (at least 4 characters); an ambiguous
        prefix answers 422 with the candidates.
        """
        return context().store.get_evaluation(evaluation_id, include_raw=query["raw"])

    @blp.response(200, CancelledSchema)
    @blp.alt_response(
        404, schema=ProblemSchema, content_type=PROBLEM_MIMETYPE, description="No evaluation has this id"
    )
    @blp.doc(security=WRITE_SECURITY)
    def delete(self, evaluation_id: str) -> dict[str, Any]:
        """Cancel an evaluation

        A queued or running evaluation becomes cancelled (`cancelled: true`); one that has ended
        is left as it is (`cancelled: false`). Live workers are told to drop the job.
        """
        ctx = context()
        full_id = ctx.store.resolve_id(evaluation_id)
        cancelled = ctx.store.cancel_evaluation(full_id)
        if cancelled:
            # A split load's group: its parts are cancelled with it (docs/farm.md).
            agents = int((ctx.store.get_evaluation(full_id)["request"].get("load") or {}).get("agents") or 1)
            for id in (full_id, *(Shard.part_ids(full_id, agents) if agents > 1 else ())):
                if id != full_id and not _cancel_part(ctx, id):
                    continue
                _revoke(ctx, id)
        status = ctx.store.get_evaluation(full_id)["status"]
        return {"id": full_id, "status": status, "cancelled": cancelled}
