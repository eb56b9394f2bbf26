"""/api/v1/evaluations/export: every evaluation a listing's filters match, streamed as JSON lines (one
evaluation in the result shape per line) or CSV (one line per measurement), read from the store a page
at a time through its keyset cursor, so the API's memory stays flat however many there are.

The route is this module's blueprint, nested in the evaluations blueprint by mlscope.api.evaluations
(an export is a view of that collection: its path and its OpenAPI tag are evaluations').
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from flask import Response
from flask.views import MethodView
from marshmallow import Schema, fields, validate

from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.context import context
from mlscope.api.schemas import ListQuerySchema
from mlscope.api.streams import CSV_MIMETYPE, JSONL_MIMETYPE, csv_lines, jsonl_lines, started

blp = ApiBlueprint("export", __name__)

__all__ = ["EXPORT_COLUMNS", "EXPORT_FORMATS", "ExportQuerySchema", "export_rows"]

EXPORT_FORMATS = ("jsonl", "csv")
_FILTERS = ("model", "framework", "system", "status", "since", "until")
# The CSV columns: the evaluation's, then its measurement's (empty for an evaluation without any).
EXPORT_COLUMNS: tuple[str, ...] = (
    "evaluation_id",
    "status",
    "model",
    "model_version",
    "framework",
    "framework_version",
    "system_id",
    "hostname",
    "runner",
    "device",
    "trace_level",
    "created_at",
    "started_at",
    "finished_at",
    "error_type",
    "error_message",
    "scenario",
    "batch_size",
    "count",
    "mean_ms",
    "median_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "ci_low_ms",
    "ci_high_ms",
    "throughput",
    "valid",
    "reasons",
    # The evaluation's result sections, on each of its lines; empty when not measured.
    "top1",
    "top5",
    "parity",
)

ExportQuerySchema: type[Schema] = Schema.from_dict(
    {
        **{name: ListQuerySchema._declared_fields[name] for name in _FILTERS},
        "format": fields.String(
            load_default="jsonl",
            validate=validate.OneOf(EXPORT_FORMATS, error="must be one of: {choices}"),
            metadata={"description": "jsonl: one evaluation per line; csv: one line per measurement"},
        ),
    },
    name="EvaluationExportQuery",
)


def export_rows(evaluations: Iterable[Mapping[str, Any]]) -> Iterator[list[Any]]:
    """The CSV rows (EXPORT_COLUMNS) of evaluations in the result shape: one per measurement, or one
    with empty measurement columns for an evaluation that has none."""
    for e in evaluations:
        system = e.get("system") or {}
        error = e.get("error") or {}
        head = [
            e["id"],
            e["status"],
            e["model"]["name"],
            e["model"].get("version"),
            e["framework"]["name"],
            e["framework"].get("version"),
            system.get("id"),
            system.get("hostname"),
            e["runner"],
            e["device"],
            e["trace_level"],
            e["created_at"],
            e["started_at"],
            e["finished_at"],
            error.get("type"),
            error.get("message"),
        ]
        accuracy, parity = e.get("accuracy") or {}, e.get("parity") or {}
        sections = [accuracy.get("top1"), accuracy.get("top5"), parity.get("verdict")]
        if not e["measurements"]:
            yield head + [None] * (len(EXPORT_COLUMNS) - len(head) - len(sections)) + sections
        for m in e["measurements"]:
            latency = m.get("latency_ms") or {}
            validity = m.get("validity") or {}
            ci = latency.get("median_ci") or [None, None]
            yield [
                *head,
                m["scenario"],
                m["batch_size"],
                latency.get("count"),
                latency.get("mean"),
                latency.get("median"),
                latency.get("p90"),
                latency.get("p95"),
                latency.get("p99"),
                ci[0],
                ci[1],
                m.get("throughput"),
                validity.get("valid"),
                validity.get("reasons"),
                *sections,
            ]


@blp.route("/export")
class EvaluationExport(MethodView):
    @blp.arguments(ExportQuerySchema, location="query")
    @blp.response(
        200,
        {"type": "string"},
        content_type=JSONL_MIMETYPE,
        description="format=jsonl: one evaluation per line, in the result shape, newest first",
    )
    @blp.alt_response(
        200,
        success=True,
        content_type=CSV_MIMETYPE,
        schema={"type": "string"},
        description="format=csv: a header row of the columns, then one line per measurement",
    )
    def get(self, query: dict[str, Any]) -> Response:
        """Export evaluations

        Every evaluation the filters match (as listing them would, newest first), streamed as it
        is read from the store, however many there are: JSON lines, or CSV with one line per
        measurement. Raw latencies are not included.
        """
        # The filters are checked here, before the first byte is sent: a bad one is still a 422.
        evaluations = context().store.iter_evaluations(
            model=query.get("model"),
            framework=query.get("framework"),
            system_id=query.get("system"),
            status=query.get("status"),
            since=query.get("since"),
            until=query.get("until"),
        )
        extension = query["format"]
        if extension == "csv":
            body, mimetype = csv_lines(EXPORT_COLUMNS, export_rows(evaluations)), CSV_MIMETYPE
        else:
            body, mimetype = jsonl_lines(evaluations), JSONL_MIMETYPE
        disposition = f'attachment; filename="evaluations.{extension}"'
        return Response(started(body), mimetype=mimetype, headers={"Content-Disposition": disposition})
