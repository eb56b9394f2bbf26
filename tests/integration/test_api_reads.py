"""The API's reads over many evaluations, through Flask's test client on SQLite and on the real
PostgreSQL: listing by cursor (`next_cursor`), the streamed export (JSON lines and CSV, read from the
store a page at a time), the streamed comparison CSV, a result's accuracy and parity sections, and
history series (also through the Python client, against the app served over real HTTP); and reads
that need a token (MLSCOPE_API_READS=token) against a real `mlscope api` process and the CLI. Given /
When / Then in each test's comments."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.serving import make_server

from mlscope.api.compare import rows_to_csv
from mlscope.api.export import EXPORT_COLUMNS
from mlscope.client import ApiError, Client
from mlscope.store import Store, open_store
from mlscope.store.paging import EXPORT_PAGE_SIZE
from tests.contract.builders import COLD_START, ERROR, T0, make_measurement, make_system
from tests.contract.test_store_sections import ACCURACY, DIFFERENT
from tests.integration.farm import free_port, wait_until

PROBLEM = "application/problem+json"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, mlscope_env: dict[str, str]) -> Iterator[Store]:
    """An empty store: the environment's SQLite file, or the session's PostgreSQL database."""
    if request.param == "sqlite":
        with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as opened:
            yield opened
        return
    from tests.contract.conftest import emptied_postgres

    with emptied_postgres(request.getfixturevalue("postgres_url")) as url, open_store(url) as opened:
        yield opened


def evaluate(
    store: Store,
    n: int,
    *,
    model: str = "resnet18",
    system: int = 1,
    status: str = "succeeded",
    measurements: list[dict[str, Any]] | None = None,
) -> str:
    """Evaluation number `n`, created n minutes after T0 and taken to `status`."""
    id = store.create_evaluation(
        model={"name": model, "version": "1.0", "manifest_sha256": None},
        manifest={"name": model},
        framework={"name": "pytorch", "version": None},
        runner="inline",
        device="cpu",
        request={"n": n},
        created_at=T0 + timedelta(minutes=n),
    )
    if status == "succeeded":
        store.finish_evaluation(
            id,
            system=make_system(system),
            framework={"name": "pytorch", "version": "2.3.0"},
            cold_start=COLD_START,
            measurements=measurements
            if measurements is not None
            else [make_measurement("single_stream", 1, mean=1.0 + n % 7), make_measurement("offline", 8)],
        )
    elif status == "failed":
        store.fail_evaluation(id, error=ERROR)
    return id


@pytest.fixture
def farm(store: Store) -> list[str]:
    """300 evaluations of two models: most succeeded, every tenth failed, every 25th still queued; ids
    newest first (the listing's order)."""
    ids = []
    for n in range(300):
        status = "queued" if n % 25 == 0 else "failed" if n % 10 == 0 else "succeeded"
        ids.append(evaluate(store, n, model="bert" if n % 3 == 0 else "resnet18", status=status))
    return ids[::-1]


def assert_problem(response: Any, status: int, field: str) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == PROBLEM
    problem: dict[str, Any] = response.get_json(force=True)
    assert field in problem.get("errors", {}), problem
    return problem


# ----- listing by cursor -----------------------------------------------------------------------------


def test_pages_by_cursor_cover_the_listing_and_the_last_has_no_cursor(
    http: FlaskClient, store: Store, farm: list[str]
) -> None:
    # Given 300 evaluations, When they are listed 64 at a time following next_cursor
    seen: list[str] = []
    cursor: str | None = None
    pages = []
    while True:
        query: dict[str, Any] = {"limit": 64, **({"cursor": cursor} if cursor else {})}
        page = http.get("/api/v1/evaluations", query_string=query).get_json()
        pages.append(page)
        seen += [e["id"] for e in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    # Then every evaluation comes once, newest first, and each page still says what it said before
    assert seen == farm
    assert [len(p["items"]) for p in pages] == [64, 64, 64, 64, 44]
    assert {(p["total"], p["limit"], p["offset"]) for p in pages} == {(300, 64, 0)}
    # And filters hold on every page; offset paging answers a cursor too
    resnets = http.get("/api/v1/evaluations?model=resnet18&status=succeeded&limit=1000").get_json()
    assert resnets["next_cursor"] is None and resnets["total"] == len(resnets["items"])
    first = http.get("/api/v1/evaluations?limit=10&offset=290").get_json()
    assert first["next_cursor"] is None and [e["id"] for e in first["items"]] == farm[290:]
    assert http.get("/api/v1/evaluations?limit=10&offset=280").get_json()["next_cursor"] is not None


@pytest.mark.parametrize("cursor", ["", "garbage!", "eyJ0Ijog"])
def test_a_bad_cursor_is_a_422_naming_it(http: FlaskClient, store: Store, cursor: str) -> None:
    evaluate(store, 0)
    assert_problem(http.get("/api/v1/evaluations", query_string={"cursor": cursor}), 422, "cursor")


# ----- the export ------------------------------------------------------------------------------------


def test_the_jsonl_export_streams_every_evaluation_page_by_page(
    app: Flask, store: Store, farm: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 300 evaluations, and the store's reads counted
    reads: list[int] = []
    query_evaluations = store._query_evaluations

    def counted(where: Any, *, limit: int, offset: int) -> Any:
        reads.append(limit)
        return query_evaluations(where, limit=limit, offset=offset)

    monkeypatch.setattr(store, "_query_evaluations", counted)

    # When they are exported as JSON lines, unbuffered
    response = app.test_client().get("/api/v1/evaluations/export", buffered=False)
    assert response.status_code == 200 and response.is_streamed
    assert response.mimetype == "application/x-ndjson"
    assert response.headers["Content-Disposition"] == 'attachment; filename="evaluations.jsonl"'
    chunks = iter(response.response)
    first = next(chunks)

    # Then the first lines are sent after one page is read, and the store is read a page at a time
    assert reads == [EXPORT_PAGE_SIZE]
    body = first + b"".join(chunks)
    response.close()
    assert reads == [EXPORT_PAGE_SIZE] * 2
    # And every line is one evaluation exactly as the API serves it alone, newest first
    lines = [json.loads(line) for line in body.decode().splitlines()]
    assert [e["id"] for e in lines] == farm
    assert lines[0] == store.get_evaluation(farm[0]) and lines[-1] == store.get_evaluation(farm[-1])


def test_the_export_takes_the_listing_filters(http: FlaskClient, store: Store, farm: list[str]) -> None:
    def exported(**query: Any) -> list[str]:
        response = http.get("/api/v1/evaluations/export", query_string=query)
        assert response.status_code == 200
        return [json.loads(line)["id"] for line in response.get_data(as_text=True).splitlines()]

    listed = [e["id"] for e in store.list_evaluations(model="bert", status="failed", limit=1000)]
    assert exported(model="bert", status="failed") == listed and listed
    window = {
        "since": (T0 + timedelta(minutes=100)).isoformat(),
        "until": (T0 + timedelta(minutes=150)).isoformat(),
    }
    assert exported(**window) == farm[150:200]
    assert exported(model="vgg16") == []
    assert_problem(http.get("/api/v1/evaluations/export?status=done"), 422, "status")
    assert_problem(http.get("/api/v1/evaluations/export?since=2024-05-01T12:00:00"), 422, "since")
    assert_problem(http.get("/api/v1/evaluations/export?format=xml"), 422, "format")


def test_the_csv_export_has_a_line_per_measurement(http: FlaskClient, store: Store) -> None:
    # Given a succeeded evaluation with two measurements, a failed one and a queued one
    succeeded = evaluate(store, 8)
    failed = evaluate(store, 1, status="failed")
    queued = evaluate(store, 0, status="queued")

    # When exported as CSV
    response = http.get("/api/v1/evaluations/export?format=csv")
    assert response.status_code == 200 and response.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))

    # Then the header is the export's columns, and each measurement is a line (an evaluation without one,
    # a line of its own), newest first
    assert response.get_data(as_text=True).splitlines()[0] == ",".join(EXPORT_COLUMNS)
    assert [(r["evaluation_id"], r["scenario"], r["batch_size"]) for r in rows] == [
        (succeeded, "offline", "8"),
        (succeeded, "single_stream", "1"),
        (failed, "", ""),
        (queued, "", ""),
    ]
    single = rows[1]
    assert (single["status"], single["model"], single["framework_version"], single["system_id"]) == (
        "succeeded",
        "resnet18",
        "2.3.0",
        "sys-1",
    )
    assert (single["median_ms"], single["ci_low_ms"], single["count"], single["valid"]) == (
        "2.0",
        "1.9",
        "5",
        "false",
    )
    assert single["reasons"] == "too few samples" and single["hostname"] == "host-1"
    assert (rows[2]["error_type"], rows[2]["error_message"]) == (ERROR["type"], ERROR["message"])


def test_the_comparison_csv_is_streamed(http: FlaskClient, store: Store, farm: list[str]) -> None:
    response = http.get("/api/v1/compare?format=csv", buffered=False)
    assert response.status_code == 200 and response.is_streamed
    assert response.get_data(as_text=True) == rows_to_csv(store.compare())
    assert len(response.get_data(as_text=True).splitlines()) == 1 + len(store.compare()) == 5


# ----- history ---------------------------------------------------------------------------------------


def test_history_answers_the_points_oldest_first(http: FlaskClient, store: Store) -> None:
    # Given five runs of one model on two systems, and one of another model
    ids = [evaluate(store, n, system=1 + n % 2) for n in range(5)]
    evaluate(store, 9, model="bert")

    # When its history is read
    answer = http.get("/api/v1/history?model=resnet18&framework=pytorch").get_json()

    # Then the points are the store's, oldest first, under the series they belong to; no change
    # points are looked for across two systems' series
    assert {k: v for k, v in answer.items() if k not in ("points", "detection")} == {
        "model": "resnet18",
        "framework": "pytorch",
        "manifest_sha256": None,
        "framework_version": None,
        "system_id": None,
        "machine_id": None,
        "stack_id": None,
        "device": None,
        "scenario": "single_stream",
        "batch_size": 1,
        "change_points": None,
    }
    assert "2 series" in answer["detection"]["note"]
    assert answer["points"] == store.history(model="resnet18", framework="pytorch")
    assert [p["evaluation_id"] for p in answer["points"]] == ids
    narrowed = http.get(
        "/api/v1/history",
        query_string={
            "model": "resnet18",
            "framework": "pytorch",
            "system_id": "sys-2",
            "scenario": "offline",
            "batch_size": 8,
            "since": (T0 + timedelta(minutes=2)).isoformat(),
            "limit": 1,
        },
    ).get_json()
    assert [p["evaluation_id"] for p in narrowed["points"]] == [ids[3]]
    assert narrowed["points"][0]["median_ms"] == 2.0


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("framework=pytorch", "model"),
        ("model=resnet18", "framework"),
        ("model=resnet18&framework=pytorch&batch_size=0", "batch_size"),
        ("model=resnet18&framework=pytorch&batch_size=eight", "batch_size"),
        ("model=resnet18&framework=pytorch&limit=10001", "limit"),
        ("model=resnet18&framework=pytorch&since=2024-05-01T12:00:00", "since"),
        ("model=&framework=pytorch", "model"),
    ],
)
def test_bad_history_queries_are_422s_naming_the_field(http: FlaskClient, query: str, field: str) -> None:
    assert_problem(http.get(f"/api/v1/history?{query}"), 422, field)


def test_the_client_reads_history(app: Flask, store: Store) -> None:
    # Given runs, and the app served over real HTTP
    ids = [evaluate(store, n) for n in range(3)]
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = Client(f"http://127.0.0.1:{server.server_port}", "")
        # When the client reads the history, Then it has the points; a bad argument raises naming it
        series = client.history(model="resnet18", framework="pytorch", since=T0, limit=2)
        assert [p["evaluation_id"] for p in series["points"]] == ids[1:]
        with pytest.raises(ApiError) as bad:
            client.history(model="resnet18", framework="pytorch", batch_size=0)
        assert bad.value.status == 422 and bad.value.field == "batch_size"
        page = client.evaluations(limit=2)
        assert (
            page["next_cursor"]
            and client.evaluations(limit=2, cursor=page["next_cursor"])["next_cursor"] is None
        )
    finally:
        server.shutdown()
        thread.join()


# ----- result sections -------------------------------------------------------------------------------


def test_a_result_with_accuracy_and_parity_reads_back_through_the_api(
    http: FlaskClient, store: Store
) -> None:
    # Given a result with both sections, written as the runtime's finish writes them, and one without
    id = evaluate(store, 1, status="queued")
    valid = [make_measurement("offline", 8)]
    valid[0]["validity"] = {"valid": True, "reasons": []}
    store.finish_evaluation(
        id,
        system=make_system(1),
        framework={"name": "pytorch", "version": "2.3.0"},
        cold_start=COLD_START,
        measurements=valid,
        accuracy=ACCURACY,
        parity=DIFFERENT,
    )
    plain = evaluate(store, 2)

    # When each is read, alone and in a listing
    one = http.get(f"/api/v1/evaluations/{id[:8]}").get_json()
    other = http.get(f"/api/v1/evaluations/{plain}").get_json()
    listed = {e["id"]: e for e in http.get("/api/v1/evaluations").get_json()["items"]}

    # Then the sections come as stored (extra keys too); the other has no such keys at all
    assert one["accuracy"] == ACCURACY and one["parity"] == DIFFERENT
    assert "accuracy" not in other and "parity" not in other
    assert listed[id]["accuracy"] == ACCURACY and "parity" not in listed[plain]
    # ... the export carries them line by line
    lines = [
        json.loads(line)
        for line in http.get("/api/v1/evaluations/export").get_data(as_text=True).splitlines()
    ]
    assert {e["id"]: e.get("parity") for e in lines} == {id: DIFFERENT, plain: None}
    exported = csv.DictReader(
        io.StringIO(http.get("/api/v1/evaluations/export?format=csv").get_data(as_text=True))
    )
    assert {(r["evaluation_id"], r["top1"], r["top5"], r["parity"]) for r in exported} == {
        (id, "0.975", "0.997", "different"),
        (plain, "", "", ""),
    }
    # ... the comparison shows the different parity as an invalid row, in JSON and CSV
    compared = http.get(f"/api/v1/compare?ids={id}").get_json()
    assert {"top1", "top5", "parity", "parity_against"} <= set(compared["columns"])
    [row] = compared["rows"]
    assert (row["valid"], row["reasons"], row["top1"], row["parity"]) == (
        False,
        ["parity different from pytorch"],
        0.975,
        "different",
    )
    [header, line] = list(
        csv.reader(io.StringIO(http.get(f"/api/v1/compare?ids={id}&format=csv").get_data(as_text=True)))
    )
    assert dict(zip(header, line, strict=True))["reasons"] == "parity different from pytorch"
    # ... and the OpenAPI document spells out both sections
    document = http.get("/api/openapi.json").get_json()
    properties = document["components"]["schemas"]["Evaluation"]["properties"]
    assert properties["accuracy"]["properties"]["top1"]["maximum"] == 1
    assert properties["parity"]["properties"]["verdict"]["enum"] == ["same", "different", "unavailable"]


# ----- reads that need a token, end to end -----------------------------------------------------------


@pytest.mark.redis  # the served api's broker and agent registry
def test_a_served_api_whose_reads_need_a_token_refuses_anonymous_reads_and_serves_the_cli(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given `mlscope api` serving over HTTP with MLSCOPE_API_READS=token in its environment
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    redis_url = "redis://127.0.0.1:6379/13"
    env = {
        **mlscope_env,
        "MLSCOPE_API_TOKENS": "reader-token",
        "MLSCOPE_API_READS": "token",
        "MLSCOPE_API_URL": url,
        "MLSCOPE_BROKER_URL": redis_url,
        "MLSCOPE_REGISTRY_URL": redis_url,
    }
    env.pop("MLSCOPE_API_TOKEN", None)
    with open(tmp_path / "api.log", "wb") as log:
        api = subprocess.Popen(
            [sys.executable, "-m", "mlscope", "api", "--port", str(port)], env=env, stdout=log, stderr=log
        )
    try:
        wait_until(lambda: _status(f"{url}/api/v1/health") == 200, 60, "the api to answer")

        # When data and pages are read without a token, with a wrong one, and with the right one
        anonymous = {path: _status(f"{url}{path}") for path in ("/api/v1/evaluations", "/api/v1/models", "/")}
        wrong = _status(f"{url}/api/v1/evaluations", token="not-it")
        right = Client(url, "reader-token").evaluations()

        # Then only the right token reads; the health check and the OpenAPI document stay open
        assert anonymous == {"/api/v1/evaluations": 401, "/api/v1/models": 401, "/": 401}
        assert wrong in (401, 403)
        assert right["total"] == 0
        assert _status(f"{url}/api/openapi.json") == 200

        # And the CLI reads with the token it is given, and without one says what is missing
        cli = {**env, "MLSCOPE_API_TOKENS": ""}
        reads = subprocess.run(
            [sys.executable, "-m", "mlscope", "agents"],
            env={**cli, "MLSCOPE_API_TOKEN": "reader-token"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        refused = subprocess.run(
            [sys.executable, "-m", "mlscope", "agents"], env=cli, capture_output=True, text=True, timeout=120
        )
        assert reads.returncode == 0, reads.stderr
        assert refused.returncode != 0 and "reads need a token" in refused.stderr
    finally:
        api.terminate()
        api.wait(timeout=30)


def _status(url: str, token: str | None = None) -> int:
    """The HTTP status of a GET (0 when nothing answers)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0
