"""The API while its store is down: a PostgreSQL server of the test's own (tests/fixtures/
private_postgres.py) taken away as a crash takes it (every connection cut, new ones refused) and
brought back. Every route that reads or writes the store answers 503 with `Retry-After`, the JSON API
as a problem document and the dashboard as a page, never a 500 and never a hang; /health names the
store as the part that is down; once the server is back every route answers again and nothing
written before the outage is lost. With Redis down, the routes that need it answer 503 with
`Retry-After` too.

The app is driven through Flask's test client; Redis (broker and agent registry) is database
OUTAGE_REDIS_DB, emptied before and after.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from mlscope.api import create_app
from mlscope.contract.errors import UserError
from mlscope.contract.settings import Settings, load_settings
from mlscope.store import Store, open_store
from tests.contract.builders import finish, make_measurement, run_to
from tests.fixtures.private_postgres import PrivatePostgres
from tests.fixtures.services import emptied_redis

pytestmark = pytest.mark.postgres

OUTAGE_REDIS_DB = 15
REDIS_URL = f"redis://127.0.0.1:6379/{OUTAGE_REDIS_DB}"
TOKEN = "outage-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MODEL = "test_tiny_mlp"

# The routes that read the store, with {id} and {other} evaluations stored before the outage.
JSON_READS = (
    "/api/v1/evaluations",
    "/api/v1/evaluations?status=succeeded&limit=5",
    "/api/v1/evaluations/{id}",
    "/api/v1/evaluations/{id}/trace",
    "/api/v1/evaluations/{id}/layers",
    "/api/v1/evaluations/export",
    "/api/v1/compare?model=resnet18",
    "/api/v1/compare/diff?a={id}&b={other}",
    "/api/v1/history?model=resnet18&framework=pytorch",
    "/api/v1/history/series",
    "/api/v1/history/regressions?since=2020-01-01T00:00:00Z",
)
PAGES = (
    "/",
    "/evaluations",
    "/evaluations/{id}",
    "/evaluations/{id}/trace-view",
    "/compare",
    "/diff?a={id}&b={other}",
)


@pytest.fixture
def redis_db() -> Iterator[redis.Redis]:
    yield from emptied_redis(REDIS_URL)


@pytest.fixture
def store_url(private_postgres: PrivatePostgres) -> str:
    return private_postgres.create_database("mlscope_outage")


@pytest.fixture
def settings(
    mlscope_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_db: redis.Redis, store_url: str
) -> Settings:
    monkeypatch.setenv("MLSCOPE_STORE_URL", store_url)
    monkeypatch.setenv("MLSCOPE_BROKER_URL", REDIS_URL)
    monkeypatch.setenv("MLSCOPE_REGISTRY_URL", REDIS_URL)
    monkeypatch.setenv("MLSCOPE_API_TOKENS", TOKEN)
    return load_settings()


@pytest.fixture
def app(settings: Settings) -> Iterator[Flask]:
    made = create_app(settings)
    yield made
    context = made.extensions["mlscope"]
    context.store.close()
    context.agents.close()


@pytest.fixture
def stored(store_url: str) -> Iterator[tuple[str, str]]:
    """Two evaluations that succeeded before the outage, with their measurements."""
    store: Store = open_store(store_url)
    try:
        ids = []
        for mean in (2.0, 2.2):
            # Valid points with enough samples for the diff to compare
            measurement = make_measurement(mean=mean)
            measurement["validity"] = {"valid": True, "reasons": []}
            measurement["latencies_ns"] = [int(mean * 1e6) + (i * 7919) % 100_003 for i in range(500)]
            measurement["latency_ms"]["count"] = 500
            evaluation_id = run_to(store, "running")
            finish(store, evaluation_id, measurements=[measurement])
            ids.append(evaluation_id)
        yield ids[0], ids[1]
    finally:
        store.close()


def _paths(templates: tuple[str, ...], stored: tuple[str, str]) -> list[str]:
    return [template.replace("{id}", stored[0]).replace("{other}", stored[1]) for template in templates]


def _submit(http: FlaskClient) -> Any:
    return http.post(
        "/api/v1/evaluations",
        json={"model": MODEL, "framework": "onnxruntime", "batch_sizes": [1]},
        headers=AUTH,
    )


def test_every_store_route_answers_503_with_retry_after_while_the_store_is_down(
    app: Flask,
    private_postgres: PrivatePostgres,
    stored: tuple[str, str],
) -> None:
    http = app.test_client()
    # Given an API that has served every route once (its pool holds connections to the server)
    before = {path: http.get(path) for path in _paths(JSON_READS + PAGES, stored)}
    assert {path: r.status_code for path, r in before.items() if r.status_code != 200} == {}
    documents = {path: r.get_json() for path, r in before.items() if r.is_json}

    # When the PostgreSQL server goes away
    private_postgres.stop()

    # Then every JSON route answers 503, a problem document naming the store, with Retry-After
    for path in _paths(JSON_READS, stored):
        response = http.get(path)
        assert response.status_code == 503, (path, response.get_data(as_text=True))
        assert response.mimetype == "application/problem+json", path
        assert int(response.headers["Retry-After"]) > 0, path
        assert "store" in response.get_json()["detail"], path
    # ... and so do writes: a submission, and a cancellation
    submitted = _submit(http)
    assert submitted.status_code == 503 and "Retry-After" in submitted.headers
    cancelled = http.delete(f"/api/v1/evaluations/{stored[0]}", headers=AUTH)
    assert cancelled.status_code == 503 and "Retry-After" in cancelled.headers
    # ... and every dashboard page is a 503 page
    for path in _paths(PAGES, stored):
        response = http.get(path)
        assert response.status_code == 503, (path, response.get_data(as_text=True)[:300])
        assert response.mimetype == "text/html" and "Retry-After" in response.headers, path
    # ... and /health says the store, and only the store, is down
    health = http.get("/api/v1/health")
    assert health.status_code == 503 and "Retry-After" in health.headers
    document = health.get_json()
    assert document["status"] == "degraded" and document["down"] == ["store"]
    assert (
        document["parts"]["store"]["ok"] is False
        and "StoreUnavailable" in document["parts"]["store"]["error"]
    )
    assert document["parts"]["broker"]["ok"] and document["parts"]["registry"]["ok"]
    assert document["store"] == document["parts"]["store"]
    # ... while routes that need no store still answer
    assert http.get("/api/v1/models").status_code == 200
    assert http.get("/api/v1/metrics").status_code == 200

    # When the server is back
    private_postgres.start()

    # Then every route answers as before: nothing written before the outage was lost
    for path in before:
        again = http.get(path)
        assert again.status_code == 200, (path, again.get_data(as_text=True)[:300])
        if path in documents:
            assert again.get_json() == documents[path], path
    health = http.get("/api/v1/health")
    assert health.status_code == 200 and health.get_json()["down"] == []
    assert _submit(http).status_code == 202


def test_no_route_answers_500_while_the_store_is_down(
    app: Flask,
    private_postgres: PrivatePostgres,
    stored: tuple[str, str],
) -> None:
    # Given every GET route the app has, its path parameters filled with a stored evaluation's id
    http = app.test_client()
    paths = sorted(
        {
            rule.rule.replace("<string:evaluation_id>", stored[0])
            for rule in app.url_map.iter_rules()
            if "GET" in (rule.methods or set()) and rule.arguments <= {"evaluation_id"}
        }
    )
    assert len(paths) > 15
    # When the store is down
    private_postgres.stop()
    # Then none answers 500: a route that needs the store answers 503 with Retry-After
    answers = {path: http.get(path) for path in paths}
    assert {
        path: r.status_code for path, r in answers.items() if r.status_code >= 500 and r.status_code != 503
    } == {}
    assert [
        path for path, r in answers.items() if r.status_code == 503 and "Retry-After" not in r.headers
    ] == []


def test_a_server_that_never_answers_costs_a_caller_seconds_not_forever() -> None:
    # Given a "server" that takes connections and never says a word (a host that hangs; libpq would
    # wait for it forever)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        port = silent.getsockname()[1]
        # When a store is opened on it
        with pytest.raises(UserError) as failure:
            open_store(f"postgresql://postgres@127.0.0.1:{port}/nothing")
    # Then the attempt ends (CONNECT_TIMEOUT_S) with an error naming the store and the timeout
    assert failure.value.field == "store_url"
    assert f"127.0.0.1:{port}/nothing" in failure.value.message and "timeout" in failure.value.message


def test_with_redis_down_its_routes_answer_503_with_retry_after(
    settings: Settings, stored: tuple[str, str]
) -> None:
    # Given an API whose broker and agent registry listen nowhere
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down_url = f"redis://127.0.0.1:{port}/0"
    down = Settings(
        store_url=settings.store_url,
        broker_url=down_url,
        registry_url=down_url,
        manifests=settings.manifests,
        api_tokens=settings.api_tokens,
    )
    app = create_app(down)
    try:
        http = app.test_client()
        # When routes that need Redis are asked
        answers = {
            "agents": http.get("/api/v1/agents"),
            "queues": http.get("/api/v1/queues"),
            "submit": _submit(http),
            "health": http.get("/api/v1/health"),
        }
        # Then each answers 503 with Retry-After, and /health names the broker and the registry
        assert {name: r.status_code for name, r in answers.items()} == dict.fromkeys(answers, 503)
        assert all(int(r.headers["Retry-After"]) > 0 for r in answers.values())
        assert sorted(answers["health"].get_json()["down"]) == ["broker", "registry"]
        # ... while the store's reads still answer
        assert http.get(f"/api/v1/evaluations/{stored[0]}").status_code == 200
    finally:
        app.extensions["mlscope"].store.close()
        app.extensions["mlscope"].agents.close()
