"""The dashboard in a real browser: the system's Chromium, driven by Playwright, against a live farm
(`mlscope api` and a real `mlscope worker` on the real Redis and PostgreSQL) holding results that
worker measured.

One farm, one browser and one set of results serve the whole module. Each page must load with no
console error and no request leaving the API's host; the charts must hold the series and points the
results call for; the comparison's CSV must be the API's JSON rows; the submit form must create an
evaluation the worker completes. With MLSCOPE_SCREENSHOTS set, the overview, an evaluation and the
comparison are saved there as PNG files.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from mlscope.analysis.chart_builders import batch_curve, compare_bars, latency_cdf
from mlscope.api.dashboard.figures import point_histograms
from mlscope.api.streams import csv_cell
from tests.contract.conftest import postgres_url  # noqa: F401 - a fixture, used by name
from tests.fixtures.services import unavailable
from tests.integration.farm import QUICK_TRACED as QUICK
from tests.integration.farm import REDIS_URL, TOKEN, Farm, empty_redis_db

# Real frameworks run on a real worker, on the real PostgreSQL.
pytestmark = [pytest.mark.slow, pytest.mark.postgres]

MODEL = "test_tiny_mlp"
BATCH_SIZES = [1, 4]
# A worker's first job loads its framework: generous, as on a busy CI machine.
RUN_TIMEOUT_S = 180


@dataclass
class Results:
    """The evaluations the worker measured for the module: a traced one and a plain one."""

    traced: dict[str, Any]
    plain: dict[str, Any]

    @property
    def ids(self) -> list[str]:
        return [self.traced["id"], self.plain["id"]]


@pytest.fixture(scope="module")
def farm(postgres_url: str, shared_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:  # noqa: F811
    """The api and one worker, on Redis and the session's PostgreSQL database."""
    import redis

    try:
        empty_redis_db()
    except redis.RedisError as exc:
        unavailable(f"Redis at {REDIS_URL} is unreachable: {exc}")
    made = Farm(
        broker_url=REDIS_URL,
        store_url=postgres_url,
        tmp=tmp_path_factory.mktemp("dashboard-farm"),
        cache_dir=shared_cache,
    )
    try:
        made.start_api()
        made.start_worker("dash-agent", made.capability("dash"))
        yield made
    finally:
        made.stop()


@pytest.fixture(scope="module")
def results(farm: Farm) -> Results:
    """Two evaluations run by the worker: pytorch traced to FRAMEWORK (spans, layers), onnxruntime plain."""
    target = farm.capability("dash")
    common = {"model": MODEL, "target": target, "batch_sizes": BATCH_SIZES, "measure": QUICK}
    traced = farm.client.submit({**common, "framework": "pytorch", "trace_level": "FRAMEWORK"})
    plain = farm.client.submit({**common, "framework": "onnxruntime"})
    ended = farm.client.wait([traced["id"], plain["id"]], timeout_s=RUN_TIMEOUT_S)
    assert [r["status"] for r in ended] == ["succeeded", "succeeded"], [r.get("error") for r in ended]
    return Results(traced=ended[0], plain=ended[1])


@dataclass
class Watched:
    """A browser page with what it logged and requested."""

    page: Any
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def tab(browser: Any, farm: Farm) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    watched = Watched(page)
    page.on("console", lambda message: message.type == "error" and watched.errors.append(message.text))
    page.on("pageerror", lambda error: watched.errors.append(str(error)))
    page.on("request", lambda request: watched.requests.append(request.url))
    # Chromium's console says only "Failed to load resource": the URL is added here.
    page.on(
        "response",
        lambda response: (
            response.status >= 400 and watched.errors.append(f"{response.status} {response.url}")
        ),
    )
    page.set_default_timeout(30_000)
    try:
        yield watched
    finally:
        context.close()


def visit(tab: Watched, farm: Farm, path: str) -> Any:
    """Open `path` and wait until the page and its charts are drawn; its status must be 200."""
    response = tab.page.goto(farm.api_url + path, wait_until="networkidle")
    assert response is not None and response.status == 200, path
    if tab.page.locator("script.chart-data, [data-trace-view]").count():
        # The page's script marks "charts-drawn" when the last chart is drawn, the trace section's too
        tab.page.wait_for_function("performance.getEntriesByName('charts-drawn').length > 0")
        tab.page.wait_for_function(
            "[...document.querySelectorAll('div.plot')].every(div => div.querySelector('.main-svg'))"
        )
    return response


def assert_clean(tab: Watched, farm: Farm) -> None:
    assert not tab.errors, f"console errors: {tab.errors}"
    api_host = urlsplit(farm.api_url).netloc
    elsewhere = [
        url for url in tab.requests if urlsplit(url).scheme != "data" and urlsplit(url).netloc != api_host
    ]
    assert not elsewhere, f"requests that left the API: {elsewhere}"


def screenshot(tab: Watched, name: str) -> None:
    folder = os.environ.get("MLSCOPE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        tab.page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def drawn_charts(tab: Watched) -> dict[str, dict[str, int]]:
    """Each chart plotly drew, by kind: its traces and points, and what the server embedded."""
    charts: list[dict[str, Any]] = tab.page.evaluate(
        """() => [...document.querySelectorAll('div.plot')].map(div => {
            const embedded = div.nextElementSibling.dataset;
            return {
              kind: div.dataset.kind,
              traces: div.data.length,
              points: div.data.reduce((sum, trace) => sum + trace.x.length, 0),
              series: Number(embedded.series),
              embeddedPoints: Number(embedded.points),
            };
        })"""
    )
    return {chart["kind"]: chart for chart in charts}


def test_every_page_loads_with_no_console_error_and_no_request_leaving_the_api(
    tab: Watched, farm: Farm, results: Results
) -> None:
    ids = ",".join(results.ids)
    for path, shot in (
        ("/", "overview"),
        ("/evaluations", None),
        (f"/evaluations/{results.traced['id']}", "evaluation"),
        (f"/evaluations/{results.plain['id']}", None),
        (f"/compare?ids={ids}", "compare"),
        ("/models", None),
        ("/submit", None),
    ):
        visit(tab, farm, path)
        assert tab.page.locator("nav").count() == 1, path
        if shot:
            screenshot(tab, shot)
    # The Swagger page draws the OpenAPI document from files this API serves
    tab.page.goto(farm.api_url + "/api/docs", wait_until="networkidle")
    tab.page.wait_for_selector(".opblock-tag", timeout=30_000)
    assert_clean(tab, farm)
    overview = tab.page.goto(farm.api_url + "/", wait_until="networkidle")
    assert overview is not None and "dash-agent" in tab.page.inner_text("table.agents")


def test_an_evaluation_page_draws_every_chart_its_result_calls_for(
    tab: Watched, farm: Farm, results: Results
) -> None:
    visit(tab, farm, f"/evaluations/{results.traced['id']}")
    charts = drawn_charts(tab)
    result = farm.client.evaluation(results.traced["id"], raw=True)
    points = len(result["measurements"])

    # What plotly drew is what the page embedded ...
    for kind, chart in charts.items():
        assert (chart["traces"], chart["points"]) == (chart["series"], chart["embeddedPoints"]), kind
    # ... which is what the shared builders make of the stored result
    for kind, build in (("latency", point_histograms), ("cdf", latency_cdf), ("batch", batch_curve)):
        expected = build(result)
        assert charts[kind]["traces"] == len(expected.series), kind
        assert charts[kind]["points"] == sum(s.points for s in expected.series), kind
    assert points == len(BATCH_SIZES)
    assert charts["latency"]["traces"] == points and charts["cdf"]["traces"] == points
    # p50, p90, p99 and throughput at each batch size (and a mark per invalid point, if any)
    assert charts["batch"]["traces"] >= 4 and charts["batch"]["points"] >= 4 * len(BATCH_SIZES)
    assert charts["cold-start"]["points"] >= 3
    # Traced to FRAMEWORK: the layer breakdown and the timeline of the stored spans
    assert charts["layers"]["traces"] >= 1 and charts["timeline"]["points"] >= 1
    assert tab.page.locator("table.hotspots tbody tr").count() >= 1
    download = tab.page.locator("#trace-download")
    assert download.get_attribute("href") == f"/api/v1/evaluations/{results.traced['id']}/trace?format=chrome"
    assert "timeline" not in drawn_charts_of(tab, farm, results.plain["id"])  # not traced: no timeline
    assert_clean(tab, farm)


def drawn_charts_of(tab: Watched, farm: Farm, evaluation_id: str) -> dict[str, dict[str, int]]:
    visit(tab, farm, f"/evaluations/{evaluation_id}")
    return drawn_charts(tab)


def test_the_comparison_draws_a_bar_per_point_and_its_csv_is_the_apis_json(
    tab: Watched, farm: Farm, results: Results
) -> None:
    visit(tab, farm, f"/compare?ids={','.join(results.ids)}&batch_sizes=1&batch_sizes=4")
    table = farm.client.compare(ids=results.ids, batch_sizes=BATCH_SIZES)
    rows = table["rows"]

    bars = drawn_charts(tab)["compare"]
    expected = compare_bars(rows)
    # A bar per model @ batch size for each framework × system (two frameworks, one agent); invalid
    # rows are bars of a series of their own, so the series are 2 or more
    assert bars["traces"] == len(expected.series) >= 2
    assert bars["points"] == len(rows) == 2 * len(BATCH_SIZES)
    csv_href = tab.page.locator("#csv-download").get_attribute("href")
    answer = tab.page.request.get(farm.api_url + csv_href)
    assert answer.ok and answer.headers["content-type"].startswith("text/csv")
    lines = list(csv.reader(io.StringIO(answer.text())))
    assert lines[0] == table["columns"]
    assert lines[1:] == [[str(csv_cell(row[column])) for column in table["columns"]] for row in rows]
    # The page's own URL is the comparison: opening it again shows the same table
    share = tab.page.locator("#share-url").get_attribute("href")
    visit(tab, farm, share)
    assert tab.page.locator("table.compare-rows tbody tr").count() == len(rows)
    assert_clean(tab, farm)


def test_the_evaluations_list_follows_a_waiting_evaluation_until_it_ends(
    tab: Watched, farm: Farm, results: Results
) -> None:
    # Given an evaluation waiting on a queue no worker serves
    waiting = farm.client.submit(
        {"model": MODEL, "framework": "pytorch", "target": farm.capability("nobody"), "measure": QUICK}
    )
    visit(tab, farm, "/evaluations")
    row = tab.page.locator(f"tr[data-id='{waiting['id']}']")
    assert row.locator("[data-live-status]").inner_text() == "queued"

    # When it is cancelled through the API, the page, polling the JSON API, sees it end and reloads
    with tab.page.expect_navigation(wait_until="networkidle"):
        farm.client.cancel(waiting["id"])
    row = tab.page.locator(f"tr[data-id='{waiting['id']}']")
    assert row.locator(".status").inner_text() == "cancelled"
    assert row.locator("[data-live-status]").count() == 0  # rendered again: no longer followed
    assert_clean(tab, farm)


def test_the_submit_form_shows_field_errors_then_creates_an_evaluation_the_worker_completes(
    tab: Watched, farm: Farm, results: Results
) -> None:
    visit(tab, farm, "/submit")
    form = tab.page.locator("#submit-form")
    form.locator("[name=token]").fill(TOKEN)
    form.locator("[name=model]").fill(MODEL)
    form.locator("[name=framework]").select_option("onnxruntime")
    form.locator("[name=target]").fill(farm.capability("dash"))
    form.locator("[name=measure]").fill(json.dumps(QUICK))

    # A malformed batch size: the API's problem document names the field, the form shows it
    form.locator("[name=batch_sizes]").fill("1,x")
    with tab.page.expect_response(lambda response: response.request.method == "POST") as refused:
        form.locator("button[type=submit]").click()
    assert refused.value.status == 422
    tab.page.wait_for_selector("#submit-errors li[data-field='batch_sizes.1']")

    # A good one is accepted, followed live, and the page of the finished evaluation is opened
    form.locator("[name=batch_sizes]").fill("2")
    with tab.page.expect_response(lambda response: response.request.method == "POST") as accepted:
        form.locator("button[type=submit]").click()
    assert accepted.value.status == 202, accepted.value.text()
    evaluation_id = accepted.value.json()["id"]
    tab.page.wait_for_url(f"**/evaluations/{evaluation_id}", timeout=RUN_TIMEOUT_S * 1000)
    tab.page.wait_for_load_state("networkidle")
    status = tab.page.inner_text("#status")
    result = farm.client.evaluation(evaluation_id)
    assert result["status"] == "succeeded", result.get("error")
    assert status.startswith("succeeded")
    assert [m["batch_size"] for m in result["measurements"]] == [2]
    # The 422 was an answer, not a page error: the console stays clean apart from that refused POST
    tab.errors[:] = [e for e in tab.errors if "422" not in e]
    assert_clean(tab, farm)
