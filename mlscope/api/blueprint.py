"""The Blueprint every resource uses: flask-smorest's, whose argument parser also refuses JSON bodies
nested deeper than Python's parser can follow (a 400 problem, not a 500)."""

from __future__ import annotations

from typing import Any, NoReturn

import flask
from flask_smorest import Blueprint
from webargs.flaskparser import FlaskParser, abort

__all__ = ["ApiBlueprint"]


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
