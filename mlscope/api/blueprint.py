"""The Blueprint every resource uses: flask-smorest's, whose argument parser also refuses JSON bodies
nested deeper than Python's parser can follow (a 400 problem, not a 500); and the path converter of
evaluation ids."""

from __future__ import annotations

from typing import Any, NoReturn

import flask
from flask_smorest import Blueprint
from webargs.flaskparser import FlaskParser, abort
from werkzeug.routing import BaseConverter

__all__ = ["ApiBlueprint", "EvaluationIdConverter"]


class _BodyParser(FlaskParser):
    def _raw_load_json(self, req: flask.Request) -> Any:
        try:
            return super()._raw_load_json(req)
        except RecursionError:
            self._too_deep()

    @staticmethod
    def _too_deep() -> NoReturn:
        abort(400, messages={"json": ["is nested too deeply"]})


class ApiBlueprint(Blueprint):
    """flask-smorest's Blueprint with mlscope's body parser."""

    ARGUMENTS_PARSER = _BodyParser()


class EvaluationIdConverter(BaseConverter):
    """`<evaluation_id:...>`: an evaluation id (or a prefix of one) in a path, never one of the fixed
    paths beside it (/evaluations/batch, /evaluations/export).

    Without it, /evaluations/batch also matched /evaluations/<id>: GET or DELETE on it looked up an
    evaluation called "batch", and the Allow header of the fixed paths listed those methods too.
    """

    RESERVED = ("batch", "export")
    regex = rf"(?!(?:{'|'.join(RESERVED)})$)[^/]+"

    @classmethod
    def openapi_schema(cls, _converter: BaseConverter) -> dict[str, object]:
        """The path parameter's schema in the OpenAPI document (flask-smorest's converter hook)."""
        # The reserved words are said in words, not as `not: {enum: ...}`: a client (or schemathesis)
        # sending them reaches the operation of that fixed path, not a refusal of this one.
        reserved = " or ".join(cls.RESERVED)
        return {
            "type": "string",
            "minLength": 1,
            "description": f"an evaluation id or prefix; never {reserved}",
        }
