"""/api/v1/evaluations/{id}/trace and /layers: an evaluation's spans (a page of them, or the whole
trace for Perfetto) and where its traced inferences spent their time.

The routes are this module's blueprint, nested in the evaluations blueprint by
mlscope.api.evaluations (they are sub-resources of an evaluation: their paths and OpenAPI tag are
evaluations').
"""

from __future__ import annotations

import json
from typing import Any

from flask import Response
from flask.views import MethodView
from marshmallow import Schema, fields, validate

from mlscope.analysis.timeline import chrome_trace
from mlscope.analysis.traces import GROUPINGS, HOTSPOT_LEVELS, layers_report
from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.context import context
from mlscope.api.problems import PROBLEM_MIMETYPE, ProblemSchema
from mlscope.store import iter_spans
from mlscope.store.base import SPAN_BATCH_SIZE
from mlscope.store.records import SPAN_LEVELS

blp = ApiBlueprint("traces", __name__)

__all__ = ["DEFAULT_SPAN_PAGE", "TRACE_FORMATS", "LayersQuerySchema", "TraceQuerySchema"]

TRACE_FORMATS = ("json", "chrome")
DEFAULT_SPAN_PAGE = 1000
MAX_TOP = 1000
# The stores keep offsets as 64-bit integers; a larger one would fail in the database, not here.
MAX_OFFSET = 2**63 - 1
_ONE_OF = "must be one of: {choices}"


class TraceQuerySchema(Schema):
    format = fields.String(
        load_default="json",
        validate=validate.OneOf(TRACE_FORMATS, error=_ONE_OF),
        metadata={
            "description": "json: a page of spans; chrome: the whole trace in the Chrome Trace "
            "Event Format (open it in ui.perfetto.dev), as an attachment"
        },
    )
    level = fields.String(
        validate=validate.OneOf(SPAN_LEVELS, error=_ONE_OF),
        metadata={"description": "only spans of this level"},
    )
    limit = fields.Integer(
        load_default=DEFAULT_SPAN_PAGE,
        validate=validate.Range(min=1, max=SPAN_BATCH_SIZE, error="must be between {min} and {max}"),
        metadata={"description": "json: at most this many spans"},
    )
    offset = fields.Integer(
        load_default=0,
        validate=validate.Range(min=0, max=MAX_OFFSET, error="must be between {min} and {max}"),
        metadata={"description": "json: skip this many spans (ordered by start, then span id)"},
    )


class TracePageSchema(Schema):
    evaluation_id = fields.String()
    trace_id = fields.String(allow_none=True)
    trace_level = fields.String()
    level = fields.String(allow_none=True, metadata={"description": "the level asked for, if any"})
    count = fields.Integer(metadata={"description": "spans in this page"})
    total = fields.Integer(metadata={"description": "spans of the evaluation, every level"})
    limit = fields.Integer()
    offset = fields.Integer()
    spans = fields.List(
        fields.Dict(),
        metadata={"description": "{trace_id, span_id, parent_id, name, level, start_ns, end_ns, attributes}"},
    )


class LayersQuerySchema(Schema):
    group_by = fields.String(
        load_default="layer_type",
        validate=validate.OneOf(GROUPINGS, error=_ONE_OF),
        metadata={"description": "how layer rows are grouped"},
    )
    top = fields.Integer(
        load_default=10,
        validate=validate.Range(min=1, max=MAX_TOP, error="must be between {min} and {max}"),
        metadata={"description": "hotspots per batch size"},
    )
    level = fields.String(
        validate=validate.OneOf(HOTSPOT_LEVELS, error=_ONE_OF),
        metadata={"description": "the hotspots' pass [default: LIBRARY when traced, else FRAMEWORK]"},
    )


class LayersSchema(Schema):
    evaluation_id = fields.String()
    trace_level = fields.String()
    group_by = fields.String()
    top = fields.Integer()
    hotspot_level = fields.String()
    rows = fields.List(
        fields.Dict(),
        metadata={
            "description": "{batch_size, key, calls, total_ms, mean_ms, share, per_inference_ms}: the "
            "FRAMEWORK pass per layer group, with the row '(between layers)'"
        },
    )
    hotspots = fields.List(
        fields.Dict(),
        metadata={"description": "{batch_size, level, key, calls, total_ms, mean_ms, self_ms, share, ...}"},
    )
    kernels = fields.List(
        fields.Dict(),
        metadata={"description": "{batch_size, by: kernel|layer, key, calls, total_ms, mean_ms, share}"},
    )


_NOT_FOUND = {
    "schema": ProblemSchema,
    "content_type": PROBLEM_MIMETYPE,
    "description": "No evaluation has this id",
}


@blp.route("/<evaluation_id:evaluation_id>/trace")
class EvaluationTrace(MethodView):
    @blp.arguments(TraceQuerySchema, location="query")
    @blp.response(200, TracePageSchema)
    @blp.alt_response(
        200,
        success=True,
        content_type="application/json",
        schema={"type": "object"},
        description="format=chrome: {traceEvents, displayTimeUnit, otherData}, as <id>.trace.json",
    )
    @blp.alt_response(404, **_NOT_FOUND)
    def get(self, query: dict[str, Any], evaluation_id: str) -> Any:
        """Read an evaluation's trace

        The json format pages through the spans; chrome answers the whole trace (narrowed by
        `level`) in the Chrome Trace Event Format, which Perfetto and chrome://tracing open. An
        evaluation without spans answers empty.
        """
        store = context().store
        evaluation = store.get_evaluation(evaluation_id)
        full_id = evaluation["id"]
        level = query.get("level")
        if query["format"] == "chrome":
            document = chrome_trace(evaluation, iter_spans(store, full_id, level))
            return Response(
                json.dumps(document, separators=(",", ":")),
                mimetype="application/json",
                headers={"Content-Disposition": f'attachment; filename="{full_id}.trace.json"'},
            )
        spans = store.get_spans(full_id, level=level, limit=query["limit"], offset=query["offset"])
        return {
            "evaluation_id": full_id,
            "trace_id": evaluation.get("trace_id"),
            "trace_level": evaluation["trace_level"],
            "level": level,
            "count": len(spans),
            "total": store.count_spans(full_id),
            "limit": query["limit"],
            "offset": query["offset"],
            "spans": spans,
        }


@blp.route("/<evaluation_id:evaluation_id>/layers")
class EvaluationLayers(MethodView):
    @blp.arguments(LayersQuerySchema, location="query")
    @blp.response(200, LayersSchema)
    @blp.alt_response(404, **_NOT_FOUND)
    def get(self, query: dict[str, Any], evaluation_id: str) -> dict[str, Any]:
        """Where an evaluation's traced inferences spent their time

        Per batch size: the FRAMEWORK pass's time per layer group as shares of its inferences,
        the top operators (or layers) of a profiling pass, and device kernels by name and layer.
        Lists are empty when the evaluation was not traced that deep.
        """
        store = context().store
        evaluation = store.get_evaluation(evaluation_id)
        spans = [
            span
            for level in ("MODEL", "FRAMEWORK", "LIBRARY")
            for span in iter_spans(store, evaluation["id"], level)
        ]
        report = layers_report(spans, group_by=query["group_by"], top=query["top"], level=query.get("level"))
        return {"evaluation_id": evaluation["id"], "trace_level": evaluation["trace_level"], **report}
