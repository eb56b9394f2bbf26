"""/api/v1/history: how one model performed over time at one scenario and batch size, a point per
succeeded evaluation (the store's `history`) with the series' change points (analysis.history);
/api/v1/history/series: the series a filter selects; /api/v1/history/regressions: the series that
shifted for the worse since a date."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import Schema, fields, validate

from mlscope.analysis.changepoints import DetectionSettings
from mlscope.analysis.history import DEFAULT_THRESHOLD, read_series, regressions
from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.context import context
from mlscope.api.schemas import ListQuerySchema
from mlscope.store.records.history import DEFAULT_HISTORY_POINTS, MAX_HISTORY_POINTS, SERIES_KEY_FIELDS

__all__ = ["HistoryQuerySchema", "HistorySchema", "RegressionsQuerySchema", "blp"]

blp = ApiBlueprint(
    "history",
    __name__,
    url_prefix="/api/v1",
    description="Follow one model's performance over time: its points, change points and regressions.",
)


def _text(description: str, **options: Any) -> fields.String:
    return fields.String(
        validate=validate.Length(min=1, max=255), metadata={"description": description}, **options
    )


def _fraction(description: str, default: float, *, zero: bool) -> fields.Float:
    """A fraction below 1, from 0 when `zero` is allowed, else above it."""
    above = "from 0" if zero else "above 0"
    return fields.Float(
        load_default=default,
        validate=validate.Range(
            min=0, max=1, min_inclusive=zero, max_inclusive=False, error=f"must be {above} and below 1"
        ),
        metadata={"description": description},
    )


_SINCE = ListQuerySchema._declared_fields["since"]
_UNTIL = ListQuerySchema._declared_fields["until"]
# `since` as the listings have it, but required.
_REQUIRED_SINCE = fields.AwareDateTime(
    format="iso",
    required=True,
    error_messages=_SINCE.error_messages,
    metadata={"description": "change points at or after this time (ISO 8601 with a time zone)"},
)


class DetectionQuerySchema(Schema):
    """How change points are looked for (analysis.changepoints.DetectionSettings)."""

    significance = _fraction(
        "a change point is kept when its permutation p-value is at most this",
        DetectionSettings.significance,
        zero=False,
    )
    min_segment = fields.Integer(
        load_default=DetectionSettings.min_segment,
        validate=validate.Range(min=2, max=MAX_HISTORY_POINTS, error="must be between {min} and {max}"),
        metadata={"description": "the fewest points either side of a change point"},
    )
    valid_only = fields.Boolean(
        load_default=False,
        metadata={"description": "look for change points among valid points only"},
    )


class SeriesQuerySchema(Schema):
    model = _text("the model's name")
    framework = _text("the framework's name")
    manifest_sha256 = _text("only evaluations of this manifest")
    framework_version = _text("only evaluations on this framework version")
    system_id = _text("only evaluations on the machine and software stack this system was measured on")
    machine_id = _text("only evaluations on this machine (its hardware: docs/history.md)")
    stack_id = _text("only evaluations on this software stack (docs/history.md)")
    device = _text("only evaluations on this device (cpu, cuda:0, ...)")
    scenario = _text("only points measured in this scenario")
    batch_size = fields.Integer(
        validate=validate.Range(min=1, max=2**31 - 1, error="must be between {min} and {max}"),
        metadata={"description": "only points measured at this batch size"},
    )
    since = _SINCE
    until = _UNTIL


class HistoryQuerySchema(SeriesQuerySchema, DetectionQuerySchema):
    model = _text("the model's name", required=True)
    framework = _text("the framework's name", required=True)
    scenario = _text("the scenario each point is measured in", load_default="single_stream")
    batch_size = fields.Integer(
        load_default=1,
        validate=validate.Range(min=1, max=2**31 - 1, error="must be between {min} and {max}"),
        metadata={"description": "the batch size each point is measured at"},
    )
    limit = fields.Integer(
        load_default=DEFAULT_HISTORY_POINTS,
        validate=validate.Range(min=1, max=MAX_HISTORY_POINTS, error="must be between {min} and {max}"),
        metadata={"description": "at most this many points: the latest ones"},
    )


class RegressionsQuerySchema(DetectionQuerySchema):
    since = _REQUIRED_SINCE
    until = _UNTIL
    threshold = _fraction("the smallest rise of the median counted (0.02: 2%)", DEFAULT_THRESHOLD, zero=True)
    model = _text("only series of this model")
    framework = _text("only series on this framework")
    system_id = _text("only series on this system")
    allow_different = fields.Boolean(
        load_default=False,
        metadata={
            "description": "count a rise whose runs before and after measured different workloads (load "
            "or generation settings, predictor options) as a regression, listing the differences; false: "
            "such a rise is listed under `refused`, not counted"
        },
    )


class HistoryPointSchema(Schema):
    evaluation_id = fields.String()
    created_at = fields.String(metadata={"description": "ISO 8601, UTC"})
    system_id = fields.String(allow_none=True)
    device = fields.String()
    manifest_sha256 = fields.String(allow_none=True)
    framework_version = fields.String(allow_none=True)
    median_ms = fields.Float(allow_none=True)
    ci_low_ms = fields.Float(allow_none=True, metadata={"description": "the median's confidence interval"})
    ci_high_ms = fields.Float(allow_none=True)
    p99_ms = fields.Float(allow_none=True)
    throughput = fields.Float(allow_none=True, metadata={"description": "samples per second"})
    valid = fields.Boolean(allow_none=True)
    workload_key = fields.String(
        allow_none=True,
        metadata={"description": "the workload measured: points with different keys measured different ones"},
    )
    machine_id = fields.String(allow_none=True, metadata={"description": "the machine's id (its hardware)"})
    stack_id = fields.String(allow_none=True, metadata={"description": "the software stack's id"})


class ChangePointSchema(Schema):
    index = fields.Integer(metadata={"description": "the position among the points of the first after it"})
    evaluation_id = fields.String(metadata={"description": "the first evaluation after the shift"})
    created_at = fields.String(metadata={"description": "ISO 8601, UTC"})
    median_before_ms = fields.Float(metadata={"description": "the median of the segment before"})
    median_after_ms = fields.Float(metadata={"description": "the median of the segment after"})
    ratio = fields.Float(metadata={"description": "median_after_ms / median_before_ms"})
    shift_pct = fields.Float(metadata={"description": "(ratio − 1) × 100: above 0, slower"})
    confidence = fields.Float(metadata={"description": "1 − p_value"})
    p_value = fields.Float(metadata={"description": "the permutation test's"})


class DetectionSchema(Schema):
    method = fields.String()
    significance = fields.Float()
    min_segment = fields.Integer()
    permutations = fields.Integer()
    seed = fields.Integer()
    valid_only = fields.Boolean()
    points = fields.Integer(metadata={"description": "how many points were searched"})
    note = fields.String(
        allow_none=True,
        metadata={"description": "why change_points is null: too short (how many more points), or mixed"},
    )


class SeriesKeySchema(Schema):
    model = fields.String()
    manifest_sha256 = fields.String(allow_none=True)
    framework = fields.String()
    framework_version = fields.String(allow_none=True)
    machine_id = fields.String(allow_none=True, metadata={"description": "the machine's id (its hardware)"})
    stack_id = fields.String(allow_none=True, metadata={"description": "the software stack's id"})
    system_id = fields.String(
        allow_none=True, metadata={"description": "a system id it was measured under (the greatest)"}
    )
    device = fields.String()
    scenario = fields.String()
    batch_size = fields.Integer()


class SeriesSummarySchema(SeriesKeySchema):
    points = fields.Integer(metadata={"description": "how many points it has between since and until"})
    first_at = fields.String(metadata={"description": "ISO 8601, UTC"})
    last_at = fields.String(metadata={"description": "ISO 8601, UTC"})


class HistorySchema(Schema):
    model = fields.String()
    framework = fields.String()
    manifest_sha256 = fields.String(allow_none=True)
    framework_version = fields.String(allow_none=True)
    system_id = fields.String(allow_none=True)
    machine_id = fields.String(allow_none=True)
    stack_id = fields.String(allow_none=True)
    device = fields.String(allow_none=True)
    scenario = fields.String()
    batch_size = fields.Integer()
    points = fields.List(fields.Nested(HistoryPointSchema), metadata={"description": "oldest first"})
    change_points = fields.List(
        fields.Nested(ChangePointSchema),
        allow_none=True,
        metadata={"description": "oldest first; null when none could be looked for (see detection.note)"},
    )
    detection = fields.Nested(DetectionSchema)


class WorkloadDifferenceSchema(Schema):
    field = fields.String(metadata={"description": "what differs: a dotted request path, or model"})
    a = fields.Raw(allow_none=True, metadata={"description": "the run before the change point (null: unset)"})
    b = fields.Raw(allow_none=True, metadata={"description": "the series' latest run (null: unset)"})
    text = fields.String(metadata={"description": "the difference in one line"})


class RegressionSchema(Schema):
    series = fields.Nested(SeriesKeySchema)
    display_name = fields.String(
        metadata={"description": "the model with the options it was resolved with, e.g. hf:gpt2[n_layer=2]"}
    )
    median_before_ms = fields.Float(metadata={"description": "before its first change point since `since`"})
    median_after_ms = fields.Float(metadata={"description": "of its latest segment"})
    ratio = fields.Float(metadata={"description": "median_after_ms / median_before_ms"})
    shift_pct = fields.Float(metadata={"description": "(ratio − 1) × 100"})
    change_points = fields.List(fields.Nested(ChangePointSchema), metadata={"description": "since `since`"})
    points = fields.Integer(metadata={"description": "how many points the series has"})
    differences = fields.List(
        fields.Nested(WorkloadDifferenceSchema),
        metadata={"description": "how the runs before and after measured different workloads; [] when alike"},
    )


class TooShortSchema(SeriesKeySchema):
    points = fields.Integer()
    needed = fields.Integer(metadata={"description": "how many more points change points need"})


class RegressionsSchema(Schema):
    since = fields.String()
    until = fields.String(allow_none=True)
    threshold = fields.Float()
    series = fields.Integer(metadata={"description": "how many series with points since `since` were read"})
    too_short = fields.List(fields.Nested(TooShortSchema))
    regressions = fields.List(fields.Nested(RegressionSchema), metadata={"description": "largest first"})
    refused = fields.List(
        fields.Nested(RegressionSchema),
        metadata={
            "description": "rises between runs of different workloads (see `differences`), not counted as "
            "regressions; [] with allow_different"
        },
    )


def _detection(query: dict[str, Any]) -> DetectionSettings:
    return DetectionSettings(
        significance=query["significance"], min_segment=query["min_segment"], valid_only=query["valid_only"]
    )


@blp.route("/history")
class History(MethodView):
    @blp.arguments(HistoryQuerySchema, location="query")
    @blp.response(200, HistorySchema)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """A model's performance over time, with its change points

        A point per succeeded evaluation of the model on the framework that measured the
        scenario at the batch size, oldest first (the latest `limit` of them); `manifest_sha256`,
        `framework_version`, `machine_id`, `stack_id`, `system_id` (the machine and stack it was
        measured on), `device`, `since` and `until` narrow them. The change points
        (E-divisive means with a permutation test over the points' medians) say where the series
        shifted, by how much and how surely; they are null, with a note, when the series is too short
        or the points belong to several series.
        """
        series: dict[str, Any] = {name: query.get(name) for name in (*SERIES_KEY_FIELDS, "system_id")}
        found = read_series(
            context().store,
            **series,
            since=query.get("since"),
            until=query.get("until"),
            limit=query["limit"],
            settings=_detection(query),
        )
        return {**series, **found}


@blp.route("/history/series")
class HistorySeries(MethodView):
    @blp.arguments(SeriesQuerySchema, location="query")
    @blp.response(200, SeriesSummarySchema(many=True))
    def get(self, query: dict[str, Any]) -> list[dict[str, Any]]:
        """The history series a filter selects

        One entry per series key (model + manifest, framework + version, machine + stack + device,
        scenario, batch size) with points matching every given condition, and how many points it has.
        """
        return context().store.history_series(**query)


@blp.route("/history/regressions")
class Regressions(MethodView):
    @blp.arguments(RegressionsQuerySchema, location="query")
    @blp.response(200, RegressionsSchema)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """The series that got slower since a time

        Every series with points since `since`, read whole, whose change points at or after `since`
        together raised the median latency by more than `threshold` (its latest segment's median over
        the one before its first change point since then); series too short to tell are listed apart
        with how many more points they need. A rise between runs that measured different workloads
        is listed under `refused`, naming each difference, unless allow_different.
        """
        return regressions(
            context().store,
            since=query["since"],
            until=query.get("until"),
            threshold=query["threshold"],
            model=query.get("model"),
            framework=query.get("framework"),
            system_id=query.get("system_id"),
            settings=_detection(query),
            allow_different=query["allow_different"],
        )
