"""/api/v1/compare/diff: is evaluation B faster than evaluation A, by how much, and how sure; the same
report `mlscope diff --json` prints (`mlscope.analysis.diff_report`).

The route is this module's blueprint, nested in the compare blueprint by mlscope.api.compare (a diff
is a comparison of two: its path and its OpenAPI tag are compare's). Bad input (an unknown id, a
filter nothing matches, no point in common, two systems with same_system) is a UserError naming the
field, answered 422 with that field's error. A pair that measured different workloads is a 422 whose
`errors` name each differing field (and whose `differences` list them), unless allow_different=true.
"""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import Schema, fields, validate

from mlscope.analysis.diff import DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD, VERDICTS
from mlscope.analysis.diff_report import FILTER_KEYS, DifferentWorkloads, diff_evaluations
from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.context import context
from mlscope.api.problems import ApiProblem

blp = ApiBlueprint("diff", __name__)

__all__ = ["DiffQuerySchema", "DiffSchema", "diff_for"]

_SIDE = (
    "an evaluation id or unique prefix, or a filter key=value,... (keys: "
    + ", ".join(FILTER_KEYS)
    + ") picking the latest succeeded evaluation matching it"
)


class DiffQuerySchema(Schema):
    a = fields.String(
        required=True, validate=validate.Length(min=1, max=1000), metadata={"description": _SIDE}
    )
    b = fields.String(
        required=True, validate=validate.Length(min=1, max=1000), metadata={"description": _SIDE}
    )
    threshold = fields.Float(
        load_default=DEFAULT_THRESHOLD,
        validate=validate.Range(
            min=0,
            max=1,
            min_inclusive=False,
            max_inclusive=False,
            error="must be between 0 and 1 (exclusive)",
        ),
        metadata={"description": "the smallest relative difference that matters (0.02 = 2%)"},
    )
    confidence = fields.Float(
        load_default=DEFAULT_CONFIDENCE,
        validate=validate.Range(
            min=0.5, max=1, max_inclusive=False, error="must be from 0.5 up to 1 (exclusive)"
        ),
        metadata={"description": "the level of every interval"},
    )
    same_system = fields.Boolean(
        load_default=False,
        metadata={"description": "refuse a pair whose machines or software stacks differ (422, naming both)"},
    )
    allow_different = fields.Boolean(
        load_default=False,
        metadata={
            "description": "compare a pair that measured different workloads (model, model options, "
            "predictor options, load or generation settings), listing the differences in `differences`; "
            "false: such a pair is refused, 422 naming each differing field"
        },
    )


class RatioSchema(Schema):
    ratio = fields.Float(metadata={"description": "B / A"})
    ci = fields.List(fields.Float(), metadata={"description": "[low, high] confidence interval of the ratio"})


class PowerSchema(Schema):
    detectable = fields.Float(
        metadata={"description": "the smallest true relative difference detected with `power` probability"}
    )
    samples_needed = fields.Integer(
        allow_none=True,
        metadata={
            "description": "samples per side to detect the threshold; null: the between-run spread forbids"
        },
    )
    more_samples = fields.Integer(
        allow_none=True, metadata={"description": "samples_needed minus the smaller side's count"}
    )
    power = fields.Float()


class InconclusiveSchema(Schema):
    could_call = fields.Float(
        metadata={
            "description": "the smallest true relative difference the rule calls with `power` probability "
            "when separate runs differ by the assumed spread"
        }
    )
    runs_needed = fields.Integer(
        metadata={
            "description": "runs of each series, beyond the pair's own, that would decide (at least 3, so "
            "the series' between-run spread is measured)"
        }
    )
    assumed_between_runs = fields.Float(
        metadata={"description": "the sd of log(median) between runs assumed per side"}
    )
    power = fields.Float()


class AssumedSpreadSchema(Schema):
    sd = fields.Float(metadata={"description": "the sd of log(median) between runs assumed per side"})
    source = fields.String(
        validate=validate.OneOf(("system", "default")),
        metadata={
            "description": "system: pooled over the other series on the sides' systems; default: no "
            "series there has 3 runs (docs/verdicts.md)"
        },
    )
    series = fields.Integer(metadata={"description": "series pooled"})
    runs = fields.Integer(metadata={"description": "runs pooled"})


class DiffPointSchema(Schema):
    scenario = fields.String()
    batch_size = fields.Integer()
    ratio = fields.Float(metadata={"description": "median B / median A"})
    ci = fields.List(fields.Float(), metadata={"description": "the median ratio's interval"})
    verdict = fields.String(
        validate=validate.OneOf(VERDICTS),
        metadata={
            "description": "B against A; inconclusive: no between-run spread is stored and the difference "
            "the run itself shows is no larger than separate runs may differ by"
        },
    )
    power = fields.Nested(PowerSchema)
    change = fields.Float(metadata={"description": "ratio − 1"})
    quantiles = fields.Dict(
        keys=fields.String(), values=fields.Nested(RatioSchema), metadata={"description": "median, p90, p99"}
    )
    superiority = fields.Float(metadata={"description": "P(a B latency < an A latency), ties counted half"})
    se_log_ratio = fields.Float(metadata={"description": "standard error of log(median ratio) used"})
    spread = fields.Dict(
        metadata={
            "description": "per side: standard errors of log(median): resampling, batch medians, between runs"
        }
    )
    counts = fields.List(fields.Integer(), metadata={"description": "[samples of A, samples of B]"})
    other_runs = fields.Dict(
        keys=fields.String(),
        values=fields.Integer(),
        metadata={
            "description": "per side (A, B): other valid runs of its series behind the between-run spread"
        },
    )
    threshold = fields.Float()
    confidence = fields.Float()
    series_known = fields.Boolean(
        metadata={
            "description": "whether a between-run spread was known; false: the verdict also assumes one "
            "(assumed_spread)"
        }
    )
    assumed_between_runs = fields.Float(
        allow_none=True,
        metadata={"description": "the between-run sd assumed per side; null when series_known"},
    )
    assumed_spread = fields.Nested(
        AssumedSpreadSchema, allow_none=True, metadata={"description": "null when series_known"}
    )
    inconclusive = fields.Nested(
        InconclusiveSchema,
        allow_none=True,
        metadata={"description": "what would decide; null unless the verdict is inconclusive"},
    )


class DiffSideSchema(Schema):
    id = fields.String()
    model = fields.String(metadata={"description": "the stored model name"})
    display_name = fields.String(
        metadata={"description": "the model with the options it was resolved with, e.g. hf:gpt2[n_layer=2]"}
    )
    framework = fields.String()
    framework_version = fields.String(allow_none=True)
    system_id = fields.String(allow_none=True)
    machine_id = fields.String(allow_none=True)
    stack_id = fields.String(allow_none=True)
    hostname = fields.String(allow_none=True)
    device = fields.String()
    created_at = fields.String(allow_none=True)
    picked = fields.String(metadata={"description": "how this side was picked"})


class RefusedPointSchema(Schema):
    scenario = fields.String()
    batch_size = fields.Integer()
    reason = fields.String()


class UnmatchedPointSchema(Schema):
    side = fields.String(metadata={"description": "A or B: the side that measured it"})
    scenario = fields.String()
    batch_size = fields.Integer()


class DifferenceSchema(Schema):
    field = fields.String(
        metadata={"description": "what differs: a dotted request path, or model, model manifest"}
    )
    a = fields.Raw(allow_none=True, metadata={"description": "A's value (null: unset)"})
    b = fields.Raw(allow_none=True, metadata={"description": "B's value (null: unset)"})
    text = fields.String(metadata={"description": "the difference in one line"})


class DiffSchema(Schema):
    a = fields.Nested(DiffSideSchema)
    b = fields.Nested(DiffSideSchema)
    threshold = fields.Float()
    confidence = fields.Float()
    points = fields.List(fields.Nested(DiffPointSchema))
    refused = fields.List(
        fields.Nested(RefusedPointSchema), metadata={"description": "points not compared, why"}
    )
    unmatched = fields.List(fields.Nested(UnmatchedPointSchema), metadata={"description": "one side's only"})
    differences = fields.List(
        fields.Nested(DifferenceSchema),
        metadata={
            "description": "how A and B measured different workloads (only with allow_different; [] when "
            "alike): the verdicts compare unlike things"
        },
    )


@blp.route("/compare/diff")
class CompareDiff(MethodView):
    @blp.arguments(DiffQuerySchema, location="query")
    @blp.response(200, DiffSchema)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """Is B faster than A?

        Per (scenario, batch size) both evaluations measured: the ratios B/A of the medians, p90s
        and p99s with bootstrap intervals, the probability of superiority, a verdict at the
        threshold and what the pair could detect. Points whose measurement is not valid are
        refused with the reason. A pair that measured different workloads is refused (422, each
        differing field named) unless allow_different=true, which lists them in `differences`.
        """
        try:
            return diff_for(query)
        except DifferentWorkloads as refused:
            raise ApiProblem(
                422,
                refused.message,
                errors={d.field: [d.text] for d in refused.differences},
                differences=[d.to_dict() for d in refused.differences],
            ) from None


def diff_for(query: dict[str, Any]) -> dict[str, Any]:
    """`diff_evaluations` over this app's store for a query DiffQuerySchema loaded (the API's and the
    dashboard's one way to it); raises what it raises."""
    return diff_evaluations(
        context().store,
        query["a"],
        query["b"],
        threshold=query["threshold"],
        confidence=query["confidence"],
        same_system=query["same_system"],
        allow_different=query["allow_different"],
    )
