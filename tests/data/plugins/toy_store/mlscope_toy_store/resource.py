"""An HTTP resource plugged into mlscope's API by entry point, for mlscope's tests: how many
evaluations the API's store holds, at /api/v1/toy/count."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import Schema, fields

from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.context import context

blp = ApiBlueprint("toy", __name__, url_prefix="/api/v1/toy", description="A toy resource.")


class CountSchema(Schema):
    evaluations = fields.Integer(required=True)


@blp.route("/count")
class Count(MethodView):
    @blp.response(200, CountSchema)
    def get(self) -> dict[str, Any]:
        """How many evaluations the store holds."""
        return {"evaluations": context().store.count_evaluations()}
