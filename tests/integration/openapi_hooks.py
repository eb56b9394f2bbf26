"""schemathesis hooks for test_openapi_live.py (loaded by the `st` process through SCHEMATHESIS_HOOKS).

The document carries every constraint JSON Schema can say (ranges, enums, patterns, and the rules
between fields: mlscope/api/schema_request.py), so a schema-valid request is refused, 422 naming its
field, only for what no schema can judge: whether what it names exists (a model with a manifest for the
framework, a stored evaluation, an uploaded file's contents, a cursor the API gave), a relation between
two values, or a map's keys (OpenAPI 3.0 has no propertyNames). The run lets positive_data_acceptance
take a 422, and this check holds it to exactly those fields, per operation: a 422 naming any other
field is a mismatch of document and API.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import schemathesis

# What the document cannot judge in a request: whether what it names exists in the registry, and the
# relations between two values that JSON Schema cannot compare.
_REQUEST_RULES = (
    "model",  # a model the registry knows, with a manifest for the framework (and a brick's an ONNX one)
    "framework",  # a framework with a manifest of the model
    "dataset",  # a built-in or uploaded dataset
    "parity_against",  # a framework the model also has a manifest for
    "check_parity",  # the model has a manifest for a second framework
    "batch_sizes",  # the model's graph may fix its batch size
    "device",  # a device this host has, that the framework runs on (TensorRT: an NVIDIA GPU only)
    "model_options.*",  # the inputs the model has, by name; a map's keys (OpenAPI 3.0 has no propertyNames)
    "measure.max_seconds",  # ≥ measure.min_seconds
    "load.samples_per_query",  # ≤ options.input_pool, and ≤ the dataset's samples
    "generation.prompt_tokens",  # uniform:LOW-HIGH with LOW ≤ HIGH
    "generation.output_tokens",
    # A framework-specific option (compile, precision, quantize, performance_hint, gguf_type) set to
    # other than its plain value on a framework that does not take it, in the generate scenario, or
    # int8 at a reduced precision: relations with `framework` and `scenarios` that, said in the
    # document, make schemathesis give up on generating requests (UnsupportedSchema).
    "options.compile",
    "options.precision",
    "options.quantize",
    "options.performance_hint",
    "options.gguf_type",
    # The generate workloads' relations the document leaves to the contract, as the request document's
    # own test lists them (tests/unit/test_openapi_request_rules.py, BEYOND_THE_DOCUMENT): a trace's
    # columns one value per line, its arrivals in order and its lines within the model's context
    # (the registry's model says it), settings that need another (prefix_groups,
    # think_time_ms, trace_speed), a preset's caps by model name, a sweep's values, and what a pooling
    # API does not take.
    "generation.trace",
    "generation.trace_speed",
    "generation.prefix_groups",
    "generation.think_time_ms",
    "generation.slo",
    "generation.shared_prefix_tokens",
    "generation.turns",
    "generation.preset",
    "load.percentile",
    "load.sweep",
    # back_to_back with another interval, and a split load's rules (a rate, open-loop scenarios,
    # live agents the target matches): stated in the document, they made schemathesis give up.
    "load.interval_ms",
    "load.agents",
    "target",
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
    # Stored ids; one price for every system (JSON Schema cannot count the items matching a pattern).
    "GET /api/v1/compare": ("ids.*", "price_per_hour"),
    "GET /api/v1/compare/diff": ("a", "b"),  # stored evaluations
    "POST /api/v1/models": ("file",),  # an ONNX model's bytes
    "POST /api/v1/datasets": ("file",),  # a zip of images
    # A model the registry knows, with a manifest for the framework, which is installed on the API host.
    "POST /api/v1/bricks/estimates": ("model", "framework"),
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
