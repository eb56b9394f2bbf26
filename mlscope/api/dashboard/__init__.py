"""The web dashboard, served by the API at `/`: the farm, evaluations, one evaluation's charts, the
comparison, the model catalogue and a submit form. Server-rendered pages (Jinja2 templates) that read
the store and registries through the API's own ApiContext; one small script of ours draws the charts
with plotly.js and follows running evaluations through the JSON API.

Every file a page loads comes from this process (assets.py): plotly.js and Swagger UI from their
installed Python packages, never from a CDN.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, request
from werkzeug.exceptions import NotFound

from mlscope.api.dashboard import compare_page, diff_page, evaluation_page, pages
from mlscope.api.dashboard.assets import ASSETS, SWAGGER_UI_URL, plotly_js_url
from mlscope.api.dashboard.blueprint import PAGES, error_page
from mlscope.api.problems import problem_response

__all__ = ["SWAGGER_UI_CONFIG", "SWAGGER_UI_URL", "init_dashboard"]

# Every page module's routes, added here once to the one blueprint the pages share, so their URL rules
# and endpoint names ("dashboard.<view>", what the templates' url_for names) stay the blueprint's own.
for _module in (compare_page, diff_page, evaluation_page, pages):
    _module.register(PAGES)

# Swagger UI's default validator badge is an image from validator.swagger.io: switched off.
SWAGGER_UI_CONFIG: dict[str, Any] = {"validatorUrl": None}


def _not_found(error: NotFound) -> Any:
    # A path under /api is the JSON API's (a problem document); any other is a page that does not exist.
    if request.path == "/api" or request.path.startswith("/api/"):
        return problem_response(404, error.description or "Not Found")
    return error_page(404, f"no page at {request.path}: see the links above")


def init_dashboard(app: Flask) -> None:
    """Serve the dashboard's pages and assets from `app`, and the Swagger page's files.

    Call it after the JSON API's blueprints are registered and its error handlers installed.
    """
    app.register_blueprint(ASSETS)
    app.register_blueprint(PAGES)
    app.register_error_handler(NotFound, _not_found)

    @app.context_processor
    def _assets() -> dict[str, Any]:
        return {"plotly_js_url": plotly_js_url()}
