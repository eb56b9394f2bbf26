"""The HTTP API and the generate scenario: a request with its `generation` settings accepted, stored
and queued as validated (an SLO string as its mapping), an endpoint evaluation on the `endpoint`
framework, bad settings refused as 422 problems naming the field with nothing stored or queued, and
the OpenAPI document describing `generation`. The app, Redis and store are test_api.py's."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from mlscope.contract.generation import ENDPOINT_PATTERN, GenerationSettings
from mlscope.store import Store
from tests.integration.test_api import (  # noqa: F401 (fixtures)
    AUTH,
    app,
    assert_problem,
    queued_messages,
    redis_db,
    settings,
    store,
)


def _trace(inputs: list[int]) -> dict[str, Any]:
    """A trace document of one line per input length, each asking for 8 tokens of output."""
    return {
        "name": "t.jsonl",
        "sha256": "0" * 64,
        "lines": len(inputs),
        "first_line": 1,
        "block_tokens": 512,
        "arrivals_ms": [10.0 * i for i in range(len(inputs))],
        "input_tokens": inputs,
        "output_tokens": [8] * len(inputs),
    }


def _submit(http: FlaskClient, **fields: Any) -> Any:
    body = {"model": "hf:gpt2", "framework": "pytorch", "scenarios": ["generate"], **fields}
    return http.post("/api/v1/evaluations", json=body, headers=AUTH)


def test_a_generate_request_is_accepted_and_queued_with_its_settings(
    http: FlaskClient,
    store: Store,  # noqa: F811
    redis_db: redis.Redis,  # noqa: F811
) -> None:
    generation = {"prompt_tokens": "uniform:8-16", "output_tokens": 8, "slo": "ttft_ms=500,tpot_ms=100"}
    response = _submit(http, generation=generation, model_options={"config": {"n_layer": 2}}, load={"qps": 2})
    assert response.status_code == 202, response.get_json()
    stored = store.get_evaluation(response.get_json()["id"])["request"]
    expected = {**generation, "slo": {"ttft_ms": 500.0, "tpot_ms": 100.0}}
    assert stored["generation"] == expected and stored["load"] == {"qps": 2.0}
    [(_, message)] = queued_messages(redis_db, "pytorch@cpu")
    assert message.request.scenarios == ("generate",) and message.request.generation == expected


def test_an_endpoint_evaluation_runs_on_the_endpoint_framework(
    http: FlaskClient,
    store: Store,  # noqa: F811
) -> None:
    generation = {"endpoint": "http://127.0.0.1:8001/v1", "endpoint_model": "Qwen/Qwen3-0.6B"}
    response = _submit(http, framework="endpoint", model="qwen3-0.6b", generation=generation)
    assert response.status_code == 202, response.get_json()
    stored = store.get_evaluation(response.get_json()["id"])
    assert stored["framework"]["name"] == "endpoint" and stored["model"]["name"] == "qwen3-0.6b"


BAD: list[tuple[dict[str, Any], str]] = [
    ({"generation": {"slo": "ttft=5"}}, "generation.slo"),
    ({"generation": {"prompt_tokens": "poisson:3"}}, "generation.prompt_tokens"),
    ({"generation": {"endpoint": "not a url"}}, "generation.endpoint"),
    ({"generation": {"server_metrics": "not a url"}}, "generation.server_metrics"),
    ({"generation": {"temperature": 1}}, "generation.temperature"),
    ({"scenarios": ["generate", "single_stream"]}, "scenarios"),
    ({"batch_sizes": [8]}, "batch_sizes"),
    ({"load": {"find_max_qps": True}}, "generation.slo"),
    ({"generation": {"endpoint": "http://127.0.0.1:8001/v1"}}, "framework"),
    ({"scenarios": ["offline"], "generation": {"requests": 4}}, "generation"),
    ({"generation": {"trace": {"name": "t.jsonl"}}}, "generation.trace"),
    ({"generation": {"trace": _trace([10, 1020])}}, "generation.trace"),  # GPT-2's context: 1024
    (
        {"generation": {"trace": _trace([60])}, "model_options": {"config": {"n_positions": 64}}},
        "generation.trace",
    ),
    ({"generation": {"turns": 2}, "load": {"qps": 3}}, "generation.turns"),
    ({"generation": {"prefix_groups": 4}}, "generation.prefix_groups"),
    ({"generation": {"api": "embeddings"}}, "generation.api"),
    ({"generation": {"preset": "interactive"}}, "generation.slo"),
    (
        {"generation": {"preset": "interactive", "slo": "tpot_ms=30"}, "load": {"percentile": 90}},
        "load.percentile",
    ),
    ({"load": {"sweep": {"setting": "batch", "values": [1]}}}, "load.sweep"),
    ({"load": {"sweep": {"setting": "qps", "values": []}}}, "load.sweep"),
    ({"load": {"sweep": {"setting": "qps", "values": ["x"]}}}, "load.sweep"),
    ({"load": {"sweep": {"setting": "qps", "values": [1, 2]}, "qps": 3}}, "load.sweep"),
    ({"generation": {"concurrency": 4}, "load": {"sweep": "concurrency=1,2"}}, "load.sweep"),
    (
        {
            "framework": "endpoint",
            "generation": {"endpoint": "http://h/v1", "api": "rerank", "output_tokens": 8},
        },
        "generation.output_tokens",
    ),
]


@pytest.mark.parametrize(("fields", "field"), BAD, ids=[field for _, field in BAD])
def test_a_bad_generate_request_is_a_422_naming_the_field_with_nothing_stored_or_queued(
    http: FlaskClient,
    store: Store,  # noqa: F811
    redis_db: redis.Redis,  # noqa: F811
    fields: dict[str, Any],
    field: str,
) -> None:
    before = store.count_evaluations()
    assert_problem(_submit(http, **fields), 422, field)
    assert store.count_evaluations() == before
    assert queued_messages(redis_db, "pytorch@cpu") == []


def test_the_openapi_document_describes_generation(http: FlaskClient) -> None:
    document = http.get("/api/openapi.json").get_json()
    schemas = document["components"]["schemas"]
    request = next(schema for name, schema in schemas.items() if "generation" in schema.get("properties", {}))
    section = request["properties"]["generation"]
    assert {f.name for f in fields(GenerationSettings)} == set(section["properties"])
    assert section["additionalProperties"] is False
    assert section["properties"]["endpoint"]["pattern"] == ENDPOINT_PATTERN
    scenarios = request["properties"]["scenarios"]["items"]
    assert "generate" in scenarios.get("enum", [])
    measurement = schemas["Evaluation"]["properties"]["measurements"]["items"]["properties"]
    generation = measurement["generation"]["properties"]
    assert {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "output_tokens_per_s", "requests_per_s"} <= set(
        generation
    )
    assert {"goodput", "failed_requests"} <= set(generation)
