"""Bearer tokens: writes always need one; reads too when `api_reads = "token"`, and always to download
an uploaded model's file (a farm's workers send one: MLSCOPE_API_TOKEN, else the first of
MLSCOPE_API_TOKENS).

The tokens are `settings.api_tokens` (MLSCOPE_API_TOKENS). With none configured, writes are refused
outright (403) rather than left open: a farm runs whatever it is sent. The health check and the
OpenAPI document with its docs page, and the pages' scripts and styles, stay open whatever the setting.
"""

from __future__ import annotations

import hmac

from flask import Flask, request

from mlscope.api.context import context
from mlscope.api.problems import ApiProblem

__all__ = [
    "OPEN_BLUEPRINTS",
    "OPEN_ENDPOINTS",
    "RAW_BODY_ENDPOINTS",
    "TOKEN_READS",
    "WRITE_METHODS",
    "init_auth",
]

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
OPEN_ENDPOINTS = frozenset({"ops.Health"})
# flask-smorest serves openapi.json and the docs page from this blueprint; the dashboard's and the docs
# page's scripts and styles (dashboard_assets) hold no data.
OPEN_BLUEPRINTS = frozenset({"api-docs", "dashboard_assets"})
# Reads that need a token whatever `api_reads` says: an uploaded model's bytes are its uploader's.
TOKEN_READS = frozenset({"uploads.UploadedModelFile", "datasets.UploadedDatasetFile"})
# Writes whose body is a file, not JSON.
RAW_BODY_ENDPOINTS = frozenset({"uploads.ModelUpload", "datasets.DatasetUpload"})
_CHALLENGE = 'Bearer realm="mlscope"'


def _bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _known(token: str, tokens: tuple[str, ...]) -> bool:
    given = token.encode()
    # Every token is compared, so the time taken says nothing about which one nearly matched.
    matches = [hmac.compare_digest(given, known.encode()) for known in tokens]
    return any(matches)


def _authorize() -> None:
    if request.url_rule is None:
        return  # routing answers 404/405 itself
    write = request.method in WRITE_METHODS
    if (
        not write
        and request.endpoint not in TOKEN_READS
        and (
            context().settings.api_reads == "open"
            or request.endpoint in OPEN_ENDPOINTS
            or request.blueprint in OPEN_BLUEPRINTS
        )
    ):
        return
    tokens = context().settings.api_tokens
    if not tokens:
        if write:
            raise ApiProblem(403, "writes are disabled: set MLSCOPE_API_TOKENS")
        raise ApiProblem(403, "reads need a token, but none is configured: set MLSCOPE_API_TOKENS")
    token = _bearer_token()
    what = "writes" if write else "reads"
    if token is None:
        raise ApiProblem(
            401,
            f"{what} need a token: send Authorization: Bearer <token> (one of MLSCOPE_API_TOKENS)",
            headers={"WWW-Authenticate": _CHALLENGE},
        )
    if not _known(token, tokens):
        raise ApiProblem(
            401,
            "the bearer token is not one the API accepts",
            headers={"WWW-Authenticate": f'{_CHALLENGE}, error="invalid_token"'},
        )


def _require_json() -> None:
    if (
        request.url_rule is not None  # an unknown path or method: routing's 404/405, whatever the body
        and request.method in WRITE_METHODS
        and request.content_length
        and not request.is_json
        and request.endpoint not in RAW_BODY_ENDPOINTS
    ):
        raise ApiProblem.for_field(
            415, "body", f"must be JSON (Content-Type: application/json), not {request.mimetype or 'none'}"
        )


def init_auth(app: Flask) -> None:
    """Check the token (then the body's content type) before every request of `app`."""
    app.before_request(_authorize)
    app.before_request(_require_json)
