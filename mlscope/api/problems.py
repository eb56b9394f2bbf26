"""Errors as RFC 7807 problem documents: every 4xx and 5xx the API answers is one.

A problem document is `{"type": "about:blank", "title", "status", "detail", "errors"}`, served as
`application/problem+json`; `errors` maps dotted field names (`batch_sizes.0`) to messages and is
present only when fields are at fault. This module turns every way a request can fail into one:
marshmallow/webargs validation, werkzeug's HTTP errors (404, 405, 413, invalid JSON), `UserError`s
from the registry and the store, and unexpected exceptions (a bare 500, logged, no stack trace).
"""

from __future__ import annotations

import http
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from flask import Flask, Response, request
from marshmallow import Schema, fields
from werkzeug.exceptions import HTTPException

from mlscope.contract.errors import MARSHMALLOW_WORDING, MlscopeError, UserError
from mlscope.registry.agents import RegistryUnavailable
from mlscope.store.errors import AmbiguousEvaluationId, EvaluationNotFound, StoreUnavailable

__all__ = [
    "PROBLEM_MIMETYPE",
    "RETRY_AFTER_S",
    "ApiProblem",
    "ProblemSchema",
    "flatten_messages",
    "install_error_handlers",
    "problem_response",
    "summarize_errors",
]

PROBLEM_MIMETYPE = "application/problem+json"
# What a 503 tells a client to wait before trying again (the `Retry-After` header, in seconds): a
# dependency that went away (the store, the broker, the agent registry) is usually back within this,
# and a client polling faster only adds load to a server that cannot answer anyway.
RETRY_AFTER_S = 5
logger = logging.getLogger("mlscope.api")

# marshmallow's and webargs' stock wording, in the voice of the rest of mlscope's messages.
_REWORDED = {
    **MARSHMALLOW_WORDING,
    "Not a valid mapping type.": "must be an object",
    "Invalid input type.": "must be a JSON object",
    "Invalid type.": "must be an object",
    "Invalid value.": "invalid value",
    "String does not match expected pattern.": "does not match the expected pattern",
    "Invalid JSON body.": "is not valid JSON",
    "Special numeric values (nan or infinity) are not permitted.": "must be a finite number",
}
# webargs nests messages under the request part they came from; clients name fields, not parts.
_LOCATIONS = frozenset({"json", "query", "querystring", "view_args", "path", "form", "headers", "files"})


class ProblemSchema(Schema):
    """An RFC 7807 problem document (documentation only: responses are built by `problem_response`)."""

    type = fields.String(metadata={"description": "always about:blank: the status says what happened"})
    title = fields.String(metadata={"description": "the HTTP status phrase"})
    status = fields.Integer(metadata={"description": "the HTTP status code"})
    detail = fields.String(metadata={"description": "what went wrong, in one line"})
    errors = fields.Dict(
        keys=fields.String(),
        values=fields.List(fields.String()),
        metadata={"description": "dotted field name → messages; only when fields are at fault"},
    )


class ApiProblem(MlscopeError):
    """An HTTP error a view raises to answer with a problem document.

    Args:
        status: the HTTP status code.
        detail: one line saying what went wrong and what would be accepted.
        errors: dotted field name → messages, when fields are at fault.
        headers: extra response headers (WWW-Authenticate, ...).
        extra: further members of the problem document (RFC 7807 extensions).
    """

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        errors: Mapping[str, list[str]] | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = dict(errors or {})
        self.headers = dict(headers or {})
        self.extra = extra

    @classmethod
    def for_field(cls, status: int, field: str, message: str, **extra: Any) -> ApiProblem:
        """A problem with one field at fault; the detail repeats the field's message."""
        return cls(status, f"{field}: {message}", errors={field: [message]}, **extra)


def problem_response(
    status: int,
    detail: str,
    *,
    errors: Mapping[str, list[str]] | None = None,
    headers: Iterable[tuple[str, str]] | Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Response:
    """The `application/problem+json` response for `status`."""
    try:
        title = http.HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    document: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if errors:
        document["errors"] = {field: list(messages) for field, messages in errors.items()}
    for name, value in (extra or {}).items():
        document.setdefault(name, value)
    response = Response(json.dumps(document), status=status, mimetype=PROBLEM_MIMETYPE)
    pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
    for name, value in pairs:
        if name.lower() != "content-type":
            response.headers[name] = value
    return response


_DICT_PARTS = {"key", "value"}


def flatten_messages(messages: Any, path: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """marshmallow's nested messages as dotted field name → messages.

    `{"json": {"batch_sizes": {0: ["..."]}}}` → `{"batch_sizes.0": ["..."]}`; a message about the
    whole body (marshmallow's `_schema`) is filed under `body`.
    """
    flat: dict[str, list[str]] = {}
    if isinstance(messages, Mapping):
        for key, value in messages.items():
            name = str(key)
            if not path and name in _LOCATIONS:
                nested = flatten_messages(value, ())
                if name == "json" and "" in nested:
                    nested["body"] = nested.pop("")
                _merge(flat, nested)
            elif name == "_schema":
                _merge(flat, flatten_messages(value, path or ("body",)))
            elif path and set(messages) <= _DICT_PARTS:
                # A Dict field's own error about one entry's key or value is about that entry.
                _merge(flat, flatten_messages(value, path))
            else:
                _merge(flat, flatten_messages(value, (*path, name)))
        return flat
    items = messages if isinstance(messages, list) else [messages]
    for item in items:
        if isinstance(item, (Mapping, list)):
            _merge(flat, flatten_messages(item, path))
        else:
            flat.setdefault(".".join(path), []).append(_REWORDED.get(str(item), str(item)))
    return flat


def _merge(into: dict[str, list[str]], more: Mapping[str, list[str]]) -> None:
    for field, messages in more.items():
        into.setdefault(field, []).extend(messages)


def summarize_errors(errors: Mapping[str, list[str]], prefix: str = "invalid request") -> str:
    """`invalid request: batch_sizes.0: must be between 1 and 65536; model: required field is missing`."""
    parts = [
        f"{field}: {' '.join(messages)}" if field else " ".join(messages)
        for field, messages in errors.items()
    ]
    return f"{prefix}: {'; '.join(parts)}" if parts else prefix


def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    headers = error.get_headers()
    data = getattr(error, "data", None) or {}
    messages = data.get("errors") or data.get("messages")
    if messages:
        errors = flatten_messages(messages)
        if status == 400:
            return problem_response(400, "the request body is not valid JSON", errors=errors, headers=headers)
        return problem_response(status, summarize_errors(errors), errors=errors, headers=headers)
    if status == 500:
        # Whatever raised it, the body never carries internals.
        return problem_response(500, "internal error: the server's log has the details")
    detail = data.get("message") or error.description or http.HTTPStatus(status).phrase
    if status == 413:
        limit = request.max_content_length if request else None
        detail = f"the request body is too large: at most {_bytes(limit or 1024 * 1024)} is accepted"
    return problem_response(status, str(detail), headers=headers)


def _bytes(count: int) -> str:
    return f"{count // (1024 * 1024)} MiB" if count % (1024 * 1024) == 0 else f"{count} bytes"


def _api_problem(problem: ApiProblem) -> Response:
    return problem_response(
        problem.status, problem.detail, errors=problem.errors, headers=problem.headers, extra=problem.extra
    )


def _user_error(error: UserError) -> Response:
    errors = {error.field: [error.message]} if error.field else None
    return problem_response(422, error.message, errors=errors)


def _not_found(error: EvaluationNotFound) -> Response:
    return problem_response(404, error.message)


def _ambiguous(error: AmbiguousEvaluationId) -> Response:
    return problem_response(
        422, error.message, errors={"id": [error.message]}, extra={"candidates": error.candidates}
    )


def _registry_down(error: RegistryUnavailable) -> Response:
    return problem_response(503, error.message)


def _store_down(error: StoreUnavailable) -> Response:
    logger.warning("the store did not answer: %s", error.message)
    return problem_response(503, error.message)


def _unexpected(error: Exception) -> Response:
    logger.exception("unexpected error while answering a request", exc_info=error)
    return problem_response(500, "internal error: the server's log has the details")


def _retry_after(response: Response) -> Response:
    # Every 503 (JSON or page, from a handler or a view such as /health) is a part that is down for
    # now, never a refusal: it says when to ask again.
    if response.status_code == 503 and "Retry-After" not in response.headers:
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def install_error_handlers(app: Flask) -> None:
    """Answer every error of `app` with a problem document (most specific handler wins), and every
    503 with a `Retry-After` header."""
    app.after_request(_retry_after)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(ApiProblem, _api_problem)
    app.register_error_handler(UserError, _user_error)
    app.register_error_handler(EvaluationNotFound, _not_found)
    app.register_error_handler(AmbiguousEvaluationId, _ambiguous)
    app.register_error_handler(RegistryUnavailable, _registry_down)
    app.register_error_handler(StoreUnavailable, _store_down)
    app.register_error_handler(Exception, _unexpected)
