"""/api/v1/bricks/estimates: a model's latency on a stored system, composed from the bricks (its
layers, each measured once per system) the store already holds for that system; the bricks service's
`estimate_stored` (docs/bricks.md).

The API runs no model: the model is decomposed here (its graph as the framework installed on the API
host optimises it), each brick it needs is looked up, and the estimate is composed only when every
one is found. Otherwise the answer says how much is covered and names the bricks missing (measure
them with `mlscope bricks`, or `mlscope bricks --on` on the farm). Bad input is a 422 naming the
field; a system the store does not hold, a 404.
"""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import RAISE, Schema, fields, validate

from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.context import context
from mlscope.api.problems import PROBLEM_MIMETYPE, ApiProblem, ProblemSchema
from mlscope.contract.errors import UserError
from mlscope.registry.uploads import ModelFiles
from mlscope.services.bricks.registry import BRICKS
from mlscope.services.bricks.stored import estimate_stored
from mlscope.store.errors import SystemNotFound

__all__ = ["BrickEstimateQuerySchema", "BrickEstimateSchema", "blp"]

# The framework a request that names none is decomposed with.
DEFAULT_FRAMEWORK = "onnxruntime"
_SECURITY: list[dict[str, list[str]]] = [{"bearerAuth": []}]

blp = ApiBlueprint(
    "bricks",
    __name__,
    url_prefix="/api/v1/bricks",
    description="Estimate a model's latency from the bricks (its layers) a system has measured.",
)


class BrickEstimateQuerySchema(Schema):
    class Meta:
        unknown = RAISE

    model = fields.String(
        required=True,
        validate=validate.Length(min=1, max=1000),
        metadata={"description": "the model reference, as POST /evaluations takes it"},
    )
    framework = fields.String(
        load_default=DEFAULT_FRAMEWORK,
        validate=validate.OneOf(list(BRICKS)),
        metadata={"description": "whose decomposition: a framework whose models can be cut into bricks"},
    )
    system = fields.String(
        required=True,
        validate=validate.Length(min=1, max=200),
        metadata={"description": "the id of the stored system whose bricks are composed"},
    )
    threads = fields.Integer(
        load_default=None,
        allow_none=True,
        validate=validate.Range(min=1, max=1024),
        metadata={"description": "the intra-op threads the bricks were measured with (null: the default)"},
    )


class _FrameworkSchema(Schema):
    name = fields.String()
    version = fields.String(metadata={"description": "installed on the API host, where the model is cut"})


class _BrickCountsSchema(Schema):
    total = fields.Integer(metadata={"description": "the model's layers that are bricks"})
    unique = fields.Integer(metadata={"description": "the distinct bricks among them"})
    needed = fields.Integer(metadata={"description": "the distinct bricks and the two calibrations"})
    found = fields.Integer(metadata={"description": "those of `needed` stored for the system"})


class _BoundsSchema(Schema):
    sequential_ms = fields.Float()
    critical_path_ms = fields.Float()


class _ValiditySchema(Schema):
    valid = fields.Boolean()
    reasons = fields.List(fields.String())


class _FallbackLayerSchema(Schema):
    layer = fields.String()
    op_type = fields.String()
    reason = fields.String()


class _FallbackSchema(Schema):
    reason = fields.String()
    layers = fields.List(fields.Nested(_FallbackLayerSchema))


class BrickEstimateSchema(Schema):
    model = fields.String()
    system_id = fields.String()
    framework = fields.Nested(_FrameworkSchema)
    device = fields.String()
    threads = fields.Integer(allow_none=True)
    layers = fields.Integer(metadata={"description": "the model's layers"})
    bricks = fields.Nested(_BrickCountsSchema)
    coverage = fields.Float(metadata={"description": "bricks.found / bricks.needed (0 when none needed)"})
    missing = fields.List(
        fields.String(),
        metadata={"description": "the bricks not stored for the system, by their evaluations' model name"},
    )
    estimate_ms = fields.Float(
        allow_none=True, metadata={"description": "the composed latency; null unless every brick is found"}
    )
    estimate_ci = fields.List(fields.Float(), allow_none=True)
    estimate_se_ms = fields.Float(allow_none=True)
    bounds = fields.Nested(_BoundsSchema, allow_none=True)
    validity = fields.Nested(_ValiditySchema)
    fallback = fields.Nested(
        _FallbackSchema,
        allow_none=True,
        metadata={"description": "why the model cannot be cut into bricks; null when it can"},
    )


@blp.route("/estimates")
class BrickEstimates(MethodView):
    @blp.arguments(BrickEstimateQuerySchema)
    @blp.response(200, BrickEstimateSchema)
    @blp.alt_response(
        404, schema=ProblemSchema, content_type=PROBLEM_MIMETYPE, description="No system has this id"
    )
    @blp.alt_response(
        401, schema=ProblemSchema, content_type=PROBLEM_MIMETYPE, description="No token, or a wrong one"
    )
    @blp.doc(security=_SECURITY)
    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """Estimate a model's latency from stored bricks

        The model is cut into bricks and each is looked up among the results stored for `system`;
        nothing is measured. When every brick is found, the answer has the composed estimate, its
        interval and the sequential and critical-path bounds; otherwise `coverage` says how much is
        stored and `missing` names the rest.
        """
        ctx = context()
        try:
            ctx.store.get_system(body["system"])
        except SystemNotFound as missing:
            raise ApiProblem(404, missing.message) from None
        except UserError as refused:  # not an id at all: the field is this body's `system`
            raise ApiProblem.for_field(422, "system", refused.message) from None
        return estimate_stored(
            body["model"],
            system_id=body["system"],
            store=ctx.store,
            settings=ctx.settings,
            framework=body["framework"],
            threads=body["threads"],
            models=ctx.models,
            uploads=ModelFiles(ctx.settings.upload_dir).lookup,
        )
