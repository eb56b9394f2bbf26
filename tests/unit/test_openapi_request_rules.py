"""The OpenAPI document of an evaluation request and a batch says what the contract accepts: every body
schemathesis draws from the document passes the request schema and the measurement settings' check
(but for the relations between two values no schema can say), and each rule that ties fields together
refuses in the document what the API refuses, naming the same field.

The document is built as the app builds it (apispec, mlscope.api.openapi_fields), without an app.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs
import pytest
import schemathesis
from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from marshmallow import ValidationError
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.converter import to_json_schema

from mlscope.api.openapi_fields import RulesPlugin, exclusive_bounds, stated_schema
from mlscope.api.schemas import PRICE_PATTERN, BatchRequestSchema, CompareQuerySchema, EvaluationRequestSchema
from mlscope.contract.errors import UserError
from mlscope.contract.generation import ENDPOINT_FRAMEWORK
from mlscope.contract.request import parse_request
from mlscope.workers.admission import check_measure

EXAMPLES = 150
# What the document cannot say, refused by the contract anyway: a relation between two values, and the
# keys of a map (OpenAPI 3.0 has no propertyNames).
BEYOND_THE_DOCUMENT = (
    "measure.max_seconds",
    "generation.prompt_tokens",
    "generation.output_tokens",
    "model_options",
    # a trace's columns hold one value per line, its arrivals never go back and it takes no turns or
    # shared prefix beside it; prefix_groups needs shared_prefix_tokens, think_time_ms needs turns
    # (written as rules beside the others, these made schemathesis refuse the section as unsupported)
    "generation.trace",
    "generation.prefix_groups",
    "generation.think_time_ms",
    # a preset's caps come from a table of model names unless an slo is given, and it certifies the
    # 99th percentile; a sweep's values are distinct, integers for concurrency, and it is given
    # without the setting it varies, qps or find_max_qps, in the generate scenario alone
    "generation.slo",
    "load.percentile",
    "load.sweep",
    # a pooling API (embeddings, rerank) takes no turns, shared prefix or preset (whose caps are on
    # tokens): stated beside the pooling rule, they too made the document too large for schemathesis
    "generation.shared_prefix_tokens",
    "generation.turns",
    "generation.preset",
    # back_to_back takes no interval but the default; a load split across agents needs a rate and
    # open-loop scenarios: stated beside load.agents, they made the document too large for schemathesis
    "load.interval_ms",
    "load.agents",
)
_KEYED = "model_options."


def _document() -> dict[str, Any]:
    marshmallow = MarshmallowPlugin()
    spec = APISpec("mlscope", "1", "3.0.3", plugins=[marshmallow, RulesPlugin()])
    assert marshmallow.converter is not None
    marshmallow.converter.add_attribute_function(exclusive_bounds)
    marshmallow.converter.add_attribute_function(stated_schema)
    spec.components.schema("EvaluationRequest", schema=EvaluationRequestSchema)
    spec.components.schema("EvaluationBatch", schema=BatchRequestSchema)
    for name, component in (("evaluations", "EvaluationRequest"), ("batch", "EvaluationBatch")):
        body = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{component}"}}}}
        spec.path(
            f"/{name}",
            operations={"post": {"requestBody": body, "responses": {"202": {"description": "ok"}}}},
        )
    document: dict[str, Any] = spec.to_dict()
    return document


DOCUMENT = _document()


def _validator(component: str) -> Any:
    """A JSON Schema validator of the component, as schemathesis reads OpenAPI 3.0."""
    text = json.dumps(DOCUMENT["components"]["schemas"]).replace("#/components/schemas/", "#/definitions/")
    schemas = {
        name: to_json_schema(schema, "nullable", upgrade_legacy_exclusive_bounds=True)
        for name, schema in json.loads(text).items()
    }
    return jsonschema_rs.Draft7Validator({**schemas[component], "definitions": schemas})


def _bodies(path: str) -> list[dict[str, Any]]:
    operation = schemathesis.openapi.from_dict(DOCUMENT)[path]["POST"]
    drawn: list[dict[str, Any]] = []

    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    @hypothesis_settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def draw(case: schemathesis.Case) -> None:
        if isinstance(case.body, dict):
            drawn.append(case.body)

    draw()
    return drawn


def _refusal(document: dict[str, Any]) -> str | None:
    """The field the contract refuses the document for (the request schema, then the measurement
    settings), or None."""
    try:
        request = parse_request(document)
        check_measure(request.measure)
    except UserError as exc:
        return "model_options" if (exc.field or "").startswith(_KEYED) else exc.field or "?"
    return None


def test_every_request_the_document_allows_passes_the_contract() -> None:
    # Given requests schemathesis draws from the document
    bodies = _bodies("/evaluations")

    # When the contract reads each
    refused = [(body, _refusal(body)) for body in bodies]

    # Then none is refused but for a relation of two values
    assert len(bodies) >= EXAMPLES // 2
    assert [(b, f) for b, f in refused if f is not None and f not in BEYOND_THE_DOCUMENT] == []
    # and the rules let through the scenarios they govern
    scenarios = {s for body in bodies for s in body.get("scenarios", ["single_stream"])}
    assert {"generate", "server", "multi_stream"} <= scenarios


def test_every_batch_the_document_allows_passes_the_contract_for_each_framework() -> None:
    bodies = _bodies("/batch")
    refused = []
    for body in bodies:
        shared = {
            k: v for k, v in body.items() if k not in ("models", "frameworks", "targets", "fan_out", "bricks")
        }
        if body.get("bricks"):
            shared["options"] = {**shared.get("options", {}), "brick": True}
        # An endpoint has no manifest in a batch: the pair is skipped, not admitted.
        for framework in set(body["frameworks"]) - {ENDPOINT_FRAMEWORK}:
            field = _refusal({**shared, "model": "m", "framework": framework})
            if field is not None and field not in BEYOND_THE_DOCUMENT:
                refused.append((body, framework, field))
    assert len(bodies) >= EXAMPLES // 2
    assert refused == []


BASE = {"model": "resnet18", "framework": "onnxruntime"}
# An embeddings evaluation of an endpoint.
_POOLED: dict[str, Any] = {
    "framework": ENDPOINT_FRAMEWORK,
    "scenarios": ["generate"],
    "generation": {"endpoint": "http://h:1/v1", "api": "embeddings"},
}
# Each a request the contract refuses, naming the field, for a rule between fields.
REFUSED = [
    ({"limit": 5}, "limit"),
    ({"tolerance": 0.01}, "tolerance"),
    ({"parity_against": "pytorch"}, "parity_against"),
    ({"scenarios": ["generate", "offline"]}, "scenarios"),
    ({"scenarios": ["generate"], "batch_sizes": [2]}, "batch_sizes"),
    ({"generation": {"requests": 4}}, "generation"),
    ({"framework": ENDPOINT_FRAMEWORK, "scenarios": ["generate"]}, "framework"),
    ({"framework": ENDPOINT_FRAMEWORK}, "framework"),
    ({"scenarios": ["generate"], "generation": {"endpoint": "http://127.0.0.1:8000/v1"}}, "framework"),
    ({"scenarios": ["generate"], "load": {"max_in_flight": 2}}, "load.max_in_flight"),
    ({"scenarios": ["generate"], "load": {"find_max_qps": True}}, "generation.slo"),
    ({"scenarios": ["server"]}, "load.qps"),
    ({"scenarios": ["server"], "load": {"find_max_qps": True}}, "load.latency_bound_ms"),
    ({"load": {"latency_bound_ms": 5}}, "load.latency_bound_ms"),
    ({"load": {"qps": 5}}, "load.qps"),
    ({"load": {"find_max_qps": True}}, "load.find_max_qps"),
    ({"load": {"back_to_back": True}}, "load.back_to_back"),
    (
        {"scenarios": ["generate"], "generation": {"compare_served": True, "endpoint": "http://h/v1"}},
        "generation.compare_served",
    ),
    ({"scenarios": ["generate"], "generation": {"requests": 0}}, "generation.requests"),
    (
        {"scenarios": ["generate"], "generation": {"server_metrics": "http://h:1/metrics"}},
        "generation.server_metrics",
    ),
    ({"scenarios": ["generate"], "generation": {"slo": {"ttft_ms": 0}}}, "generation.slo"),
    ({"scenarios": ["generate"], "generation": {"prompt_tokens": "uniform:0-5"}}, "generation.prompt_tokens"),
    ({"scenarios": ["generate"], "generation": {"api": "embeddings"}}, "generation.api"),
    (
        {**_POOLED, "generation": {**_POOLED["generation"], "ignore_eos": True}},
        "generation.ignore_eos",
    ),
    ({**_POOLED, "generation": {**_POOLED["generation"], "slo": "ttft_ms=5"}}, "generation.slo"),
    (
        {**_POOLED, "generation": {**_POOLED["generation"], "output_tokens": 8}},
        "generation.output_tokens",
    ),
    (
        {**_POOLED, "generation": {"endpoint": "http://h/v1", "inputs_per_request": 2}},
        "generation.inputs_per_request",
    ),
    ({"load": {"seed": -1}}, "load.seed"),
    ({"measure": {"stability": 1}}, "measure.stability"),
    ({"measure": {"warmup_count": 1.5}}, "measure.warmup_count"),
    ({"measure": {"no_such_setting": 1}}, "measure.no_such_setting"),
]


@pytest.mark.parametrize(("change", "field"), REFUSED, ids=[field for _, field in REFUSED])
def test_a_rule_the_contract_enforces_is_in_the_document(change: dict[str, Any], field: str) -> None:
    body = {**BASE, **change}
    assert _refusal(body) == field
    assert not _validator("EvaluationRequest").is_valid(body), body


ACCEPTED = [
    {},
    {"dataset": "digits", "limit": 5},
    {"check_parity": True, "tolerance": 0.01, "parity_against": "pytorch"},
    {
        "scenarios": ["generate"],
        "generation": {"slo": "ttft_ms=200,tpot_ms=50"},
        "load": {"find_max_qps": True},
    },
    {"framework": ENDPOINT_FRAMEWORK, "scenarios": ["generate"], "generation": {"endpoint": "http://h:1/v1"}},
    {
        "framework": ENDPOINT_FRAMEWORK,
        "scenarios": ["generate"],
        "generation": {
            "endpoint": "http://h:1/v1",
            "server_metrics": "http://h:1/metrics",
            "server_metrics_interval_s": 0.25,
        },
    },
    {"scenarios": ["server"], "load": {"find_max_qps": True, "latency_bound_ms": 5}},
    {"scenarios": ["multi_stream"], "load": {"back_to_back": True, "interval_ms": 50}},
    {"scenarios": ["generate"], "generation": {"prompt_tokens": "uniform:3-9", "output_tokens": [1, 2]}},
    {"options": {"brick": True}, "batch_sizes": [8]},
    {**_POOLED, "generation": {**_POOLED["generation"], "inputs_per_request": 8, "slo": "e2e_ms=50"}},
]


@pytest.mark.parametrize("change", ACCEPTED)
def test_a_request_the_contract_takes_is_valid_in_the_document(change: dict[str, Any]) -> None:
    body = {**BASE, **change}
    assert _refusal(body) is None
    errors = [error.message for error in _validator("EvaluationRequest").iter_errors(body)]
    assert errors == []


def test_a_brick_is_refused_in_the_document_as_admission_refuses_it() -> None:
    validator = _validator("EvaluationRequest")
    for change in (
        {"framework": "pytorch"},
        {"scenarios": ["offline"]},
        {"batch_sizes": [1, 2]},
        {"dataset": "digits"},
        {"check_parity": True},
    ):
        assert not validator.is_valid({**BASE, "options": {"brick": True}, **change}), change
    batch = {"models": ["m"], "frameworks": ["onnxruntime"], "bricks": True}
    assert _validator("EvaluationBatch").is_valid(batch)
    assert not _validator("EvaluationBatch").is_valid({**batch, "scenarios": ["offline"]})


def test_a_listed_query_item_holds_no_comma_and_a_price_names_a_system() -> None:
    # A comma inside an item splits it in two on the way in, so the document allows none.
    document = DOCUMENT_FOR_COMPARE["properties"]
    assert document["systems"]["items"]["pattern"] == "^[^,]+$"
    price = jsonschema_rs.Draft7Validator({"type": "string", "pattern": PRICE_PATTERN})
    assert price.is_valid("aws=0.5") and price.is_valid("2")
    # A SYSTEM of blanks is refused by the API (parse_prices), so by the document too.
    assert not price.is_valid(" =0.5") and not price.is_valid("0")


@pytest.mark.parametrize("name", ["ids", "models", "frameworks", "systems", "batch_sizes", "price_per_hour"])
def test_an_empty_listed_query_parameter_is_refused_as_the_document_says(name: str) -> None:
    # `?frameworks=` reads as no item, what a client following the document sent as one empty item
    with pytest.raises(ValidationError) as refused:
        CompareQuerySchema().load({name: ""})
    assert name in refused.value.messages
    assert DOCUMENT_FOR_COMPARE["properties"][name]["minItems"] == 1


def _compare_query() -> dict[str, Any]:
    marshmallow = MarshmallowPlugin()
    spec = APISpec("mlscope", "1", "3.0.3", plugins=[marshmallow])
    spec.components.schema("CompareQuery", schema=CompareQuerySchema)
    schema: dict[str, Any] = spec.to_dict()["components"]["schemas"]["CompareQuery"]
    return schema


DOCUMENT_FOR_COMPARE = _compare_query()
