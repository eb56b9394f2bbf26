"""The dashboard's pages without a browser: Flask's test client against the real app, on the real Redis
(broker and agent registry) and a real SQLite store holding results written through the Store API.

Each page answers 200 with what it should show; bad input is a 404 or 400 page (HTML, never a stack
trace); no page names a file outside the API; plotly.js is served from the installed package, gzipped
when asked. The browser tests (tests/browser) check the same pages drawn by Chromium.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from mlscope.api import create_app
from mlscope.contract.settings import Settings, load_settings
from mlscope.registry.agents import AgentInfo, AgentRegistry
from mlscope.store import Store
from tests.contract.builders import COLD_START, make_measurement, make_system
from tests.contract.builders import submit as store_submit
from tests.fixtures.services import emptied_redis

DASHBOARD_REDIS_DB = 13
REDIS_URL = f"redis://127.0.0.1:6379/{DASHBOARD_REDIS_DB}"
TOKEN = "dashboard-test-token"
HTML = "text/html"
# Every src= and href= of a page: each must name this API (a path), an anchor, a query or inline data.
_LINK = re.compile(r"""(?:src|href)\s*=\s*["']([^"']*)["']""")


@pytest.fixture
def redis_db() -> Iterator[redis.Redis]:
    """Redis database DASHBOARD_REDIS_DB, emptied; unreachable Redis skips locally and fails in CI."""
    yield from emptied_redis(REDIS_URL)


@pytest.fixture
def settings(mlscope_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_db: redis.Redis) -> Settings:
    monkeypatch.setenv("MLSCOPE_BROKER_URL", REDIS_URL)
    monkeypatch.setenv("MLSCOPE_API_TOKENS", TOKEN)
    return load_settings()


@pytest.fixture
def app(settings: Settings) -> Iterator[Flask]:
    made = create_app(settings)
    yield made
    made.extensions["mlscope"].store.close()
    made.extensions["mlscope"].agents.close()


@pytest.fixture
def store(app: Flask) -> Store:
    found: Store = app.extensions["mlscope"].store
    return found


def _valid(measurement: dict[str, Any]) -> dict[str, Any]:
    return {**measurement, "validity": {"valid": True, "reasons": []}}


def finished(
    store: Store, *, model: str = "resnet18", system: int = 1, valid: bool = True, mean: float = 2.0
) -> str:
    """A succeeded evaluation with single_stream points at batch 1 and 8, each with raw latencies."""
    evaluation_id = store_submit(store, model=model)
    store.start_evaluation(evaluation_id)
    points = [make_measurement("single_stream", size, mean=mean * size) for size in (1, 8)]
    store.finish_evaluation(
        evaluation_id,
        system=make_system(system, agent={"id": f"agent-{system}"}),
        framework={"name": "pytorch", "version": "2.3.0"},
        cold_start=COLD_START,
        measurements=[_valid(p) for p in points] if valid else points,
    )
    return evaluation_id


def page(http: FlaskClient, url: str, status: int = 200) -> str:
    response = http.get(url, headers={"Accept": HTML})
    text = response.get_data(as_text=True)
    assert response.status_code == status, text[:2000]
    assert response.mimetype == HTML
    assert "Traceback" not in text
    links = _LINK.findall(text)
    outside = [link for link in links if not link.startswith(("/", "#", "?", "data:"))]
    assert not outside, f"{url} names files outside the API: {outside}"
    return text


def charts(text: str) -> dict[str, list[dict[str, Any]]]:
    """The charts a page embeds, by kind: each {"series", "points", "figure"}."""
    found: dict[str, list[dict[str, Any]]] = {}
    pattern = (
        r'<script type="application/json" class="chart-data" data-kind="([^"]+)"\s+'
        r'data-series="(\d+)" data-points="(\d+)">(.*?)</script>'
    )
    for kind, series, points, body in re.findall(pattern, text, flags=re.S):
        figure = json.loads(body)
        assert len(figure["data"]) == int(series)
        assert sum(len(trace["x"]) for trace in figure["data"]) == int(points)
        found.setdefault(kind, []).append({"series": int(series), "points": int(points), "figure": figure})
    return found


def test_the_overview_shows_live_agents_their_jobs_queues_and_recent_evaluations(
    http: FlaskClient, store: Store, settings: Settings
) -> None:
    # Given a live agent running a job, and an evaluation waiting on its queue
    running = store_submit(store, model="resnet18")
    store.start_evaluation(running)
    registry = AgentRegistry(REDIS_URL, ttl_s=60)
    try:
        registry.register(
            AgentInfo(
                id="agent-7",
                hostname="host-7",
                capabilities=("cpu", "cpu.x86_64"),
                frameworks={"pytorch": "2.3.0"},
                runners=("process",),
                queues=("pytorch@cpu", "pytorch@cpu.x86_64"),
                current_job=running,
            )
        )
        # When the overview is read
        text = page(http, "/")
    finally:
        registry.close()

    # Then it names the agent, its capabilities, its current job and its queues, and the evaluation
    assert "agent-7" in text and "cpu.x86_64" in text and "pytorch 2.3.0" in text
    assert f'href="/evaluations/{running}"' in text
    assert "<code>pytorch@cpu</code>" in text
    assert f'data-live-status="{running}"' in text  # running: followed live


def test_an_evaluation_whose_points_are_all_invalid_is_not_shown_as_plainly_succeeded(
    http: FlaskClient, store: Store
) -> None:
    good = finished(store, valid=True)
    bad = finished(store, valid=False)

    listing = page(http, "/evaluations")
    rows = {row_id: body for row_id, body in re.findall(r'<tr data-id="([^"]+)">(.*?)</tr>', listing, re.S)}

    assert "NOT VALID" in rows[bad] and "every measurement invalid" in rows[bad]
    assert "NOT VALID" not in rows[good] and ">succeeded<" in rows[good]
    assert "succeeded · NOT VALID" in page(http, f"/evaluations/{bad}")
    assert "NOT VALID" not in page(http, f"/evaluations/{good}")


def _cell(row: str, css: str) -> str:
    """The text of a list row's cell of class `css`, its tags removed."""
    found = re.search(rf'<td class="{css}">(.*?)</td>', row, re.S)
    assert found, row
    return " ".join(re.sub(r"<[^>]+>", "", found.group(1)).split())


def test_the_evaluations_list_gives_each_points_median_and_whether_the_result_is_valid(
    http: FlaskClient, store: Store
) -> None:
    # Given a valid evaluation, one whose every point is invalid, and one still queued
    good = finished(store, valid=True, mean=2.0)
    bad = finished(store, valid=False, mean=3.0)
    queued = store_submit(store, model="resnet18")

    # When the list is read
    listing = page(http, "/evaluations")
    rows = {row_id: body for row_id, body in re.findall(r'<tr data-id="([^"]+)">(.*?)</tr>', listing, re.S)}

    # Then each shows its points' medians (batch 1 and 8: mean × batch size) and its validity
    assert "<th>median (ms)</th><th>validity</th>" in listing
    assert _cell(rows[good], "medians") == "batch 1: 2.000 · batch 8: 16.000"
    assert _cell(rows[good], "validity") == "valid"
    # And the all-invalid result says so in both columns: it never reads better than it is
    assert _cell(rows[bad], "medians") == "batch 1: 3.000 (invalid) · batch 8: 24.000 (invalid)"
    assert _cell(rows[bad], "validity") == "NOT VALID every measurement invalid"
    assert (_cell(rows[queued], "medians"), _cell(rows[queued], "validity")) == ("–", "–")


def test_the_evaluations_list_filters_and_pages(http: FlaskClient, store: Store) -> None:
    ids = [finished(store, model="resnet18") for _ in range(3)]
    other = finished(store, model="mobilenet")
    queued = store_submit(store, model="resnet18")

    only_resnet = page(http, "/evaluations?model=resnet18&framework=&status=succeeded")
    assert all(i in only_resnet for i in ids) and other not in only_resnet and queued not in only_resnet
    assert "Evaluations <small>(3)</small>" in only_resnet

    first = page(http, "/evaluations?model=resnet18&limit=2")
    second = page(http, "/evaluations?model=resnet18&limit=2&offset=2")
    shown = set(re.findall(r'<tr data-id="([^"]+)"', first)) | set(
        re.findall(r'<tr data-id="([^"]+)"', second)
    )
    assert shown == {*ids, queued}
    assert "offset=2" in first and "older" in first


def test_an_evaluation_page_draws_its_points_with_a_chart_per_view(http: FlaskClient, store: Store) -> None:
    evaluation_id = finished(store)

    text = page(http, f"/evaluations/{evaluation_id[:8]}")  # a unique prefix is enough
    drawn = charts(text)

    # Two points, each with raw latencies: a histogram and a CDF series per point
    assert drawn["latency"][0]["series"] == 2 and drawn["cdf"][0]["series"] == 2
    # p50 (with its interval), p90, p99 and throughput against the batch size, two batch sizes each
    assert drawn["batch"][0]["series"] == 4 and drawn["batch"][0]["points"] == 8
    assert drawn["throughput-latency"][0]["series"] == 2
    assert drawn["cold-start"][0]["points"] == 3
    assert "timeline" not in drawn and "layers" not in drawn  # no spans stored
    assert '<script src="/static/vendor/plotly.min.js?v=' in text
    assert f'href="/api/v1/evaluations/{evaluation_id}"' in text


def test_a_generate_evaluations_page_draws_the_servers_metrics_under_its_requests(
    http: FlaskClient, store: Store
) -> None:
    # Given a generate evaluation whose run sampled the endpoint server's metrics
    evaluation_id = store_submit(store, model="qwen3")
    store.start_evaluation(evaluation_id)
    point = _valid(make_measurement("generate", 1, mean=40.0))
    point["generation"] = {
        "per_request": {
            "ttft_ms": [20.0, 25.0],
            "tpot_ms": [1.0, 1.2],
            "e2e_ms": [40.0, 45.0],
            "error": [None, None],
        },
        "server_metrics": {
            "url": "http://127.0.0.1:8000/metrics",
            "source": "vllm",
            "interval_s": 0.5,
            "samples": 3,
            "failed_samples": 0,
            "t_s": [0.0, 0.5, 1.0],
            "series": {"kv_cache_usage": [0.1, 0.5, 0.25], "requests_running": [1.0, 2.0, 2.0]},
            "client_in_flight": [1, 2, 2],
            "peak": {"kv_cache_usage": 0.5, "requests_running": 2.0},
        },
    }
    store.finish_evaluation(
        evaluation_id,
        system=make_system(1),
        framework={"name": "endpoint", "version": "1"},
        cold_start=COLD_START,
        measurements=[point],
    )
    # When its page is read, then the server's metrics are drawn right after the requests' chart
    text = page(http, f"/evaluations/{evaluation_id}")
    kinds = re.findall(r'class="chart-data" data-kind="([^"]+)"', text)
    assert kinds.index("server-metrics") == kinds.index("generation") + 1
    [drawn] = charts(text)["server-metrics"]
    names = [trace["name"] for trace in drawn["figure"]["data"]]
    assert names == ["in flight (client)", "running (server)", "KV cache use (server)"]
    assert drawn["figure"]["data"][2]["y"] == [10.0, 50.0, 25.0]
    assert drawn["figure"]["data"][2]["yaxis"] == "y2"


def test_an_evaluation_pages_charts_bin_each_point_label_log_axes_and_say_each_note_once(
    http: FlaskClient, store: Store
) -> None:
    # Given an evaluation whose every point is invalid, batch 1 at about 2 ms and batch 8 at about 16 ms
    evaluation_id = finished(store, valid=False, mean=2.0)

    # When its page is read
    text = page(http, f"/evaluations/{evaluation_id}")
    drawn = {kind: found[0]["figure"] for kind, found in charts(text).items()}

    # Then each point's histogram has bins of its own, inside its own latencies
    first, second = drawn["latency"]["data"]
    assert max(first["x"]) < 2.1 < 15.9 < min(second["x"]), (first["x"], second["x"])
    # And a log axis is labelled with values and units, not plotly's bare mantissas
    batch_axis = drawn["batch"]["layout"]["xaxis"]
    assert (batch_axis["type"], batch_axis["ticktext"]) == ("log", ["batch 1", "batch 8"])
    latency_axis = drawn["throughput-latency"]["layout"]["yaxis"]
    assert latency_axis["type"] == "log" and latency_axis["ticktext"]
    assert all(label.endswith(" ms") for label in latency_axis["ticktext"]), latency_axis["ticktext"]
    # And the right-hand throughput axis starts at zero
    assert drawn["batch"]["layout"]["yaxis2"]["rangemode"] == "tozero"
    # And no chart draws its title, notes or legend where an axis title is: the page says them
    for kind, figure in drawn.items():
        layout = figure["layout"]
        assert "annotations" not in layout and "title" not in layout, kind
        assert layout["legend"]["y"] >= 1 and layout["legend"]["yanchor"] == "bottom", kind
    assert '<h3 class="chart-title">latency distribution: ' in text
    # And the note that both points are invalid is given once on the page, under the first chart
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", text, re.S)
    assert sum("2 of 2 points invalid" in caption for caption in captions) == 1, captions


def test_a_long_trace_is_shown_as_its_longest_spans_with_a_link_to_the_whole(
    http: FlaskClient, store: Store
) -> None:
    # Given an evaluation with 2,500 stored spans, some of them layers
    evaluation_id = finished(store)
    trace_id = "ab" * 16
    spans = [
        {
            "trace_id": trace_id,
            "span_id": f"{i + 1:016x}",
            "parent_id": None,
            "name": f"layer{i % 7}",
            "level": "FRAMEWORK",
            "start_ns": 1_000 * i,
            "end_ns": 1_000 * i + 100 + i,
            "attributes": {"layer_type": f"Conv{i % 3}", "batch_size": 1},
        }
        for i in range(2500)
    ]
    store.save_spans(evaluation_id, spans)

    # The page itself names the trace section's URL (its script fetches it once shown) and the download
    shown = page(http, f"/evaluations/{evaluation_id}")
    assert f'data-trace-view="/evaluations/{evaluation_id}/trace-view"' in shown and "2,500 spans" in shown
    assert f'href="/api/v1/evaluations/{evaluation_id}/trace?format=chrome"' in shown
    assert "timeline" not in charts(shown)
    text = page(http, f"/evaluations/{evaluation_id}/trace-view")
    drawn = charts(text)

    timeline = drawn["timeline"][0]
    assert timeline["points"] == 2000
    assert "showing the 2,000 longest of 2,500 spans" in text
    # The longest were kept: span i lasts 100 + i ns, so the shortest kept is span 500
    shortest = min(min(trace["x"]) for trace in timeline["figure"]["data"])
    assert shortest == pytest.approx((100 + 500) / 1e6)
    (layers,) = drawn["layers"][0]["figure"]["data"]
    assert set(layers["y"]) == {"Conv0", "Conv1", "Conv2"}
    # The layers that took the most time, by name
    hotspots = re.search(r'<table class="hotspots">(.*?)</table>', text, re.S)
    assert hotspots is not None and "FRAMEWORK pass" in text
    assert set(re.findall(r"<td><code>([^<]+)</code></td>", hotspots.group(1))) == {
        f"layer{i}" for i in range(7)
    }
    # An unknown id's trace section is a 404 page, like its page
    assert "no evaluation" in page(http, "/evaluations/0123456789abcdef/trace-view", 404).lower()


def test_the_comparison_page_draws_the_apis_rows_and_links_its_csv(http: FlaskClient, store: Store) -> None:
    # Given resnet18 measured on two systems, and mobilenet on one
    finished(store, model="resnet18", system=1, mean=2.0)
    finished(store, model="resnet18", system=3, mean=3.0)
    finished(store, model="mobilenet", system=1, mean=1.0)

    text = page(http, "/compare?models=resnet18&frameworks=pytorch&batch_sizes=1&batch_sizes=8")
    (bars,) = charts(text)["compare"]

    # x: model @ batch; one series per framework × system, whiskers from the median's interval
    assert bars["series"] == 2 and bars["points"] == 4
    assert {tuple(trace["x"]) for trace in bars["figure"]["data"]} == {("resnet18 @ 1", "resnet18 @ 8")}
    assert all("error_y" in trace for trace in bars["figure"]["data"])
    csv_url = re.search(r'id="csv-download" href="([^"]+)"', text)
    assert csv_url is not None
    csv_link = csv_url.group(1).replace("&amp;", "&")
    assert csv_link == "/api/v1/compare?models=resnet18&frameworks=pytorch&batch_sizes=1%2C8&format=csv"
    # The CSV it links is the API's, and holds the rows of the API's JSON for the same query
    rows = http.get("/api/v1/compare?models=resnet18&frameworks=pytorch&batch_sizes=1,8").get_json()["rows"]
    table = list(csv.DictReader(io.StringIO(http.get(csv_link).get_data(as_text=True))))
    assert [(r["evaluation_id"], r["batch_size"]) for r in table] == [
        (r["evaluation_id"], str(r["batch_size"])) for r in rows
    ]
    assert (
        'id="share-url" href="/compare?models=resnet18&amp;frameworks=pytorch&amp;batch_sizes=1%2C8"' in text
    )
    # The systems to filter by are grouped by machine and stack: sys-1 and sys-3 are two hosts of one
    # machine (docs/history.md), so one group of both
    groups = re.findall(r'<optgroup label="machine [0-9a-f]{8} · stack [0-9a-f]{8}">(.*?)</optgroup>', text)
    assert [re.findall(r'<option value="([^"]+)"', group) for group in groups] == [["sys-1", "sys-3"]]


def test_the_diff_page_gives_the_apis_verdict_per_point_with_its_chart(
    http: FlaskClient, store: Store
) -> None:
    # Given A, and B twice as fast at both batch sizes
    a, b = finished(store, mean=2.0), finished(store, mean=1.0, system=2)
    # Without A and B the page is the form
    assert 'name="a"' in page(http, "/diff") and "diff-points" not in page(http, "/diff")
    # When the page compares them
    text = page(http, f"/diff?a={a}&b={b[:8]}")
    # Then each point's verdict is the JSON API's, and so are its ratios
    api = http.get(f"/api/v1/compare/diff?a={a}&b={b}").get_json()
    verdicts = re.findall(r"<td><strong>([^<]+)</strong></td>", text)
    assert verdicts == [point["verdict"] for point in api["points"]] == ["faster", "faster"]
    for point in api["points"]:
        assert f"{point['ratio']:.3f}" in text
    # ... drawn as one "B faster" series with a marker per point, whiskers its intervals
    (chart,) = charts(text)["diff"]
    assert chart["series"] == 1 and chart["points"] == 2
    (trace,) = chart["figure"]["data"]
    assert trace["name"] == "B faster" and "error_y" in trace
    assert trace["y"] == pytest.approx([point["ratio"] for point in api["points"]])
    # ... with links to both evaluations and to the same report as JSON
    assert f'href="/evaluations/{a}"' in text and f'href="/evaluations/{b}"' in text
    assert 'id="diff-json" href="/api/v1/compare/diff?' in text
    # A side that names nothing, or a threshold out of range, is a 400 page naming the field
    assert "no evaluation" in page(http, f"/diff?a=0123456789abcdef&b={b}", 400)
    assert "threshold" in page(http, f"/diff?a={a}&b={b}&threshold=2", 400)


def test_the_catalogue_and_the_submit_form(http: FlaskClient) -> None:
    catalogue = page(http, "/models?search=tiny")
    assert "<code>test_tiny_mlp</code>" in catalogue
    first, second = page(http, "/models"), page(http, "/models?page=2")
    assert "next →" in first and "← previous" in second
    assert set(re.findall(r"<td><code>([^<]+)</code></td>", first)).isdisjoint(
        re.findall(r"<td><code>([^<]+)</code></td>", second)
    )
    assert "unknown field" in page(http, "/models?color=red", 400).lower()
    assert "resnet18" not in page(http, "/models?framework=onnxruntime&search=tiny_mlp")

    assert 'href="/submit?model=test_tiny_mlp&amp;framework=onnxruntime"' in catalogue
    form = page(http, "/submit?model=test_tiny_mlp&framework=onnxruntime")
    assert re.search(r'<option value="onnxruntime"[^>]* selected>onnxruntime', form)
    assert 'id="submit-form"' in form and 'data-endpoint="/api/v1/evaluations"' in form
    assert 'value="test_tiny_mlp"' in form and 'type="password"' in form


def _options(form: str) -> dict[str, str]:
    """The submit form's framework options: value → text, the chosen one's value suffixed with "*"."""
    found = re.findall(r'<option value="([^"]+)" data-served-by="[^"]*"( selected)?>([^<]+)</option>', form)
    return {value + ("*" if chosen else ""): text for value, chosen, text in found}


def _notice_shown(form: str) -> bool:
    found = re.search(r'<p id="framework-unserved"[^>]*>', form)
    assert found, form
    return "hidden" not in found.group(0)


def test_the_submit_form_defaults_to_what_live_agents_serve_and_a_job_none_can_run_says_so(
    http: FlaskClient,
) -> None:
    # Given no live agent, the form says that none serves the framework it shows
    alone = page(http, "/submit")
    assert all(text.endswith("(no live agent)") for text in _options(alone).values())
    assert _notice_shown(alone)

    # When an agent serving onnxruntime on cpu is live
    registry = AgentRegistry(REDIS_URL, ttl_s=60)
    try:
        registry.register(
            AgentInfo(
                id="onnx-1",
                hostname="host-1",
                capabilities=("cpu",),
                frameworks={"onnxruntime": "1.18.0"},
                runners=("process",),
                queues=("onnxruntime@cpu",),
            )
        )
        form = page(http, "/submit")
        asked = page(http, "/submit?framework=pytorch")
        headers = {"Authorization": f"Bearer {TOKEN}"}
        served, unserved = (
            http.post("/api/v1/evaluations", json={"model": "test_tiny_mlp", "framework": f}, headers=headers)
            for f in ("onnxruntime", "pytorch")
        )
        batch = http.post(
            "/api/v1/evaluations/batch",
            json={"models": ["test_tiny_mlp"], "frameworks": ["onnxruntime", "pytorch"]},
            headers=headers,
        )
    finally:
        registry.close()

    # Then the form lists and chooses onnxruntime first, and marks every other framework
    options = _options(form)
    assert next(iter(options)) == "onnxruntime*" and options["onnxruntime*"] == "onnxruntime (1 live agent)"
    assert options["caffe2"] == "caffe2 (no live agent)" and options["pytorch"] == "pytorch (no live agent)"
    assert not _notice_shown(form)
    # And a framework the query names is chosen, with the notice that no live agent serves it
    assert "pytorch*" in _options(asked) and _notice_shown(asked)
    # And the API's answer names the agents that can run the job: none for pytorch, with a warning
    assert (served.status_code, served.json["served_by"]) == (202, ["onnx-1"])
    assert (unserved.status_code, unserved.json["served_by"]) == (202, [])
    assert "no live worker serves pytorch@cpu" in unserved.json["warnings"][0]
    assert batch.status_code == 202, batch.json
    assert {e["framework"]: e["served_by"] for e in batch.json["evaluations"]} == {
        "onnxruntime": ["onnx-1"],
        "pytorch": [],
    }


@pytest.mark.parametrize(
    ("url", "status", "named"),
    [
        ("/evaluations/0123456789abcdef", 404, "0123456789abcdef"),
        ("/evaluations?status=finished", 400, "status"),
        ("/evaluations?limit=x", 400, "limit"),
        ("/evaluations?since=yesterday", 400, "since"),
        ("/compare?batch_sizes=1,x", 400, "batch_sizes"),
        ("/compare?ids=ffffffffffff", 400, "ids.0"),
        ("/models?page=0", 400, "page"),
        ("/no/such/page", 404, "/no/such/page"),
    ],
)
def test_bad_input_on_a_page_is_a_404_or_400_page_naming_what_is_wrong(
    http: FlaskClient, store: Store, url: str, status: int, named: str
) -> None:
    finished(store)
    text = page(http, url, status)
    assert f"<h1>{status} ·" in text and named in text


def test_the_json_api_keeps_its_problem_documents(http: FlaskClient) -> None:
    for url in ("/api/v1/no-such-resource", "/api/v1/evaluations/0123456789abcdef"):
        response = http.get(url)
        assert response.status_code == 404 and response.mimetype == "application/problem+json"


def test_plotly_js_is_served_from_the_vendored_bundle_gzipped_when_asked_and_cached(
    http: FlaskClient,
) -> None:
    from importlib import resources

    # make vendors plotly.js's basic bundle from npm (ops/dashboard/vendor.sh); without it, the plotly
    # package's full bundle is served. make test runs make, so it must be the basic one.
    vendored = resources.files("mlscope.api.dashboard") / "static" / "vendor" / "plotly-basic.min.js"
    assert vendored.is_file(), "make test vendors plotly.js's basic bundle: ops/dashboard/vendor.sh"
    if vendored.is_file():
        original = vendored.read_bytes()
        assert b"plotly.js (basic - minified)" in original[:200]
    else:
        original = (resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()

    plain = http.get("/static/vendor/plotly.min.js", headers={"Accept-Encoding": "identity"})
    zipped = http.get("/static/vendor/plotly.min.js", headers={"Accept-Encoding": "gzip, deflate"})

    assert plain.status_code == 200 and plain.data == original and "Content-Encoding" not in plain.headers
    assert zipped.headers["Content-Encoding"] == "gzip" and gzip.decompress(zipped.data) == original
    assert len(zipped.data) < len(original) / 2
    assert "immutable" in zipped.headers["Cache-Control"] and zipped.headers["Vary"] == "Accept-Encoding"
    again = http.get("/static/vendor/plotly.min.js", headers={"If-None-Match": zipped.headers["ETag"]})
    assert again.status_code == 304 and not again.data
    for asset in ("/static/dashboard.js", "/static/dashboard.css", "/api/docs/assets/swagger-ui.css"):
        assert http.get(asset).status_code == 200, asset
    assert http.get("/api/docs/assets/index.html").status_code == 404  # only the files the page loads


def test_when_reads_need_a_token_pages_say_so_and_assets_stay_open(
    mlscope_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_db: redis.Redis
) -> None:
    monkeypatch.setenv("MLSCOPE_BROKER_URL", REDIS_URL)
    monkeypatch.setenv("MLSCOPE_API_TOKENS", TOKEN)
    monkeypatch.setenv("MLSCOPE_API_READS", "token")
    app = create_app(load_settings())
    try:
        http = app.test_client()
        text = page(http, "/evaluations", 401)
        assert "reads need a token" in text
        assert http.get("/static/dashboard.js").status_code == 200
    finally:
        app.extensions["mlscope"].store.close()
        app.extensions["mlscope"].agents.close()


def test_a_trace_that_grows_after_a_view_is_drawn_whole_on_the_next(http: FlaskClient, store: Store) -> None:
    # Given a page viewed while its trace had 10 spans (the worker's task span comes last, say)
    evaluation_id = finished(store)
    spans = [
        {
            "trace_id": "cd" * 16,
            "span_id": f"{i + 1:016x}",
            "parent_id": None,
            "name": f"phase{i}",
            "level": "APPLICATION",
            "start_ns": 1_000 * i,
            "end_ns": 1_000 * i + 500,
            "attributes": {},
        }
        for i in range(15)
    ]
    store.save_spans(evaluation_id, spans[:10])
    assert charts(page(http, f"/evaluations/{evaluation_id}/trace-view"))["timeline"][0]["points"] == 10

    # When 5 more are stored, the next view draws all 15
    store.save_spans(evaluation_id, spans[10:])
    assert charts(page(http, f"/evaluations/{evaluation_id}/trace-view"))["timeline"][0]["points"] == 15
