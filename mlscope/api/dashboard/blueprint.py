"""The dashboard's blueprint and what its pages share: reading a page's query with the JSON API's own
schemas, the HTML error page every failure becomes, and how a result's status is shown.

A page answers a browser, so its errors are pages too: an unknown evaluation is a 404 page, a
malformed filter a 400 page naming the field and what was expected, never a stack trace. The JSON
API under /api keeps its problem documents.
"""

from __future__ import annotations

import http
import logging
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from flask import Blueprint, render_template, request
from marshmallow import Schema, ValidationError
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import HTTPException

from mlscope.api.problems import ApiProblem, flatten_messages
from mlscope.contract.errors import MlscopeError, UserError
from mlscope.contract.result import result_validity
from mlscope.registry.agents import RegistryUnavailable
from mlscope.store.errors import AmbiguousEvaluationId, EvaluationNotFound, StoreUnavailable

__all__ = ["PAGES", "PageError", "error_page", "parse_query", "status_view", "when"]

logger = logging.getLogger("mlscope.api")

PAGES = Blueprint("dashboard", __name__, template_folder="templates")


class PageError(MlscopeError):
    """A page's answer when the request cannot be served: a status and what to tell the reader.

    Args:
        status: the HTTP status (400 for a malformed filter, 404 for an unknown id).
        detail: one line saying what went wrong and what would be accepted.
        errors: field name → messages, when fields of the query are at fault.
    """

    def __init__(self, status: int, detail: str, errors: Mapping[str, list[str]] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = dict(errors or {})


def parse_query(schema: Schema, *, lists: tuple[str, ...] = (), own: tuple[str, ...] = ()) -> dict[str, Any]:
    """The page's query string loaded by one of the JSON API's schemas, so a page accepts exactly what
    the API does. Empty fields (a form's blank inputs) count as absent; the `lists` fields may be
    repeated (a multi-select) or comma-separated and are joined into the comma list the schema reads;
    the `own` fields are the page's (its page number) and left to it.

    Raises:
        PageError: 400 naming each malformed field and what it expects.
    """
    given: MultiDict[str, str] = MultiDict()
    for key in request.args:
        if key in own:
            continue
        values = [v.strip() for v in request.args.getlist(key) if v.strip()]
        if not values:
            continue
        if key in lists:
            given[key] = ",".join(values)
        else:
            given.setlist(key, values)
    try:
        loaded: dict[str, Any] = schema.load(given)
    except ValidationError as exc:
        errors = flatten_messages(exc.messages)
        summary = "; ".join(f"{field}: {' '.join(messages)}" for field, messages in errors.items())
        raise PageError(400, f"malformed query: {summary}", errors) from None
    return loaded


def status_view(result: Mapping[str, Any]) -> dict[str, Any]:
    """How a result's status is shown: a succeeded result whose measurements are all invalid (or whose
    parity failed) reads "invalid" with the reasons, never a plain "succeeded" (contract.result's
    rule, the one the CLI's tables follow).

    Returns:
        {"label", "css" (a class: ok, warn, bad, active, plain), "reasons": [...], "active": bool}.
    """
    status = str(result.get("status"))
    if status != "succeeded":
        css = {"queued": "active", "running": "active", "failed": "bad"}.get(status, "plain")
        return {"label": status, "css": css, "reasons": [], "active": css == "active"}
    validity = result_validity(result)
    if not validity["valid"]:
        return {
            "label": "succeeded · NOT VALID",
            "css": "bad",
            "reasons": validity["reasons"],
            "active": False,
        }
    css = "warn" if validity["reasons"] else "ok"
    return {"label": status, "css": css, "reasons": validity["reasons"], "active": False}


@PAGES.app_template_filter("when")
def when(value: Any) -> str:
    """A stored time as a page shows it, to the second and in UTC: "2024-05-01 12:00:03 UTC"."""
    if not value:
        return "–"
    try:
        moment = datetime.fromisoformat(str(value)).astimezone(timezone.utc)
    except ValueError:
        return str(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def error_page(status: int, detail: str, errors: Mapping[str, list[str]] | None = None) -> tuple[str, int]:
    """The HTML page for an error, with the status's phrase as its title."""
    try:
        title = http.HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    body = render_template(
        "dashboard/error.html", status=status, title=title, detail=detail, errors=errors or {}
    )
    return body, status


def _page_error(error: PageError) -> tuple[str, int]:
    return error_page(error.status, error.detail, error.errors)


def _http_error(error: HTTPException) -> Any:
    status = error.code or 500
    if status >= 500:
        return error_page(500, "internal error: the server's log has the details")
    return error_page(status, error.description or http.HTTPStatus(status).phrase)


def _api_problem(problem: ApiProblem) -> tuple[str, int]:
    # Raised by the token check before a page when reads need a token.
    detail = problem.detail
    if problem.status in (401, 403):
        detail += " (the dashboard's pages are served without a token only when reads are open)"
    return error_page(problem.status, detail, problem.errors)


def _user_error(error: UserError) -> tuple[str, int]:
    errors = {error.field: [error.message]} if error.field else None
    return error_page(400, error.message, errors)


def _unavailable(error: StoreUnavailable | RegistryUnavailable) -> tuple[str, int]:
    logger.warning("a dashboard page could not be served: %s", error.message)
    return error_page(503, error.message)


def _unexpected(error: Exception) -> tuple[str, int]:
    logger.exception("unexpected error while rendering a dashboard page", exc_info=error)
    return error_page(500, "internal error: the server's log has the details")


PAGES.register_error_handler(PageError, _page_error)
PAGES.register_error_handler(HTTPException, _http_error)
PAGES.register_error_handler(ApiProblem, _api_problem)
PAGES.register_error_handler(UserError, _user_error)
PAGES.register_error_handler(EvaluationNotFound, lambda error: error_page(404, error.message))
PAGES.register_error_handler(AmbiguousEvaluationId, lambda error: error_page(400, error.message))
PAGES.register_error_handler(StoreUnavailable, _unavailable)
PAGES.register_error_handler(RegistryUnavailable, _unavailable)
PAGES.register_error_handler(Exception, _unexpected)
