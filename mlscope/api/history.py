"""/api/v1/history: how one model on one framework performed over time at one scenario and batch size,
a point per succeeded evaluation (the store's `history`)."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import Schema, fields, validate

from mlscope.store.records.history import DEFAULT_HISTORY_POINTS, MAX_HISTORY_POINTS

from .blueprint import ApiBlueprint
from .context import context
from .schemas import ListQuerySchema

__all__ = ["HistoryQuerySchema", "HistorySchema", "blp"]

blp = ApiBlueprint(
    "history",
    __name__,
    url_prefix="/api/v1",
    description="Follow one model's performance over time.",
)


def _text(description: str, **options: Any) -> fields.String:
    return fields.String(
        validate=validate.Length(min=1, max=255), metadata={"description": description}, **options
    )


class HistoryQuerySchema(Schema):
    model = _text("the model's name", required=True)
    framework = _text("the framework's name", required=True)
    system_id = _text("only evaluations on this system")
    device = _text("only evaluations on this device (cpu, cuda:0, ...)")
    scenario = _text("the scenario each point is measured in", load_default="single_stream")
    batch_size = fields.Integer(
        load_default=1,
        validate=validate.Range(min=1, max=2**31 - 1, error="must be between {min} and {max}"),
        metadata={"description": "the batch size each point is measured at"},
    )
    since = ListQuerySchema._declared_fields["since"]
    until = ListQuerySchema._declared_fields["until"]
    limit = fields.Integer(
        load_default=DEFAULT_HISTORY_POINTS,
        validate=validate.Range(min=1, max=MAX_HISTORY_POINTS, error="must be between {min} and {max}"),
        metadata={"description": "at most this many points: the latest ones"},
    )


class HistoryPointSchema(Schema):
    evaluation_id = fields.String()
    created_at = fields.String(metadata={"description": "ISO 8601, UTC"})
    system_id = fields.String(allow_none=True)
    device = fields.String()
    median_ms = fields.Float(allow_none=True)
    ci_low_ms = fields.Float(allow_none=True, metadata={"description": "the median's confidence interval"})
    ci_high_ms = fields.Float(allow_none=True)
    p99_ms = fields.Float(allow_none=True)
    throughput = fields.Float(allow_none=True, metadata={"description": "samples per second"})
    valid = fields.Boolean(allow_none=True)


class HistorySchema(Schema):
    model = fields.String()
    framework = fields.String()
    system_id = fields.String(allow_none=True)
    device = fields.String(allow_none=True)
    scenario = fields.String()
    batch_size = fields.Integer()
    points = fields.List(fields.Nested(HistoryPointSchema), metadata={"description": "oldest first"})


@blp.route("/history")
class History(MethodView):
    @blp.arguments(HistoryQuerySchema, location="query")
    @blp.response(200, HistorySchema)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """A model's performance over time

        A point per succeeded evaluation of the model on the framework that measured the
        scenario at the batch size, oldest first (the latest `limit` of them); `system_id`,
        `device`, `since` and `until` narrow them.
        """
        series = {
            "model": query["model"],
            "framework": query["framework"],
            "system_id": query.get("system_id"),
            "device": query.get("device"),
            "scenario": query["scenario"],
            "batch_size": query["batch_size"],
        }
        points = context().store.history(
            **series, since=query.get("since"), until=query.get("until"), limit=query["limit"]
        )
        return {**series, "points": points}
