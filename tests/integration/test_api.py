"""The HTTP API against the real Redis (broker and agent registry) and a real SQLite store.

Each test gets Redis database API_REDIS_DB, emptied first, so what a test finds on a queue is what it
sent. The app is driven through Flask's test client; the Python client runs against the same app served
by werkzeug in a thread. Agents are registry entries written directly (AgentInfo): the worker processes
that write them for real are tested in test_farm.py. Given / When / Then in each test's comments.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from mlscope import __version__
from mlscope.api import create_app
from mlscope.broker.tasks import EVALUATE_TASK, EvaluationMessage
from mlscope.client import ApiError, Client, WaitTimeout
from mlscope.contract.queues import queues_for
from mlscope.contract.settings import Settings, load_settings
from mlscope.registry.agents import AgentInfo, AgentRegistry
from mlscope.registry.models import ModelRegistry
from mlscope.store import Store
from mlscope.store.records import COMPARE_COLUMNS
from mlscope.store.sql import SQLStore
from tests.contract.builders import COLD_START, make_measurement, make_system
from tests.contract.builders import submit as store_submit
from tests.fixtures.services import emptied_redis

API_REDIS_DB = 14
REDIS_URL = f"redis://127.0.0.1:6379/{API_REDIS_DB}"
TOKEN = "api-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MODEL = "test_tiny_mlp"
PROBLEM = "application/problem+json"
JSON = "application/json"
ZERO_BATCH = "invalid request: batch_sizes.0: must be between 1 and 65536"


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def redis_db() -> Iterator[redis.Redis]:
    """Redis database API_REDIS_DB, emptied; unreachable Redis skips locally and fails in CI."""
    yield from emptied_redis(REDIS_URL)


@pytest.fixture
def settings(mlscope_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_db: redis.Redis) -> Settings:
    monkeypatch.setenv("MLSCOPE_BROKER_URL", REDIS_URL)
    monkeypatch.setenv("MLSCOPE_API_TOKENS", f"{TOKEN},second-token")
    return load_settings()


def _closing(app: Flask) -> None:
    ctx = app.extensions["mlscope"]
    ctx.store.close()
    ctx.agents.close()


@pytest.fixture
def app(settings: Settings) -> Iterator[Flask]:
    made = create_app(settings)
    yield made
    _closing(made)


@pytest.fixture
def store(app: Flask) -> Store:
    found: Store = app.extensions["mlscope"].store
    return found


@pytest.fixture
def registry(settings: Settings) -> Iterator[AgentRegistry]:
    made = AgentRegistry(REDIS_URL, ttl_s=60)
    yield made
    made.close()


def fake_agent(agent_id: str, capabilities: list[str], frameworks: list[str]) -> AgentInfo:
    """A registry entry as a worker with these capabilities and frameworks would publish it."""
    return AgentInfo(
        id=agent_id,
        hostname=f"{agent_id}.example",
        capabilities=tuple(capabilities),
        frameworks={name: "1.0" for name in frameworks},
        runners=("process",),
        queues=tuple(queues_for(frameworks, capabilities, agent_id)),
        version=__version__,
    )


def queued_messages(connection: redis.Redis, queue: str) -> list[tuple[dict[str, Any], EvaluationMessage]]:
    """(Celery headers, decoded message) of each job waiting on `queue`, as kombu's Redis transport
    keeps them: a JSON envelope whose body is base64 JSON [args, kwargs, embed]."""
    found = []
    for raw in connection.lrange(queue, 0, -1):
        envelope = json.loads(raw)
        _, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
        found.append((envelope["headers"], EvaluationMessage.from_dict(kwargs["message"])))
    return found


def submit(http: FlaskClient, **fields: Any) -> Any:
    return http.post(
        "/api/v1/evaluations", json={"model": MODEL, "framework": "pytorch", **fields}, headers=AUTH
    )


def finish(store: Store, evaluation_id: str, *, system: int = 1, mean: float = 2.0) -> None:
    store.start_evaluation(evaluation_id)
    store.finish_evaluation(
        evaluation_id,
        system=make_system(system),
        framework={"name": "pytorch", "version": "2.3.0"},
        cold_start=COLD_START,
        measurements=[make_measurement("single_stream", 1, mean=mean)],
    )


def assert_problem(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == PROBLEM
    problem: dict[str, Any] = response.get_json(force=True)
    assert problem["type"] == "about:blank" and problem["status"] == status
    assert problem["title"] and problem["detail"]
    assert "Traceback" not in response.get_data(as_text=True)
    if field is not None:
        assert field in problem.get("errors", {}), problem
    return problem


# ----- submitting ------------------------------------------------------------------------------------


def test_a_submitted_evaluation_is_stored_queued_and_waits_on_its_framework_queue(
    http: FlaskClient, store: Store, redis_db: redis.Redis, settings: Settings
) -> None:
    # Given no live worker
    # When one evaluation is submitted
    response = submit(http, batch_sizes=[1, 4], measure={"min_count": 5})
    # Then it is accepted with its URL, queue and target, and a warning that nobody serves it yet
    assert response.status_code == 202, response.get_json()
    body = response.get_json()
    assert body["status"] == "queued" and body["queue"] == "pytorch@cpu" and body["target"] == "cpu"
    assert response.headers["Location"] == body["links"]["self"] == f"/api/v1/evaluations/{body['id']}"
    assert len(body["warnings"]) == 1 and "no live worker serves pytorch@cpu" in body["warnings"][0]
    # And it is stored queued, with the manifest it will run
    stored = store.get_evaluation(body["id"])
    manifest = ModelRegistry.load(settings.manifests).get(MODEL, "pytorch")
    assert stored["status"] == "queued"
    assert stored["model"] == {"name": MODEL, "version": manifest.version, "manifest_sha256": manifest.sha256}
    assert stored["manifest"] == manifest.to_dict()
    assert stored["request"]["batch_sizes"] == [1, 4] and stored["request"]["measure"] == {"min_count": 5}
    # And with the queue its job went to (a sweeper sends it back there), never started yet, as read
    assert (stored["queue"], stored["attempts"]) == ("pytorch@cpu", 0)
    read = http.get(body["links"]["self"]).get_json()
    assert (read["queue"], read["attempts"]) == ("pytorch@cpu", 0)
    # And exactly one message waits on the Redis queue, carrying the same id and request
    assert redis_db.llen("pytorch@cpu") == 1
    [(headers, message)] = queued_messages(redis_db, "pytorch@cpu")
    assert headers["task"] == EVALUATE_TASK and headers["id"] == body["id"]
    assert message.evaluation_id == body["id"] and message.queue == "pytorch@cpu"
    assert message.request.model == MODEL and message.request.batch_sizes == (1, 4)
    # And the queue is remembered for /queues and metrics
    assert "pytorch@cpu" in AgentRegistry(REDIS_URL).known_queues()


def test_no_warning_when_a_live_agent_consumes_the_queue(
    http: FlaskClient, registry: AgentRegistry, redis_db: redis.Redis
) -> None:
    # Given a live agent on an x86_64 CPU with PyTorch (it consumes pytorch@cpu among others)
    registry.register(fake_agent("box-a", ["cpu.x86_64"], ["pytorch"]))
    # When an evaluation targets cpu, and another targets the agent itself
    anywhere = submit(http).get_json()
    pinned = submit(http, target="agent:box-a").get_json()
    # Then neither carries a warning, and each waits on its own queue
    assert anywhere["warnings"] == [] and pinned["warnings"] == []
    assert pinned["queue"] == "agent@box-a" and pinned["target"] == "agent:box-a"
    assert redis_db.llen("pytorch@cpu") == 1 and redis_db.llen("agent@box-a") == 1


def test_a_device_other_than_cpu_targets_gpu_queues(http: FlaskClient, redis_db: redis.Redis) -> None:
    # When an evaluation asks for cuda without naming a target
    body = submit(http, device="cuda:0").get_json()
    # Then it waits for any GPU worker with PyTorch
    assert body["queue"] == "pytorch@gpu" and body["target"] == "gpu"
    assert redis_db.llen("pytorch@gpu") == 1


def test_a_broker_that_is_down_fails_the_stored_evaluation_and_answers_503(
    settings: Settings, redis_db: redis.Redis
) -> None:
    # Given an API whose broker listens nowhere (its agent registry is up)
    down = Settings(
        store_url=settings.store_url,
        broker_url=f"redis://127.0.0.1:{closed_port()}/0",
        registry_url=REDIS_URL,
        api_tokens=(TOKEN,),
        manifests=settings.manifests,
    )
    app = create_app(down)
    try:
        # When an evaluation is submitted
        response = submit(app.test_client())
        # Then the answer is a 503 problem naming the failed evaluation
        problem = assert_problem(response, 503)
        stored = app.extensions["mlscope"].store.get_evaluation(problem["failed"])
        # And the store holds it failed in the queue phase, not queued forever
        assert stored["status"] == "failed"
        assert stored["error"]["type"] == "BrokerUnavailable" and stored["error"]["phase"] == "queue"
        # And a batch stops at its first job the same way, saying none was queued
        batch = {"models": [MODEL], "frameworks": ["pytorch", "onnxruntime"]}
        refused = assert_problem(
            app.test_client().post("/api/v1/evaluations/batch", json=batch, headers=AUTH), 503
        )
        assert refused["queued"] == [] and refused["not_submitted"] == 1
        assert app.extensions["mlscope"].store.count_evaluations(status="failed") == 2
    finally:
        _closing(app)


# ----- batches ---------------------------------------------------------------------------------------


def test_a_batch_makes_one_evaluation_per_model_framework_and_target_and_skips_missing_manifests(
    http: FlaskClient, store: Store, redis_db: redis.Redis
) -> None:
    # Given test_tiny_mlp has manifests for both frameworks and test_crashing only for PyTorch
    body = {
        "models": [MODEL, "test_crashing"],
        "frameworks": ["pytorch", "onnxruntime"],
        "batch_sizes": [1, 8],
        "runner": "inline",
    }
    # When the matrix is submitted
    response = http.post("/api/v1/evaluations/batch", json=body, headers=AUTH)
    # Then three evaluations are made (on cpu), and the missing pair is skipped with its reason
    assert response.status_code == 202, response.get_json()
    answer = response.get_json()
    made = {(e["model"], e["framework"], e["queue"]) for e in answer["evaluations"]}
    assert made == {
        (MODEL, "pytorch", "pytorch@cpu"),
        (MODEL, "onnxruntime", "onnxruntime@cpu"),
        ("test_crashing", "pytorch", "pytorch@cpu"),
    }
    assert [(s["model"], s["framework"]) for s in answer["skipped"]] == [("test_crashing", "onnxruntime")]
    assert "no manifest for framework 'onnxruntime'" in answer["skipped"][0]["reason"]
    # And every evaluation measures every batch size with the shared settings
    ids = [e["id"] for e in answer["evaluations"]]
    for evaluation_id in ids:
        request = store.get_evaluation(evaluation_id)["request"]
        assert request["batch_sizes"] == [1, 8] and request["runner"] == "inline"
    # And the jobs wait on their queues, and compare_url names exactly these evaluations
    assert redis_db.llen("pytorch@cpu") == 2 and redis_db.llen("onnxruntime@cpu") == 1
    assert answer["compare_url"] == f"/api/v1/compare?ids={','.join(ids)}"


def test_fan_out_pins_one_evaluation_to_each_live_agent_that_matches(
    http: FlaskClient, registry: AgentRegistry, redis_db: redis.Redis
) -> None:
    # Given two live agents: an x86_64 box with both frameworks, an aarch64 box with PyTorch only
    registry.register(fake_agent("box-a", ["cpu.x86_64"], ["pytorch", "onnxruntime"]))
    registry.register(fake_agent("box-b", ["cpu.aarch64"], ["pytorch"]))
    # When the model is fanned out over every CPU and every GPU
    body = {
        "models": [MODEL],
        "frameworks": ["pytorch", "onnxruntime"],
        "targets": ["cpu", "gpu"],
        "fan_out": True,
    }
    answer = http.post("/api/v1/evaluations/batch", json=body, headers=AUTH).get_json()
    # Then each CPU agent gets one job per framework it has, pinned to it, with no warning
    made = sorted((e["framework"], e["target"], e["queue"]) for e in answer["evaluations"])
    assert made == [
        ("onnxruntime", "agent:box-a", "agent@box-a"),
        ("onnxruntime", "gpu", "onnxruntime@gpu"),
        ("pytorch", "agent:box-a", "agent@box-a"),
        ("pytorch", "agent:box-b", "agent@box-b"),
        ("pytorch", "gpu", "pytorch@gpu"),
    ]
    pinned = [e for e in answer["evaluations"] if e["target"].startswith("agent:")]
    assert all(e["warnings"] == [] for e in pinned)
    # And a target no live agent matches stays one job on its capability queue, with a warning
    assert len(answer["warnings"]) == 2 and all("no live agent matches gpu" in w for w in answer["warnings"])
    assert redis_db.llen("agent@box-a") == 2 and redis_db.llen("agent@box-b") == 1
    assert redis_db.llen("pytorch@gpu") == 1


def test_a_batch_is_checked_whole_before_anything_is_stored(
    http: FlaskClient, store: Store, redis_db: redis.Redis
) -> None:
    # When a batch names an unknown model second, or an unknown framework
    cases = [
        ({"models": [MODEL, "test_tiny_mpl"], "frameworks": ["pytorch"]}, "models.1"),
        ({"models": [MODEL], "frameworks": ["pytorch", "paddlepaddle"]}, "frameworks.1"),
        ({"models": [MODEL], "frameworks": ["pytorch"], "measure": {"min_count": 0}}, "measure.min_count"),
        ({"models": [MODEL], "frameworks": ["pytorch"], "targets": ["CPU!"]}, "targets.0"),
        ({"models": ["test_crashing"], "frameworks": ["onnxruntime"]}, "frameworks"),
    ]
    for body, field in cases:
        # Then each is a 422 naming the field, and nothing is stored or queued
        assert_problem(http.post("/api/v1/evaluations/batch", json=body, headers=AUTH), 422, field)
    assert store.count_evaluations() == 0 and redis_db.dbsize() == 0
    # And the unknown model's message suggests the close name
    problem = http.post("/api/v1/evaluations/batch", json=cases[0][0], headers=AUTH).get_json()
    assert "did you mean test_tiny_mlp" in problem["errors"]["models.1"][0]


def test_a_batch_beyond_500_evaluations_is_refused_naming_the_count(
    http: FlaskClient, store: Store, redis_db: redis.Redis
) -> None:
    # Given six (model, framework) pairs with manifests (five PyTorch test models, one ONNX)
    models = [MODEL, "test_crashing", "test_hanging", "test_memory_hungry", "test_broken_factory"]
    # When they are asked for on 100 capability targets: 600 evaluations
    targets = [f"cpu.t{i}" for i in range(100)]
    body = {"models": models, "frameworks": ["pytorch", "onnxruntime"], "targets": targets}
    problem = assert_problem(http.post("/api/v1/evaluations/batch", json=body, headers=AUTH), 422, "models")
    # Then the count is named, and nothing is stored
    assert "600" in problem["detail"] and "500" in problem["detail"]
    assert store.count_evaluations() == 0 and redis_db.dbsize() == 0


# ----- reading ---------------------------------------------------------------------------------------

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def test_listing_filters_and_pages_newest_first(http: FlaskClient, store: Store) -> None:
    # Given five evaluations an hour apart: three of resnet18, two of the tiny model, one succeeded
    ids = [
        store_submit(store, model="resnet18" if i < 3 else MODEL, created_at=T0 + timedelta(hours=i))
        for i in range(5)
    ]
    finish(store, ids[1])
    # When filtered by model, status and time
    by_model = http.get("/api/v1/evaluations?model=resnet18").get_json()
    succeeded = http.get("/api/v1/evaluations?status=succeeded").get_json()
    window = http.get(
        "/api/v1/evaluations",
        query_string={"since": (T0 + timedelta(hours=1)).isoformat(), "until": "2024-05-01T15:00:00Z"},
    ).get_json()
    # Then each answers the matching ones, newest first, with the total
    assert [e["id"] for e in by_model["items"]] == ids[2::-1] and by_model["total"] == 3
    assert [e["id"] for e in succeeded["items"]] == [ids[1]]
    assert succeeded["items"][0]["status"] == "succeeded"
    assert [e["id"] for e in window["items"]] == [ids[2], ids[1]]
    # And pages of two cover everything once, in order
    pages = [http.get(f"/api/v1/evaluations?limit=2&offset={offset}").get_json() for offset in (0, 2, 4)]
    assert [e["id"] for page in pages for e in page["items"]] == ids[::-1]
    assert [(p["total"], p["limit"], p["offset"]) for p in pages] == [(5, 2, 0), (5, 2, 2), (5, 2, 4)]
    # And a time without a timezone, or a limit out of range, is a 422 naming it
    assert_problem(http.get("/api/v1/evaluations?since=2024-05-01T12:00:00"), 422, "since")
    assert_problem(http.get("/api/v1/evaluations?limit=1001"), 422, "limit")
    assert_problem(http.get("/api/v1/evaluations?status=done"), 422, "status")
    # An offset past what the store's 64-bit integers hold is refused here, not a database error.
    assert_problem(http.get("/api/v1/evaluations?offset=12800985442523647282"), 422, "offset")


def test_one_evaluation_by_id_or_prefix_in_the_result_shape(http: FlaskClient, store: Store) -> None:
    # Given two evaluations whose ids share a prefix, one finished
    first = store_submit(store, id="abcd1111")
    store_submit(store, id="abcd2222")
    finish(store, first)
    # When one is read by a unique prefix
    response = http.get("/api/v1/evaluations/abcd1")
    # Then it answers exactly what the store holds (nothing lost on the way), raw latencies apart
    assert response.status_code == 200
    assert response.get_json() == store.get_evaluation(first)
    assert "latencies_ns" not in response.get_json()["measurements"][0]
    raw = http.get("/api/v1/evaluations/abcd1111?raw=true").get_json()
    stored_raw = store.get_evaluation(first, include_raw=True)
    assert raw["measurements"][0]["latencies_ns"] == stored_raw["measurements"][0]["latencies_ns"]
    # And an ambiguous prefix is a 422 listing the candidates; an unknown id a 404
    ambiguous = assert_problem(http.get("/api/v1/evaluations/abcd"), 422, "id")
    assert ambiguous["candidates"] == ["abcd1111", "abcd2222"]
    unknown = assert_problem(http.get("/api/v1/evaluations/ffff0000"), 404)
    assert "no evaluation with id 'ffff0000'" in unknown["detail"]


def test_cancelling_a_queued_evaluation_and_one_that_has_ended(
    http: FlaskClient, store: Store, redis_db: redis.Redis
) -> None:
    # Given a queued evaluation
    queued = submit(http).get_json()["id"]
    # When it is cancelled without a token
    assert_problem(http.delete(f"/api/v1/evaluations/{queued}"), 401)
    assert store.get_evaluation(queued)["status"] == "queued"
    # When it is cancelled with one (by prefix)
    response = http.delete(f"/api/v1/evaluations/{queued[:8]}", headers=AUTH)
    # Then it is cancelled, and cancelling again says it had already ended
    assert response.status_code == 200
    assert response.get_json() == {"id": queued, "status": "cancelled", "cancelled": True}
    again = http.delete(f"/api/v1/evaluations/{queued}", headers=AUTH).get_json()
    assert again == {"id": queued, "status": "cancelled", "cancelled": False}
    assert store.get_evaluation(queued)["status"] == "cancelled"
    # And an unknown id is a 404
    assert_problem(http.delete("/api/v1/evaluations/ffff0000", headers=AUTH), 404)


def test_compare_as_json_and_csv(http: FlaskClient, store: Store) -> None:
    # Given two finished evaluations of one model on two systems, and one still queued
    fast, slow = store_submit(store), store_submit(store)
    finish(store, fast, system=1, mean=1.5)
    finish(store, slow, system=3, mean=3.0)
    store_submit(store)
    # When they are compared as JSON
    table = http.get(f"/api/v1/compare?ids={fast},{slow}").get_json()
    # Then the columns are the store's, the fastest first
    assert table["columns"] == list(COMPARE_COLUMNS)
    assert [(r["evaluation_id"], r["system_id"]) for r in table["rows"]] == [(fast, "sys-1"), (slow, "sys-3")]
    assert table["rows"][0]["median_ms"] == 1.5 and table["rows"][0]["reasons"] == ["too few samples"]
    # When they are compared as CSV (by format, and by Accept)
    as_csv = http.get(f"/api/v1/compare?ids={fast},{slow}&format=csv")
    by_accept = http.get(f"/api/v1/compare?ids={fast},{slow}", headers={"Accept": "text/csv"})
    # Then the header is the columns and each row one line
    assert as_csv.mimetype == "text/csv" and by_accept.mimetype == "text/csv"
    assert as_csv.get_data(as_text=True) == by_accept.get_data(as_text=True)
    lines = as_csv.get_data(as_text=True).splitlines()
    assert lines[0] == ",".join(COMPARE_COLUMNS) and len(lines) == 3
    assert fast in lines[1] and "too few samples" in lines[1]
    # And filters narrow it; a bad filter or an unknown id is a 422 naming it
    assert http.get("/api/v1/compare?systems=sys-3").get_json()["rows"][0]["evaluation_id"] == slow
    assert http.get("/api/v1/compare?batch_sizes=8").get_json()["rows"] == []
    assert_problem(http.get("/api/v1/compare?batch_sizes=1,eight"), 422, "batch_sizes.1")
    assert_problem(http.get("/api/v1/compare?ids=ffff0000"), 422, "ids.0")


def test_models_frameworks_agents_and_queues(
    http: FlaskClient, registry: AgentRegistry, redis_db: redis.Redis
) -> None:
    # Given a live agent with PyTorch and one job waiting on pytorch@cpu
    registry.register(fake_agent("box-a", ["cpu.x86_64"], ["pytorch"]))
    submit(http)
    # Then the models list the tiny model on each of its frameworks, and its manifests read back
    models = {m["name"]: m for m in http.get("/api/v1/models").get_json()}
    names = ["onnxruntime", "openvino", "pytorch"]
    assert models[MODEL]["frameworks"] == names and models[MODEL]["task"] == "other"
    detail = http.get(f"/api/v1/models/{MODEL}").get_json()
    assert sorted(detail["manifests"]) == names
    assert detail["manifests"]["pytorch"]["name"] == MODEL
    unknown = assert_problem(http.get("/api/v1/models/test_tiny_mpl"), 404)
    assert "did you mean test_tiny_mlp" in unknown["detail"]
    # And every registered framework is listed with who serves it
    frameworks = {f["name"]: f for f in http.get("/api/v1/frameworks").get_json()}
    assert frameworks["pytorch"]["served_by"] == ["box-a"] and frameworks["onnxruntime"]["served_by"] == []
    assert "installed_here" in frameworks["pytorch"]
    # And the agent is listed with how long ago it beat
    [agent] = http.get("/api/v1/agents").get_json()
    assert agent["id"] == "box-a" and agent["seconds_since_heartbeat"] >= 0
    assert "pytorch@cpu.x86_64" in agent["queues"]
    # And the queue shows its depth and its consumer
    queues = {q["queue"]: q for q in http.get("/api/v1/queues").get_json()}
    assert queues["pytorch@cpu"] == {"queue": "pytorch@cpu", "depth": 1, "consumers": ["box-a"]}
    assert queues["agent@box-a"]["depth"] == 0


# ----- operations ------------------------------------------------------------------------------------


def test_health_is_ok_when_every_part_answers(http: FlaskClient) -> None:
    response = http.get("/api/v1/health")
    assert response.status_code == 200
    health = response.get_json()
    assert health["status"] == "ok" and health["agents"] == 0
    assert health["broker"] == {"ok": True, "url": REDIS_URL}
    assert health["store"]["ok"] and health["registry"]["ok"]


def test_health_is_degraded_when_the_broker_is_down_and_hides_its_password(
    settings: Settings, redis_db: redis.Redis
) -> None:
    # Given an API whose broker (with a password in its URL) listens nowhere
    port = closed_port()
    down = Settings(
        store_url=settings.store_url,
        broker_url=f"redis://:hunter2@127.0.0.1:{port}/0",
        registry_url=REDIS_URL,
        manifests=settings.manifests,
    )
    app = create_app(down)
    try:
        # When its health is asked for
        response = app.test_client().get("/api/v1/health")
        # Then it is degraded, the broker is named down with its URL but not its password
        assert response.status_code == 503
        health = response.get_json()
        assert health["status"] == "degraded"
        assert health["broker"]["ok"] is False and health["broker"]["error"]
        assert health["broker"]["url"] == f"redis://127.0.0.1:{port}/0"
        assert "hunter2" not in response.get_data(as_text=True)
        assert health["store"]["ok"] and health["registry"]["ok"]
    finally:
        _closing(app)


def test_metrics_parse_and_count_requests_evaluations_and_queues(http: FlaskClient) -> None:
    # Given one submitted evaluation and one refused request
    submit(http)
    http.post("/api/v1/evaluations", json={}, headers=AUTH)
    # When Prometheus scrapes
    response = http.get("/api/v1/metrics")
    assert response.status_code == 200 and response.mimetype == "text/plain"
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.get_data(as_text=True))
        for sample in family.samples
    }
    # Then requests are counted by endpoint and status, and the farm's state is reported
    post = (("endpoint", "/api/v1/evaluations"), ("method", "POST"))
    assert samples[("mlscope_api_requests_total", (*post, ("status", "202")))] == 1
    assert samples[("mlscope_api_requests_total", (*post, ("status", "422")))] == 1
    assert samples[("mlscope_api_request_duration_seconds_count", post)] == 2
    assert samples[("mlscope_evaluations", (("status", "queued"),))] == 1
    assert samples[("mlscope_evaluations", (("status", "succeeded"),))] == 0
    assert samples[("mlscope_agents_live", ())] == 0
    assert samples[("mlscope_queue_depth", (("queue", "pytorch@cpu"),))] == 1
    assert samples[("mlscope_component_up", (("component", "broker"),))] == 1


def test_the_openapi_document_lists_every_path_and_the_docs_page_loads_it(http: FlaskClient) -> None:
    spec = http.get("/api/openapi.json").get_json()
    assert spec["openapi"].startswith("3.")
    assert spec["info"]["title"] == "mlscope" and spec["info"]["version"] == __version__
    assert set(spec["paths"]) == {
        "/api/v1/evaluations",
        "/api/v1/evaluations/batch",
        "/api/v1/evaluations/export",
        "/api/v1/evaluations/{evaluation_id}",
        "/api/v1/evaluations/{evaluation_id}/trace",
        "/api/v1/evaluations/{evaluation_id}/layers",
        "/api/v1/models",
        "/api/v1/models/{name}",
        "/api/v1/models/sha256:{digest}",
        "/api/v1/models/sha256:{digest}/file",
        "/api/v1/datasets",
        "/api/v1/datasets/sha256:{digest}",
        "/api/v1/datasets/sha256:{digest}/file",
        "/api/v1/frameworks",
        "/api/v1/agents",
        "/api/v1/queues",
        "/api/v1/compare",
        "/api/v1/compare/diff",
        "/api/v1/history",
        "/api/v1/history/series",
        "/api/v1/history/regressions",
        "/api/v1/bricks/estimates",
        "/api/v1/health",
        "/api/v1/metrics",
    }
    submit_op = spec["paths"]["/api/v1/evaluations"]["post"]
    body_ref = submit_op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body_schema = spec["components"]["schemas"][body_ref.rsplit("/", 1)[-1]]
    assert {"model", "framework", "batch_sizes", "target"} <= set(body_schema["properties"])
    assert submit_op["security"] == [{"bearerAuth": []}] and "202" in submit_op["responses"]
    assert "bearerAuth" in spec["components"]["securitySchemes"]
    upload_op = spec["paths"]["/api/v1/models"]["post"]
    assert set(upload_op["requestBody"]["content"]) == {"application/octet-stream", "multipart/form-data"}
    assert {"200", "201", "413"} <= set(upload_op["responses"]) and "get" in spec["paths"]["/api/v1/models"]
    assert "application/problem+json" in spec["components"]["responses"]["UNPROCESSABLE_ENTITY"]["content"]
    read_op = spec["paths"]["/api/v1/evaluations/{evaluation_id}"]["get"]
    result_ref = read_op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    result = spec["components"]["schemas"][result_ref.rsplit("/", 1)[-1]]["properties"]
    assert result["attempts"]["type"] == "integer"
    assert result["queue"]["type"] == "string" and result["queue"]["nullable"] is True
    docs = http.get("/api/docs")
    page = docs.get_data(as_text=True)
    # Swagger UI is served by the API itself, from the installed swagger_ui_bundle: no CDN.
    assert docs.status_code == 200 and "https://" not in page
    assert "/api/docs/assets/swagger-ui-bundle.js" in page
    script = http.get("/api/docs/assets/swagger-ui-bundle.js")
    assert script.status_code == 200 and "SwaggerUIBundle" in script.get_data(as_text=True)


# ----- hostile input and authorization ---------------------------------------------------------------

OVERSIZED = '{"model": "' + "x" * (2 * 1024 * 1024) + '", "framework": "pytorch"}'
HOSTILE: list[tuple[str, dict[str, Any], int, str | None]] = [
    ("missing fields", {"json": {}}, 422, "model"),
    ("wrong type", {"json": {"model": 7, "framework": "pytorch"}}, 422, "model"),
    (
        "batch sizes not a list",
        {"json": {"model": MODEL, "framework": "pytorch", "batch_sizes": "8"}},
        422,
        "batch_sizes",
    ),
    (
        "batch size 0",
        {"json": {"model": MODEL, "framework": "pytorch", "batch_sizes": [0]}},
        422,
        "batch_sizes.0",
    ),
    ("unknown model", {"json": {"model": "resnet19", "framework": "pytorch"}}, 422, "model"),
    ("unknown framework", {"json": {"model": MODEL, "framework": "jax"}}, 422, "framework"),
    ("unknown field", {"json": {"model": MODEL, "framework": "pytorch", "colour": "red"}}, 422, "colour"),
    (
        "unknown option",
        {"json": {"model": MODEL, "framework": "pytorch", "options": {"x": 1}}},
        422,
        "options.x",
    ),
    (
        "unknown measure",
        {"json": {"model": MODEL, "framework": "pytorch", "measure": {"speed": 1}}},
        422,
        "measure.speed",
    ),
    ("bad target", {"json": {"model": MODEL, "framework": "pytorch", "target": "CPU!"}}, 422, "target"),
    ("invalid JSON", {"data": '{"model": ', "content_type": "application/json"}, 400, "body"),
    ("non-object JSON", {"json": [MODEL, "pytorch"]}, 422, "body"),
    ("JSON string", {"json": "resnet18"}, 422, "body"),
    ("not JSON at all", {"data": "model=resnet18", "content_type": "text/plain"}, 415, "body"),
    ("oversized body", {"data": OVERSIZED, "content_type": "application/json"}, 413, None),
    ("nested too deeply", {"data": "[" * 100_000, "content_type": "application/json"}, 400, "body"),
    (
        "NaN",
        {"data": '{"model": "m", "framework": "pytorch", "timeout_s": NaN}', "content_type": JSON},
        422,
        "timeout_s",
    ),
    (
        "infinite measure",
        {
            "data": f'{{"model": "{MODEL}", "framework": "pytorch", "measure": {{"max_seconds": Infinity}}}}',
            "content_type": JSON,
        },
        422,
        "measure.max_seconds",
    ),
]


@pytest.mark.parametrize(("case", "request_args", "status", "field"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_submissions_are_4xx_problems_naming_the_field(
    http: FlaskClient,
    store: Store,
    redis_db: redis.Redis,
    case: str,
    request_args: dict[str, Any],
    status: int,
    field: str | None,
) -> None:
    response = http.post("/api/v1/evaluations", headers=AUTH, **request_args)
    assert_problem(response, status, field)
    assert store.count_evaluations() == 0 and redis_db.dbsize() == 0


def test_unknown_model_suggests_close_names_and_the_detail_names_batch_sizes(http: FlaskClient) -> None:
    unknown = submit(http, model="test_tiny_mpl").get_json()
    assert "did you mean test_tiny_mlp" in unknown["errors"]["model"][0]
    zero = submit(http, batch_sizes=[0, 2]).get_json()
    assert zero["detail"] == ZERO_BATCH


def test_routing_errors_are_problems(http: FlaskClient) -> None:
    assert_problem(http.get("/api/v1/nothing-here"), 404)
    not_allowed = assert_problem(http.put("/api/v1/evaluations", headers=AUTH), 405)
    assert not_allowed["status"] == 405


def test_writes_need_a_known_bearer_token(http: FlaskClient, store: Store) -> None:
    body = {"model": MODEL, "framework": "pytorch"}
    # When the token is missing, or not one of the configured ones
    missing = http.post("/api/v1/evaluations", json=body)
    wrong = http.post("/api/v1/evaluations", json=body, headers={"Authorization": "Bearer guess"})
    basic = http.post("/api/v1/evaluations", json=body, headers={"Authorization": "Basic dXNlcjpwYXNz"})
    # Then each is a 401 with a Bearer challenge, and nothing is stored
    for response in (missing, wrong, basic):
        assert_problem(response, 401)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert 'error="invalid_token"' in wrong.headers["WWW-Authenticate"]
    assert store.count_evaluations() == 0
    # And the second configured token works; reads need none
    second = {"Authorization": "Bearer second-token"}
    assert http.post("/api/v1/evaluations", json=body, headers=second).status_code == 202
    assert http.get("/api/v1/evaluations").status_code == 200


def test_with_no_tokens_configured_writes_are_disabled(settings: Settings) -> None:
    app = create_app(
        Settings(store_url=settings.store_url, broker_url=REDIS_URL, manifests=settings.manifests)
    )
    try:
        http = app.test_client()
        problem = assert_problem(http.post("/api/v1/evaluations", json={"model": MODEL}, headers=AUTH), 403)
        assert "writes are disabled: set MLSCOPE_API_TOKENS" in problem["detail"]
        assert_problem(http.post("/api/v1/evaluations/batch", json={}, headers=AUTH), 403)
        assert http.get("/api/v1/models").status_code == 200
    finally:
        _closing(app)


def test_reads_can_require_a_token_but_health_and_openapi_stay_open(settings: Settings) -> None:
    locked = Settings(
        store_url=settings.store_url,
        broker_url=REDIS_URL,
        api_tokens=(TOKEN,),
        api_reads="token",
        manifests=settings.manifests,
    )
    app = create_app(locked)
    try:
        http = app.test_client()
        for path in ("/api/v1/evaluations", "/api/v1/models", "/api/v1/compare", "/api/v1/metrics"):
            assert_problem(http.get(path), 401)
            assert http.get(path, headers=AUTH).status_code == 200
        for path in ("/api/v1/health", "/api/openapi.json", "/api/docs"):
            assert http.get(path).status_code == 200
    finally:
        _closing(app)


class _BrokenStore(SQLStore):
    """Fault injection: the real SQL store, except that its read of evaluations (which every listing
    goes through) fails the way a bug would."""

    def _query_evaluations(self, *_: Any, **__: Any) -> Any:
        raise RuntimeError("internal secret: connection string postgresql://admin:pw@db")


def test_an_unexpected_error_is_a_500_problem_without_details(settings: Settings) -> None:
    app = create_app(settings, store=_BrokenStore(settings.store_url))
    try:
        response = app.test_client().get("/api/v1/evaluations")
        problem = assert_problem(response, 500)
        assert problem["detail"].startswith("internal error")
        assert "secret" not in response.get_data(as_text=True)
    finally:
        _closing(app)


# ----- the Python client, against the app served over real HTTP -------------------------------------


def test_the_client_submits_and_waits_until_the_evaluation_ends(served: str, store: Store) -> None:
    client = Client(served, TOKEN)
    # Given a submitted evaluation
    accepted = client.submit({"model": MODEL, "framework": "pytorch", "batch_sizes": [1]})
    assert accepted["status"] == "queued" and accepted["queue"] == "pytorch@cpu"
    seen: list[str] = []

    def on_update(current: dict[str, dict[str, Any]]) -> None:
        seen.append(current[accepted["id"]]["status"])
        if len(seen) == 1:
            finish(store, accepted["id"])  # a worker would do this; here the test does

    # When the client waits for it
    [result] = client.wait([accepted["id"]], poll_s=0.01, on_update=on_update)
    # Then it saw it queued, then succeeded, and returns the result
    assert seen == ["queued", "succeeded"]
    assert result["status"] == "succeeded" and result["measurements"][0]["batch_size"] == 1
    assert client.evaluation(accepted["id"][:8])["id"] == accepted["id"]
    assert client.evaluations(model=MODEL)["total"] == 1
    table = client.compare(ids=[accepted["id"]])
    assert [row["evaluation_id"] for row in table["rows"]] == [accepted["id"]]
    assert client.compare_csv(ids=[accepted["id"]]).splitlines()[0] == ",".join(COMPARE_COLUMNS)
    assert client.health()["status"] == "ok"
    assert MODEL in {m["name"] for m in client.models()}


def test_the_client_raises_api_errors_naming_the_field(served: str) -> None:
    client = Client(served, TOKEN)
    with pytest.raises(ApiError) as invalid:
        client.submit({"model": MODEL, "framework": "pytorch", "batch_sizes": [0]})
    assert invalid.value.status == 422 and invalid.value.field == "batch_sizes.0"
    assert str(invalid.value) == f"POST /api/v1/evaluations: 422 {ZERO_BATCH}"
    assert invalid.value.errors == {"batch_sizes.0": ["must be between 1 and 65536"]}
    with pytest.raises(ApiError) as unknown:
        client.evaluation("ffff0000")
    assert unknown.value.status == 404 and "no evaluation with id 'ffff0000'" in str(unknown.value)
    with pytest.raises(ApiError) as anonymous:
        Client(served, "").submit({"model": MODEL, "framework": "pytorch"})
    assert anonymous.value.status == 401
    # And a wait that runs out names what is still pending
    queued = client.submit({"model": MODEL, "framework": "pytorch"})["id"]
    with pytest.raises(WaitTimeout) as late:
        client.wait([queued], poll_s=0.01, timeout_s=0)
    assert late.value.pending == [queued] and isinstance(late.value, TimeoutError)


# ----- a load split across agents (docs/farm.md, "Load from many hosts") ------------------------------


def test_a_split_load_is_one_group_and_a_part_pinned_to_each_chosen_agent(
    http: FlaskClient, store: Store, registry: AgentRegistry, redis_db: redis.Redis
) -> None:
    # Given three live agents of one capability, one of them busy
    for name in ("box-a", "box-b", "box-c"):
        registry.register(fake_agent(name, ["cpu.x86_64"], ["pytorch"]))
    registry.register(replace(fake_agent("box-a", ["cpu.x86_64"], ["pytorch"]), current_job="elsewhere"))
    before = registry.reference_time()
    # When the server scenario's schedule is split across two of them
    response = submit(http, scenarios=["server"], load={"qps": 40, "agents": 2}, target="cpu.x86_64")
    # Then the idle two get a part each, pinned to them, and the group waits for the merge
    assert response.status_code == 202, response.get_json()
    body = response.get_json()
    assert [part["agent"] for part in body["parts"]] == ["box-b", "box-c"]
    assert store.get_evaluation(body["id"])["status"] == "queued"
    ids = [part["id"] for part in body["parts"]]
    for index, part in enumerate(body["parts"]):
        [(_, message)] = queued_messages(redis_db, f"agent@{part['agent']}")
        shard = message.request.load["shard"]
        assert message.evaluation_id == part["id"] and message.request.target == f"agent:{part['agent']}"
        assert (shard["group"], shard["index"], shard["count"], shard["ids"]) == (body["id"], index, 2, ids)
        # one start for every part, on the registry's clock, the lead after the submission
        assert before + 9 < shard["start_at"] < registry.reference_time() + 10
        assert store.get_evaluation(part["id"])["request"]["load"]["shard"] == shard
    # Cancelling the group cancels its parts
    cancelled = http.delete(f"/api/v1/evaluations/{body['id']}", headers=AUTH).get_json()
    assert cancelled["cancelled"] is True
    assert [store.get_evaluation(id)["status"] for id in ids] == ["cancelled", "cancelled"]


def test_a_split_load_is_refused_in_one_line_when_the_agents_are_not_there(
    http: FlaskClient, store: Store, registry: AgentRegistry
) -> None:
    registry.register(fake_agent("box-a", ["cpu.x86_64"], ["pytorch"]))
    registry.register(fake_agent("box-b", ["cpu.x86_64"], ["pytorch"]))
    split = {"scenarios": ["server"], "load": {"qps": 40, "agents": 3}}
    # more agents than live ones match: the error lists those that do
    problem = assert_problem(submit(http, **split, target="cpu.x86_64"), 422, "load.agents")
    assert (
        "2 live agent(s) with pytorch match cpu.x86_64: box-a, box-b" in problem["errors"]["load.agents"][0]
    )
    # a target no live agent matches
    problem = assert_problem(submit(http, **split, target="gpu"), 422, "target")
    assert (
        "no live agent with pytorch matches gpu (live agents: box-a, box-b)" in problem["errors"]["target"][0]
    )
    # no target at all; a part's shard given by the client; a rate the scenario does not take
    assert_problem(submit(http, **split), 422, "target")
    shard = {"group": "g", "index": 0, "count": 2, "start_at": 0, "ids": ["a", "b"]}
    assert_problem(submit(http, scenarios=["server"], load={"qps": 4, "shard": shard}, target="cpu"), 422)
    assert_problem(submit(http, scenarios=["offline"], load={"agents": 2}, target="cpu"), 422)
    assert store.count_evaluations() == 0
