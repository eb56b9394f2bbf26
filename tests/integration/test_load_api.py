"""The HTTP API and the load scenarios: a server or multi_stream request accepted with its `load`
settings (stored and queued as validated), bad settings refused as 422 problems naming
`load.<setting>` with nothing stored or queued, a measurement's `load` section served intact, and the
OpenAPI document describing both. The app, Redis and store are test_api.py's."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from mlscope.contract.load import MAX_QPS, LoadSettings
from mlscope.store import Store
from tests.contract.builders import SERVER_LOAD, make_loaded_measurement, make_system
from tests.contract.builders import submit as store_submit
from tests.integration.test_api import (  # noqa: F401 (fixtures)
    AUTH,
    COLD_START,
    app,
    assert_problem,
    queued_messages,
    redis_db,
    settings,
    store,
    submit,
)


def test_a_server_request_is_accepted_and_queued_with_its_load(
    http: FlaskClient,
    store: Store,  # noqa: F811
    redis_db: redis.Redis,  # noqa: F811
) -> None:
    # When a server evaluation at 20 qps is submitted
    response = submit(http, scenarios=["server"], load={"qps": 20})
    # Then it is accepted, stored with its load as validated, and queued carrying it
    assert response.status_code == 202, response.get_json()
    evaluation_id = response.get_json()["id"]
    assert store.get_evaluation(evaluation_id)["request"]["load"] == {"qps": 20.0}
    [(_, message)] = queued_messages(redis_db, "pytorch@cpu")
    assert message.request.scenarios == ("server",) and message.request.load == {"qps": 20.0}


def test_a_batch_applies_its_load_to_every_evaluation(
    http: FlaskClient,
    store: Store,  # noqa: F811
) -> None:
    body = {
        "models": ["test_tiny_mlp"],
        "frameworks": ["pytorch", "onnxruntime"],
        "scenarios": ["multi_stream"],
        "load": {"samples_per_query": 4, "interval_ms": 20},
    }
    response = http.post("/api/v1/evaluations/batch", json=body, headers=AUTH)
    assert response.status_code == 202, response.get_json()
    ids = [e["id"] for e in response.get_json()["evaluations"]]
    assert len(ids) == 2
    for evaluation_id in ids:
        assert store.get_evaluation(evaluation_id)["request"]["load"] == {
            "samples_per_query": 4,
            "interval_ms": 20.0,
        }


BAD_LOADS: list[tuple[str, dict[str, Any], str, str]] = [
    ("qps 0", {"scenarios": ["server"], "load": {"qps": 0}}, "load.qps", "expected a number in (0, 100000]"),
    ("qps 1e9", {"scenarios": ["server"], "load": {"qps": 1e9}}, "load.qps", "(0, 100000]"),
    (
        "bound 0",
        {"scenarios": ["server"], "load": {"qps": 5, "latency_bound_ms": 0}},
        "load.latency_bound_ms",
        "expected a number > 0",
    ),
    (
        "percentile 100",
        {"scenarios": ["server"], "load": {"qps": 5, "percentile": 100}},
        "load.percentile",
        "",
    ),
    ("server without qps", {"scenarios": ["server"], "load": {}}, "load.qps", "needs a target rate"),
    ("qps without server", {"load": {"qps": 5}}, "load.qps", "applies only to the server scenario"),
    ("unknown setting", {"scenarios": ["server"], "load": {"qps": 5, "burst": 2}}, "load.burst", "burst"),
    ("load not an object", {"scenarios": ["server"], "load": [5]}, "load", ""),
    (
        "back_to_back without multi_stream",
        {"scenarios": ["server"], "load": {"qps": 5, "back_to_back": True}},
        "load.back_to_back",
        "applies only to the multi_stream scenario",
    ),
    (
        "pool smaller than a query",
        {"scenarios": ["multi_stream"], "load": {"samples_per_query": 16}, "options": {"input_pool": 4}},
        "load.samples_per_query",
        "options.input_pool is 4",
    ),
]


@pytest.mark.parametrize(("case", "fields", "field", "words"), BAD_LOADS, ids=[c[0] for c in BAD_LOADS])
def test_a_bad_load_is_a_422_naming_the_setting_and_nothing_is_stored(
    http: FlaskClient,
    store: Store,  # noqa: F811
    redis_db: redis.Redis,  # noqa: F811
    case: str,
    fields: dict[str, Any],
    field: str,
    words: str,
) -> None:
    problem = assert_problem(submit(http, **fields), 422, field)
    assert words in " ".join(problem["errors"][field])
    # one line: the schema's errors name the field in it, admission's say it in words
    assert problem["detail"].count("\n") == 0 and words in problem["detail"]
    assert store.count_evaluations() == 0 and redis_db.dbsize() == 0


def test_a_measurements_load_section_is_served_intact(
    http: FlaskClient,
    store: Store,  # noqa: F811
) -> None:
    # Given a finished evaluation whose server point has a load section with a search
    evaluation_id = store_submit(store)
    store.start_evaluation(evaluation_id)
    store.finish_evaluation(
        evaluation_id,
        system=make_system(),
        framework={"name": "pytorch", "version": "2.3.0"},
        cold_start=COLD_START,
        measurements=[make_loaded_measurement("server"), make_loaded_measurement("multi_stream", 4)],
    )
    # When it is read over HTTP, alone and listed
    one = http.get(f"/api/v1/evaluations/{evaluation_id}").get_json()
    listed = http.get("/api/v1/evaluations").get_json()["items"][0]
    # Then the load sections are exactly as stored
    by_scenario = {m["scenario"]: m for m in one["measurements"]}
    assert by_scenario["server"]["load"] == SERVER_LOAD
    assert by_scenario["multi_stream"]["load"]["samples_per_query"] == 8
    assert listed["measurements"] == one["measurements"]


def test_the_openapi_document_describes_load(http: FlaskClient) -> None:
    spec = http.get("/api/openapi.json").get_json()
    schemas = spec["components"]["schemas"]
    measurement = schemas["Evaluation"]["properties"]["measurements"]["items"]["properties"]
    load = measurement["load"]["properties"]
    assert {"certified", "target_qps", "achieved_qps", "issue_lateness_ms", "search"} <= set(load)
    assert "probes" in load["search"]["properties"]
    request = next(s for name, s in schemas.items() if name.startswith("EvaluationRequest"))
    section = request["properties"]["load"]
    # every setting a client gives; load.shard is the API's own, set on each part of a split load
    assert {f.name for f in fields(LoadSettings)} - {"shard"} == set(section["properties"])
    assert section["additionalProperties"] is False
    qps = section["properties"]["qps"]
    assert (qps["minimum"], qps.get("exclusiveMinimum"), qps["maximum"]) == (0, True, MAX_QPS)
