"""schemathesis hooks for test_openapi_live.py (loaded by the `st` process through SCHEMATHESIS_HOOKS).

A schema-valid request may still be refused, 422 naming its field, when what it names must exist
(a model with a manifest for the framework, a stored evaluation, an uploaded file's contents) or when
fields depend on each other (`limit` needs a `dataset`, `tolerance` needs `check_parity`). JSON Schema
says neither, so the run lets positive_data_acceptance take a 422, and this check holds it to exactly
those fields, per operation: a 422 naming any other field is a mismatch of document and API.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import schemathesis

# The settings each request field or section names, checked against the registry or other fields.
_REQUEST_RULES = (
    "model",  # a model the registry knows, with a manifest for the framework
    "framework",  # runnable; `endpoint` only with generation.endpoint, and the reverse
    "dataset",  # a built-in or uploaded dataset
    "limit",  # needs a dataset
    "check_parity",
    "parity_against",  # a framework of the model; only with check_parity
    "tolerance",  # only with check_parity
    "scenarios",  # generate runs alone
    "batch_sizes",  # generate takes batch size 1
    "measure.*",  # the measurement settings' names and ranges, checked on admission
    "load.*",  # the load settings' ranges and which scenarios they apply to
    "generation",
    "generation.*",
    "model_options.*",  # shapes and dtypes of inputs the model has
    "options.*",  # execution providers the framework has
)
REFUSABLE: dict[str, tuple[str, ...]] = {
    "POST /api/v1/evaluations": _REQUEST_RULES,
    # Models the registry knows; `frameworks`: none of the models has a manifest for them.
    "POST /api/v1/evaluations/batch": (*_REQUEST_RULES, "models.*", "frameworks"),
    "GET /api/v1/evaluations": ("cursor",),  # a next_cursor the API gave
    "GET /api/v1/evaluations/export": ("cursor",),
    "GET /api/v1/evaluations/{evaluation_id}": ("id",),  # a prefix of several ids
    "GET /api/v1/evaluations/{evaluation_id}/trace": ("id",),
    "GET /api/v1/evaluations/{evaluation_id}/layers": ("id",),
    "DELETE /api/v1/evaluations/{evaluation_id}": ("id",),
    "GET /api/v1/compare": ("ids.*", "price_per_hour"),  # stored ids; one price for every system
    "GET /api/v1/compare/diff": ("a", "b"),  # stored evaluations
    "POST /api/v1/models": ("file",),  # an ONNX model's bytes
    "POST /api/v1/datasets": ("file",),  # a zip of images
}


def _fields(text: str) -> list[str]:
    try:
        document = json.loads(text)
    except ValueError:
        return []
    errors = document.get("errors") if isinstance(document, dict) else None
    return list(errors) if isinstance(errors, dict) else []


@schemathesis.check
def refused_only_for_what_must_exist(ctx: Any, response: Any, case: Any) -> None:
    """A 422 to a schema-valid request names only fields the schema cannot judge (REFUSABLE)."""
    meta = case.meta
    if response.status_code != 422 or meta is None or not meta.generation.mode.is_positive:
        return
    allowed = REFUSABLE.get(case.operation.label, ())
    named = _fields(response.text)
    unexplained = [f for f in named if not any(fnmatch.fnmatchcase(f, pattern) for pattern in allowed)]
    if not named or unexplained:
        raise AssertionError(
            f"a schema-valid request was refused for {unexplained or 'no named field'}: the OpenAPI "
            "document does not say what the API accepts there"
        )
