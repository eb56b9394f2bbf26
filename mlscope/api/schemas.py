"""The HTTP schemas: what each endpoint accepts and answers, for validation and for the OpenAPI document.

The evaluation request itself is `mlscope.contract.request.ContractRequestSchema`, the one every door
shares (here only documented further); the batch body reuses its fields, so a batch accepts exactly what
a single submission does.
"""

from __future__ import annotations

import copy
import re
from typing import Any, TypeVar, cast

from marshmallow import RAISE, Schema, ValidationError, fields, validate
from webargs.fields import DelimitedList

from mlscope.api.schema_accepted import BatchAcceptedSchema, EvaluationAcceptedSchema
from mlscope.api.schema_cost import MEMORY, RESOURCE_MEASUREMENT_PROPERTIES
from mlscope.api.schema_load import MEASUREMENT_PROPERTIES
from mlscope.api.schema_request import (
    GENERATION_SCHEMA,
    LOAD_SCHEMA,
    MEASURE_SCHEMA,
    POSITIVE_NUMBER,
    batch_rules,
    request_rules,
)
from mlscope.contract.errors import UserError
from mlscope.contract.queues import TARGET_PATTERN, parse_target
from mlscope.contract.request import MAX_BATCH_SIZE, ContractRequestSchema
from mlscope.contract.result import PARITY_VERDICTS
from mlscope.runtime.frameworks import FRAMEWORKS
from mlscope.store.base import MAX_LIST_LIMIT
from mlscope.store.records import COMPARE_COLUMNS, STATUSES

__all__ = [
    "FRAMEWORK_NAMES",
    "MAX_BATCH_JOBS",
    "SHARED_REQUEST_FIELDS",
    "AgentSchema",
    "BatchAcceptedSchema",
    "BatchRequestSchema",
    "CancelledSchema",
    "CompareQuerySchema",
    "CompareSchema",
    "EvaluationAcceptedSchema",
    "EvaluationPageSchema",
    "EvaluationQuerySchema",
    "EvaluationRequestSchema",
    "EvaluationSchema",
    "FrameworkSchema",
    "HealthSchema",
    "ListQuerySchema",
    "ModelDetailSchema",
    "ModelSummarySchema",
    "QueueSchema",
]

# A batch may expand to at most this many evaluations.
MAX_BATCH_JOBS = 500
# The request fields a batch applies to every evaluation it creates.
SHARED_REQUEST_FIELDS = (
    "batch_sizes",
    "scenarios",
    "device",
    "runner",
    "trace_level",
    "measure",
    "options",
    "timeout_s",
    "memory_limit_mb",
    "model_options",
    "dataset",
    "limit",
    "check_parity",
    "parity_against",
    "tolerance",
    "load",
)
_TIME_ERRORS: dict[str, str | list[Any] | dict[Any, Any]] = {
    "invalid": "must be an ISO 8601 time with a timezone, e.g. 2024-05-01T12:00:00Z",
    "invalid_awareness": "has no timezone: give one, e.g. 2024-05-01T12:00:00Z or +02:00",
}


def _aware_time(description: str) -> fields.AwareDateTime:
    return fields.AwareDateTime(
        format="iso", error_messages=_TIME_ERRORS, metadata={"description": description}
    )


def _check_target(value: str) -> None:
    try:
        parse_target(value)
    except UserError as exc:
        raise ValidationError(exc.message.partition(": ")[2] or exc.message) from None


def _names(what: str, most: int, **item_metadata: Any) -> fields.List:
    return fields.List(
        fields.String(validate=validate.Length(min=1, max=200), metadata=item_metadata),
        required=True,
        validate=validate.Length(min=1, max=most),
        metadata={"description": f"{what} (1 to {most})"},
    )


# The frameworks a request may name (the registered ones that can run somewhere). Documented, not
# checked here: admission refuses the others with the known names, whichever door they came through.
FRAMEWORK_NAMES = sorted(name for name, spec in FRAMEWORKS.items() if spec.unavailable is None)


_F = TypeVar("_F", bound=fields.Field)


def _documented(field: _F, **metadata: Any) -> _F:
    """A copy of `field` that validates as it does, with more to say in the OpenAPI document."""
    documented = copy.copy(field)
    documented.metadata = {**field.metadata, **metadata}
    return documented


# The frameworks that measure bricks (options.brick).
BRICK_FRAMEWORKS = [name for name in FRAMEWORK_NAMES if FRAMEWORKS[name].bricks is not None]
# The frameworks that run the generate scenario and no other (FrameworkSpec.generates_only).
GENERATE_ONLY_FRAMEWORKS = [name for name in FRAMEWORK_NAMES if FRAMEWORKS[name].generates_only]


def _stated(name: str, schema: dict[str, Any]) -> Any:
    """The request's field `name`, documented as `schema` (openapi_fields.stated_schema)."""
    return _documented(ContractRequestSchema._declared_fields[name], openapi=schema)


class EvaluationRequestSchema(ContractRequestSchema):
    """The evaluation request (mlscope.contract.request), documented further: `framework` as one of
    FRAMEWORK_NAMES (the contract imports no runtime), settings and rules between fields (schema_request)."""

    OPENAPI_RULES = request_rules(FRAMEWORK_NAMES, BRICK_FRAMEWORKS, GENERATE_ONLY_FRAMEWORKS)

    framework = _documented(
        cast(fields.String, ContractRequestSchema._declared_fields["framework"]), enum=FRAMEWORK_NAMES
    )
    measure = _stated("measure", MEASURE_SCHEMA)
    load_settings = _stated("load_settings", LOAD_SCHEMA)
    generation = _stated("generation", GENERATION_SCHEMA)


class _StrictSchema(Schema):
    class Meta:
        unknown = RAISE


# By the name a document gives each field (its data key: `load` is declared as `load_settings`).
_request_fields = {
    field.data_key or name: field for name, field in EvaluationRequestSchema._declared_fields.items()
}
_shared = {name: _request_fields[name] for name in SHARED_REQUEST_FIELDS}

BatchRequestSchema: type[Schema] = _StrictSchema.from_dict(
    {
        "models": _names("model names", MAX_BATCH_JOBS),
        "frameworks": _names("framework names", 50, enum=FRAMEWORK_NAMES),
        "targets": fields.List(
            fields.String(validate=_check_target, metadata={"pattern": TARGET_PATTERN}),
            validate=validate.Length(min=1, max=100),
            load_default=None,
            metadata={
                "description": "capabilities (cpu, gpu.nvidia) or agents (agent:<id>); default: cpu for a "
                "CPU device, gpu otherwise"
            },
        ),
        "fan_out": fields.Boolean(
            load_default=False,
            metadata={
                "description": "one evaluation per live agent matching each capability target and "
                "having the framework, pinned to that agent"
            },
        ),
        "bricks": fields.Boolean(
            load_default=False,
            metadata={"description": "the models are bricks (options.brick): each queue's in one job"},
        ),
        **_shared,
    },
    name="EvaluationBatch",
)
BatchRequestSchema.OPENAPI_RULES = batch_rules(BRICK_FRAMEWORKS)  # type: ignore[attr-defined]


class ListQuerySchema(Schema):
    model = fields.String(validate=validate.Length(min=1))
    framework = fields.String(validate=validate.Length(min=1))
    system = fields.String(validate=validate.Length(min=1), metadata={"description": "a system id"})
    status = fields.String(validate=validate.OneOf(STATUSES, error="must be one of: {choices}"))
    since = _aware_time("created at or after this time")
    until = _aware_time("created before this time")
    limit = fields.Integer(
        load_default=50,
        validate=validate.Range(min=1, max=MAX_LIST_LIMIT, error="must be between {min} and {max}"),
    )
    # The stores keep offsets as 64-bit integers: a larger one must be refused here, not by the database.
    offset = fields.Integer(
        load_default=0, validate=validate.Range(min=0, max=2**63 - 1, error="must be between {min} and {max}")
    )
    cursor = fields.String(
        validate=validate.Length(min=1, max=1000),
        metadata={
            "description": "continue after the previous page: its next_cursor (pages then stay put while "
            "evaluations are added); offset skips from there"
        },
    )


class EvaluationQuerySchema(Schema):
    raw = fields.Boolean(
        load_default=False, metadata={"description": "add each measurement's latencies_ns (can be large)"}
    )


def _obj(description: str) -> fields.Dict:
    return fields.Dict(allow_none=True, metadata={"description": description})


def _number(description: str, *, low: float | None = None, high: float | None = None) -> dict[str, Any]:
    bounds = {"minimum": low} if low is not None else {}
    if high is not None:
        bounds["maximum"] = high
    return {"type": "number", "nullable": True, "description": description, **bounds}


def _interval(description: str) -> dict[str, Any]:
    fraction = {"type": "number", "minimum": 0, "maximum": 1}
    return {"type": "array", "items": fraction, "minItems": 2, "maxItems": 2, "description": description}


_COMPARISON_PROPERTIES: dict[str, Any] = {
    "verdict": {"type": "string", "enum": list(PARITY_VERDICTS)},
    "max_abs": _number("the largest absolute difference (null when an output held NaN)", low=0),
    "mean_abs": _number("the mean absolute difference", low=0),
    "max_rel": _number("the largest relative difference", low=0),
    "cosine": _number("cosine similarity, the least over the samples"),
    "top1_agreement": _number(
        "share of samples whose top-1 class agrees; null: not a score vector", low=0, high=1
    ),
}

# The sections are served as stored (a newer runtime's extra keys included), so they are free-form
# objects in marshmallow; their documented keys are spelled out for the OpenAPI document.
_ACCURACY = fields.Dict(
    metadata={
        "description": "top-k accuracy on a labelled dataset; absent when accuracy was not measured",
        "properties": {
            "dataset": {"type": "string", "description": "the dataset's name, e.g. digits"},
            "dataset_sha256": {"type": "string", "nullable": True},
            "count": {"type": "integer", "minimum": 1, "description": "samples scored"},
            "task": {"type": "string", "nullable": True, "description": "e.g. image_classification"},
            "top1": _number("fraction of samples whose first guess is right", low=0, high=1),
            "top5": _number("fraction whose label is among the first five guesses", low=0, high=1),
            "ci": {
                "type": "object",
                "nullable": True,
                "description": "the confidence intervals of top1 and top5",
                "properties": {
                    "method": {"type": "string", "description": "wilson or bootstrap"},
                    "level": {"type": "number", "description": "e.g. 0.95"},
                    "top1": _interval("[low, high] of top1"),
                    "top5": _interval("[low, high] of top5"),
                },
            },
            "limit": {"type": "integer", "nullable": True, "description": "the --limit it ran with"},
        },
        "required": ["dataset", "count"],
    }
)
_PARITY = fields.Dict(
    metadata={
        "description": "its outputs against another framework's on the same inputs; absent when no "
        'parity check ran. A verdict "different" makes the evaluation invalid in comparisons',
        "properties": {
            "against": {"type": "string", "description": "the reference framework"},
            "count": {"type": "integer", "minimum": 1, "description": "samples compared"},
            **_COMPARISON_PROPERTIES,
            "tolerance": {
                "type": "object",
                "properties": {"rtol": {"type": "number"}, "atol": {"type": "number"}},
            },
            "outputs": {
                "type": "object",
                "description": "per output name, the same figures and its own verdict",
                "additionalProperties": {"type": "object", "properties": _COMPARISON_PROPERTIES},
            },
        },
        "required": ["against", "count", "verdict"],
    }
)


class EvaluationSchema(Schema):
    """The result shape (docs/design.md, "Result shape"), with the request and manifest snapshots, the queue
    and attempts, the result sections `accuracy`, `parity` and `memory` when it has them, and each
    measurement's `load`, `energy` and `cost`."""

    id = fields.String()
    status = fields.String(metadata={"description": " | ".join(STATUSES)})
    model = _obj("{name, version, manifest_sha256}")
    display_name = fields.String(metadata={"description": "the model with its overrides: hf:gpt2[n_layer=2]"})
    framework = _obj("{name, version, ...details}")
    system = _obj("the machine it ran on: {id, hostname, cpu, gpus, ...}")
    runner = fields.String()
    device = fields.String()
    trace_level = fields.String()
    trace_id = fields.String(allow_none=True)
    queue = fields.String(
        allow_none=True,
        metadata={
            "description": "the broker queue its job was sent to; null when it ran in place (`mlscope run`)"
        },
    )
    attempts = fields.Integer(
        metadata={"description": "how many times it was started: above 1 if redelivered"}
    )
    cold_start = _obj(
        "{import_ms, load_ms, first_inference_ms, fetch_ms, warm_process}; load_ms is the model built from "
        "its source: PyTorch imports the model's library and builds the module with seeded random weights (a "
        "manifest's weights file then loaded over them; a Hugging Face directory's read by from_pretrained), "
        "ONNX Runtime makes its session from the graph file; with a model store (a warm start, "
        "docs/warm-start.md) also warm_load_ms, warm_first_inference_ms, warm_source (store | published), "
        "warm_shared_mb, warm_read_mb, warm_publish_ms, or warm_unavailable (why none was measured); each "
        "warm key absent when not measured"
    )
    measurements = fields.List(
        fields.Dict(metadata={"properties": {**MEASUREMENT_PROPERTIES, **RESOURCE_MEASUREMENT_PROPERTIES}}),
        metadata={
            "description": "one per (scenario, batch_size): {scenario, batch_size, latency_ms, throughput, "
            "validity, load (server, multi_stream, and a certificate for every scenario), energy, cost, ...}"
        },
    )
    accuracy = _ACCURACY
    parity = _PARITY
    memory = MEMORY
    error = _obj("{type, message, phase} when it failed")
    created_at = fields.String(allow_none=True)
    started_at = fields.String(allow_none=True)
    finished_at = fields.String(allow_none=True)
    request = _obj("the request as submitted")
    manifest = _obj("the manifest it ran")


class EvaluationPageSchema(Schema):
    items = fields.List(fields.Nested(EvaluationSchema))
    total = fields.Integer(metadata={"description": "how many match the filters in all"})
    limit = fields.Integer()
    offset = fields.Integer()
    next_cursor = fields.String(
        allow_none=True, metadata={"description": "the cursor of the next page; null on the last page"}
    )


class CancelledSchema(Schema):
    id = fields.String()
    status = fields.String(metadata={"description": "the status after the call"})
    cancelled = fields.Boolean(metadata={"description": "false when it had already ended"})


class ModelSummarySchema(Schema):
    name = fields.String()
    task = fields.String()
    description = fields.String(allow_none=True)
    frameworks = fields.List(fields.String())
    version = fields.String()
    family = fields.String(allow_none=True, metadata={"description": "a catalogue entry's family"})
    origin = fields.String(metadata={"description": "manifest (a manifest file) or catalogue"})


class ModelQuerySchema(Schema):
    task = fields.String(
        validate=validate.Length(min=1), metadata={"description": "e.g. image_classification"}
    )
    framework = fields.String(validate=validate.Length(min=1))
    family = fields.String(validate=validate.Length(min=1), metadata={"description": "e.g. resnet, bert"})
    search = fields.String(validate=validate.Length(min=1), metadata={"description": "in the name or family"})


class ModelDetailSchema(Schema):
    name = fields.String()
    manifests = fields.Dict(
        keys=fields.String(), values=fields.Dict(), metadata={"description": "framework → manifest"}
    )


class FrameworkSchema(Schema):
    name = fields.String()
    display = fields.String()
    installed_here = fields.String(allow_none=True, metadata={"description": "its version on the API host"})
    served_by = fields.List(fields.String(), metadata={"description": "ids of live agents that have it"})


class AgentSchema(Schema):
    id = fields.String()
    hostname = fields.String()
    capabilities = fields.List(fields.String())
    frameworks = fields.Dict(keys=fields.String(), values=fields.String())
    runners = fields.List(fields.String())
    queues = fields.List(fields.String())
    system = fields.Dict()
    pid = fields.Integer()
    version = fields.String()
    started_at = fields.Float()
    heartbeat_at = fields.Float()
    current_job = fields.String(allow_none=True)
    jobs_done = fields.Integer()
    spooled = fields.List(
        fields.String(),
        metadata={"description": "evaluations whose results it keeps until the store is reachable again"},
    )
    seconds_since_heartbeat = fields.Float()


class QueueSchema(Schema):
    queue = fields.String()
    depth = fields.Integer(metadata={"description": "messages waiting (not those a worker holds)"})
    consumers = fields.List(fields.String(), metadata={"description": "ids of live agents consuming it"})


# PRICE or SYSTEM=PRICE, PRICE a positive decimal number (at most 15 digits either side of the point, a
# two-digit exponent: never 0, never infinite), as parse_prices reads them. In the document too, so a
# request it calls valid is one the API prices.
# SYSTEM holds something other than blanks.
PRICE_PATTERN = rf"^(?:[^=,]*[^=,\s][^=,]*=)?{POSITIVE_NUMBER}$"
# As JSON Schema reads it: ASCII digits, and `$` only at the very end.
_PRICE = re.compile(PRICE_PATTERN.removesuffix("$") + r"\Z", re.ASCII)


def _listed(inner: fields.Field, description: str) -> DelimitedList:
    """A comma-separated list of at least one item (`?models=` is refused: it reads as no item, which
    a client meant as one empty item); an item holds no comma (it would be two)."""
    if isinstance(inner, fields.String) and "pattern" not in inner.metadata:
        inner = _documented(inner, pattern="^[^,]+$")
    return DelimitedList(
        inner, validate=validate.Length(min=1), metadata={"description": f"{description}, comma-separated"}
    )


class CompareQuerySchema(Schema):
    ids = _listed(fields.String(validate=validate.Length(min=1)), "evaluation ids or unique prefixes")
    models = _listed(fields.String(validate=validate.Length(min=1)), "model names")
    frameworks = _listed(fields.String(validate=validate.Length(min=1)), "framework names")
    systems = _listed(fields.String(validate=validate.Length(min=1)), "system ids")
    batch_sizes = _listed(
        fields.Integer(
            validate=validate.Range(min=1, max=MAX_BATCH_SIZE, error="must be between {min} and {max}")
        ),
        "batch sizes",
    )
    scenarios = _listed(fields.String(validate=validate.Length(min=1)), "scenarios")
    since = _aware_time("created at or after this time")
    until = _aware_time("created before this time")
    price_per_hour = _listed(
        fields.String(
            validate=validate.Regexp(
                _PRICE, error="{input} is not a price: expected PRICE or SYSTEM=PRICE, PRICE a number > 0"
            ),
            metadata={"pattern": PRICE_PATTERN},
        ),
        "prices per hour for rows recorded without one (docs/cost.md): PRICE for every system, or "
        "SYSTEM=PRICE for one (an agent id, instance type, hostname or system id prefix)",
    )
    format = fields.String(
        validate=validate.OneOf(("json", "csv"), error="must be one of: {choices}"),
        metadata={"description": "json (default) or csv; Accept: text/csv also selects csv"},
    )


class CompareSchema(Schema):
    columns = fields.List(fields.String(validate=validate.OneOf(COMPARE_COLUMNS)))
    rows = fields.List(fields.Dict(), metadata={"description": "one object per row, keyed by column"})


class CheckSchema(Schema):
    ok = fields.Boolean()
    url = fields.String()
    error = fields.String()


class HealthSchema(Schema):
    status = fields.String(metadata={"description": "ok, or degraded when a dependency is down"})
    broker = fields.Nested(CheckSchema)
    store = fields.Nested(CheckSchema)
    registry = fields.Nested(CheckSchema)
    agents = fields.Integer(allow_none=True, metadata={"description": "live agents"})
    parts = fields.Dict(
        keys=fields.String(),
        values=fields.Nested(CheckSchema),
        metadata={"description": "each part (store, broker, registry) → whether it answered, and why not"},
    )
    down = fields.List(
        fields.String(),
        metadata={"description": 'the parts that did not answer, e.g. ["store"]; empty when ok'},
    )
