"""An evaluation's trace through the doors users take: the HTTP endpoints /trace and /layers (Flask's
test client, and the Python client against the app served in a thread) and `mlscope trace` (driven
in-process), all reading a real SQLite store file holding a traced evaluation and an untraced one.

The app is built with the test's store; its broker and agent registry are never called by these
endpoints, so no Redis is needed. Given / When / Then in each test's comments.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from mlscope.analysis.traces import BETWEEN_LAYERS, layer_breakdown
from mlscope.api import create_app
from mlscope.cli import main
from mlscope.client import ApiError, Client
from mlscope.contract.settings import load_settings
from mlscope.store import Store, open_store
from tests.contract.builders import finish
from tests.unit.test_trace_analysis import TRACE_ID, assert_well_nested, build_trace

PROBLEM = "application/problem+json"


def create_traced(store: Store, *, trace_level: str, trace_id: str | None) -> str:
    return store.create_evaluation(
        model={"name": "resnet18", "version": "1.0", "manifest_sha256": "a" * 64},
        manifest={"name": "resnet18", "framework": {"name": "pytorch", "version": "*"}},
        framework={"name": "pytorch", "version": None},
        runner="process",
        device="cpu",
        request={"model": "resnet18", "framework": "pytorch", "batch_sizes": [1, 8]},
        trace_level=trace_level,
        trace_id=trace_id,
    )


@pytest.fixture
def store(mlscope_env: dict[str, str]) -> Iterator[Store]:
    opened = open_store(os.environ["MLSCOPE_STORE_URL"])
    yield opened
    opened.close()


@pytest.fixture
def spans() -> list[dict[str, Any]]:
    return build_trace()


@pytest.fixture
def traced(store: Store, spans: list[dict[str, Any]]) -> str:
    """A succeeded evaluation traced at FULL, its spans saved."""
    evaluation_id = create_traced(store, trace_level="FULL", trace_id=TRACE_ID)
    store.start_evaluation(evaluation_id)
    finish(store, evaluation_id)
    assert store.save_spans(evaluation_id, spans) == len(spans)
    return evaluation_id


@pytest.fixture
def untraced(store: Store) -> str:
    """A succeeded evaluation run without tracing: no spans at all."""
    evaluation_id = create_traced(store, trace_level="NO_TRACE", trace_id=None)
    store.start_evaluation(evaluation_id)
    finish(store, evaluation_id)
    return evaluation_id


@pytest.fixture
def app(store: Store) -> Flask:
    return create_app(load_settings(), store=store)


@pytest.fixture
def http(app: Flask) -> FlaskClient:
    return app.test_client()


# ----- GET /api/v1/evaluations/{id}/trace -----------------------------------------------------------


def test_the_trace_pages_through_the_spans_ordered_by_start(
    http: FlaskClient, traced: str, spans: list[dict[str, Any]]
) -> None:
    # When the trace is read by an id prefix in two pages
    first = http.get(f"/api/v1/evaluations/{traced[:8]}/trace?limit=10")
    second = http.get(f"/api/v1/evaluations/{traced[:8]}/trace?limit=1000&offset=10")

    # Then the pages hold every span once, in start order, with the evaluation's trace facts
    assert first.status_code == 200 and second.status_code == 200
    body = first.get_json()
    assert (body["evaluation_id"], body["trace_id"], body["trace_level"]) == (traced, TRACE_ID, "FULL")
    assert (body["count"], body["total"], body["limit"], body["offset"]) == (10, len(spans), 10, 0)
    got = body["spans"] + second.get_json()["spans"]
    assert sorted(s["span_id"] for s in got) == sorted(s["span_id"] for s in spans)
    assert [s["start_ns"] for s in got] == sorted(s["start_ns"] for s in spans)


def test_the_trace_narrows_to_one_level(http: FlaskClient, traced: str, spans: list[dict[str, Any]]) -> None:
    body = http.get(f"/api/v1/evaluations/{traced}/trace?level=HARDWARE").get_json()
    assert body["level"] == "HARDWARE"
    assert {s["name"] for s in body["spans"]} == {"cpu", "gpu:0"}
    assert body["count"] == sum(1 for s in spans if s["level"] == "HARDWARE")


def test_the_chrome_format_is_the_whole_trace_as_an_attachment(
    http: FlaskClient, traced: str, spans: list[dict[str, Any]]
) -> None:
    # When the Chrome format is asked for
    response = http.get(f"/api/v1/evaluations/{traced}/trace?format=chrome")

    # Then it is a JSON file named after the evaluation, with every non-hardware span as an event
    assert response.status_code == 200 and response.mimetype == "application/json"
    assert response.headers["Content-Disposition"] == f'attachment; filename="{traced}.trace.json"'
    document = json.loads(response.data)
    events = [e for e in document["traceEvents"] if e["ph"] == "X"]
    assert len(events) == sum(1 for s in spans if s["level"] != "HARDWARE")
    assert any(e["ph"] == "C" for e in document["traceEvents"])
    assert document["otherData"]["evaluation_id"] == traced
    assert document["otherData"]["trace_id"] == TRACE_ID
    assert_well_nested(events)


def test_an_untraced_evaluation_answers_an_empty_trace(http: FlaskClient, untraced: str) -> None:
    body = http.get(f"/api/v1/evaluations/{untraced}/trace").get_json()
    assert (body["spans"], body["count"], body["total"], body["trace_level"]) == ([], 0, 0, "NO_TRACE")
    document = http.get(f"/api/v1/evaluations/{untraced}/trace?format=chrome").get_json()
    assert document["traceEvents"] == [] and document["displayTimeUnit"] == "ms"
    layers = http.get(f"/api/v1/evaluations/{untraced}/layers").get_json()
    assert (layers["rows"], layers["hotspots"], layers["kernels"]) == ([], [], [])
    assert layers["trace_level"] == "NO_TRACE"


# ----- GET /api/v1/evaluations/{id}/layers ----------------------------------------------------------


def test_the_layers_answer_the_breakdown_hotspots_and_kernels(
    http: FlaskClient, traced: str, spans: list[dict[str, Any]]
) -> None:
    # When the layers are read grouped by layer path, top 3
    response = http.get(f"/api/v1/evaluations/{traced}/layers?group_by=layer&top=3")

    # Then the rows are the FRAMEWORK pass's breakdown of the stored spans, shares summing to 1
    assert response.status_code == 200
    body = response.get_json()
    assert (body["evaluation_id"], body["group_by"], body["top"]) == (traced, "layer", 3)
    assert body["rows"] == layer_breakdown(spans, group_by="layer")
    for batch_size in (1, 8):
        shares = [row["share"] for row in body["rows"] if row["batch_size"] == batch_size]
        assert sum(shares) == pytest.approx(1.0)
    assert BETWEEN_LAYERS in {row["key"] for row in body["rows"]}
    # And the hotspots are the LIBRARY pass's top 3; kernels come by kernel and by layer
    assert body["hotspot_level"] == "LIBRARY" and len(body["hotspots"]) == 3
    assert body["hotspots"][0]["key"] == "aten::conv2d"
    assert {row["by"] for row in body["kernels"]} == {"kernel", "layer"}


def test_hotspots_of_the_framework_pass_can_be_asked_for(http: FlaskClient, traced: str) -> None:
    body = http.get(f"/api/v1/evaluations/{traced}/layers?level=FRAMEWORK&top=1").get_json()
    assert body["hotspot_level"] == "FRAMEWORK"
    assert [(row["batch_size"], row["key"]) for row in body["hotspots"]] == [(1, "conv1"), (8, "conv1")]


# ----- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("resource", ["trace", "layers"])
def test_an_unknown_evaluation_is_a_404_problem(http: FlaskClient, traced: str, resource: str) -> None:
    response = http.get(f"/api/v1/evaluations/{'f' * 32}/{resource}")
    assert response.status_code == 404 and response.mimetype == PROBLEM
    assert "no evaluation with id" in response.get_json()["detail"]


@pytest.mark.parametrize(
    ("url", "field", "allowed"),
    [
        ("trace?format=xml", "format", "json, chrome"),
        ("trace?level=NO_TRACE", "level", "APPLICATION, MODEL"),
        ("trace?limit=0", "limit", "between 1 and 5000"),
        ("trace?offset=9223372036854775808", "offset", "between 0 and"),
        ("layers?group_by=module", "group_by", "layer_type, name, layer"),
        ("layers?level=HARDWARE", "level", "LIBRARY, FRAMEWORK"),
        ("layers?top=0", "top", "between 1 and 1000"),
    ],
)
def test_an_invalid_argument_is_a_422_naming_the_field_and_what_is_allowed(
    http: FlaskClient, traced: str, url: str, field: str, allowed: str
) -> None:
    response = http.get(f"/api/v1/evaluations/{traced}/{url}")
    assert response.status_code == 422 and response.mimetype == PROBLEM
    errors = response.get_json()["errors"]
    assert list(errors) == [field] and allowed in errors[field][0]


def test_the_openapi_document_lists_both_resources(http: FlaskClient) -> None:
    paths = http.get("/api/openapi.json").get_json()["paths"]
    trace = paths["/api/v1/evaluations/{evaluation_id}/trace"]["get"]
    assert {p["name"] for p in trace["parameters"]} >= {"format", "level", "limit", "offset"}
    assert "/api/v1/evaluations/{evaluation_id}/layers" in paths


# ----- the Python client -----------------------------------------------------------------------------


def test_the_client_reads_the_trace_and_the_layers(
    served: str, traced: str, spans: list[dict[str, Any]]
) -> None:
    with Client(served, "unused-token") as client:
        page = client.trace(traced[:8], level="FRAMEWORK", limit=5, offset=1)
        assert (page["count"], page["offset"]) == (5, 1)
        assert {s["level"] for s in page["spans"]} == {"FRAMEWORK"}
        chrome = client.trace(traced, format="chrome")
        assert chrome["otherData"]["span_count"] == len(spans)
        layers = client.layers(traced, group_by="name", top=2)
        assert layers["group_by"] == "name" and len(layers["hotspots"]) == 2
        with pytest.raises(ApiError) as raised:
            client.layers(traced, group_by="module")
        assert raised.value.status == 422 and raised.value.field == "group_by"
        with pytest.raises(ApiError) as missing:
            client.trace("f" * 32)
        assert missing.value.status == 404


# ----- mlscope trace ----------------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`mlscope *args` in this process: (exit code, stdout, stderr)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as ended:
        code = int(ended.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_summary_counts_spans_per_level_and_shows_the_timeline(
    capsys: pytest.CaptureFixture[str], traced: str
) -> None:
    code, out, _ = run_cli(capsys, "trace", traced[:8])
    assert code == 0
    for text in ("APPLICATION", "LIBRARY", "HARDWARE", "queue_wait", "mlscope.evaluate", "predictor"):
        assert text in out


def test_json_prints_every_span(
    capsys: pytest.CaptureFixture[str], traced: str, spans: list[dict[str, Any]]
) -> None:
    code, out, _ = run_cli(capsys, "trace", traced, "--format", "json")
    assert code == 0
    document = json.loads(out)
    assert document["count"] == len(spans) and document["trace_id"] == TRACE_ID


def test_chrome_writes_a_trace_file_named_after_the_evaluation(
    capsys: pytest.CaptureFixture[str], traced: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # When the Chrome format is asked for without a file name, then with one
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "trace", traced[:8], "--format", "chrome")
    named = tmp_path / "named.json"
    code_named, _, _ = run_cli(capsys, "trace", traced, "--format", "chrome", "-o", str(named))

    # Then both files hold the same trace, the first one named <id>.trace.json
    assert code == 0 and code_named == 0
    default = tmp_path / f"{traced}.trace.json"
    assert f"{traced}.trace.json" in err
    assert json.loads(default.read_text()) == json.loads(named.read_text())
    assert json.loads(default.read_text())["otherData"]["evaluation_id"] == traced


def test_layers_show_tables_per_batch_size_and_json_on_request(
    capsys: pytest.CaptureFixture[str], traced: str
) -> None:
    code, out, _ = run_cli(capsys, "trace", traced, "--layers", "--top", "2")
    assert code == 0
    for text in ("batch 1", "batch 8", "Conv2d", BETWEEN_LAYERS, "aten::conv2d", "sgemm"):
        assert text in out
    code, out, _ = run_cli(capsys, "trace", traced, "--layers", "--format", "json", "--group-by", "name")
    assert code == 0
    report = json.loads(out)
    assert report["group_by"] == "name" and {row["key"] for row in report["rows"]} >= {"conv1", "fc"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["trace", "f" * 32], "no evaluation with id"),
        (["trace", "{id}", "--format", "xml"], "'xml' is not one of"),
        (["trace", "{id}", "--layers", "--format", "chrome"], "--layers shows tables or JSON"),
        (["trace", "{id}", "--group-by", "module"], "'module' is not one of"),
        (["trace", "{id}", "-o", "file.json"], "-o/--output writes --format json or chrome"),
    ],
)
def test_mistakes_exit_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], traced: str, args: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, *[arg.replace("{id}", traced) for arg in args])
    assert code == 2
    assert message in err and out == ""
