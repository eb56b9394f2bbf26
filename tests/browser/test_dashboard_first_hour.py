"""The dashboard as a first-time user meets it, in a real browser: the system's Chromium, driven by
Playwright, against `mlscope api` on the real Redis and PostgreSQL.

A live agent serving onnxruntime is registered in the real agent registry (no worker process: what the
submit page reads is the registry), and one evaluation is written through the Store API with batch 1
about forty times faster than batch 8. The submit form must choose the framework the live agent serves
and, for one no live agent serves, say so before it sends anything; the evaluation's charts must bin
each point over its own range, label log axes with values and units, keep legends off the axis titles
and start the throughput axis at zero. With MLSCOPE_SCREENSHOTS set, the submit page and the
evaluation are saved there as PNG files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from mlscope.registry.agents import AgentInfo, AgentRegistry
from mlscope.store import open_store
from tests.contract.builders import COLD_START, make_measurement, make_system
from tests.contract.builders import submit as store_submit
from tests.contract.conftest import postgres_url  # noqa: F401 - a fixture, used by name
from tests.fixtures.services import emptied_redis
from tests.integration.farm import TOKEN, Farm

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

# A Redis database of this module's own (broker and agent registry): the live agents it reads are only
# the one it registers, whatever other suites' workers run meanwhile.
FIRST_HOUR_REDIS_DB = 11
REDIS_URL = f"redis://127.0.0.1:6379/{FIRST_HOUR_REDIS_DB}"

AGENT = "onnx-only"


@pytest.fixture(scope="module")
def redis_db() -> Iterator[redis.Redis]:
    """Redis database FIRST_HOUR_REDIS_DB, emptied before and after the module."""
    yield from emptied_redis(REDIS_URL)


@pytest.fixture(scope="module")
def farm(
    redis_db: redis.Redis,
    postgres_url: str,  # noqa: F811
    shared_cache: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Farm]:
    """The api, and a live agent that serves onnxruntime on cpu (registered for the module)."""
    made = Farm(
        broker_url=REDIS_URL,
        registry_url=REDIS_URL,
        store_url=postgres_url,
        tmp=tmp_path_factory.mktemp("first-hour-farm"),
        cache_dir=shared_cache,
    )
    registry = AgentRegistry(REDIS_URL, ttl_s=600)
    try:
        made.start_api()
        registry.register(
            AgentInfo(
                id=AGENT,
                hostname="host-onnx",
                capabilities=("cpu", "cpu.x86_64"),
                frameworks={"onnxruntime": "1.18.0"},
                runners=("process",),
                queues=("onnxruntime@cpu", "onnxruntime@cpu.x86_64"),
            )
        )
        yield made
    finally:
        registry.unregister(AGENT)
        registry.close()
        made.stop()


def _point(batch_size: int, low_ms: float, high_ms: float) -> dict[str, Any]:
    """A valid point whose 400 raw latencies spread evenly from low_ms to high_ms."""
    latencies = [int((low_ms + (high_ms - low_ms) * i / 399) * 1e6) for i in range(400)]
    point = make_measurement("single_stream", batch_size, mean=(low_ms + high_ms) / 2)
    return {**point, "latencies_ns": latencies, "validity": {"valid": True, "reasons": []}}


@pytest.fixture(scope="module")
def evaluation_id(farm: Farm, postgres_url: str) -> str:  # noqa: F811
    """A succeeded evaluation: batch 1 at 0.04–0.06 ms, batch 8 at 1.6–2.4 ms."""
    store = open_store(postgres_url)
    try:
        made = store_submit(store, model="test_tiny_mlp", framework="onnxruntime")
        store.start_evaluation(made)
        store.finish_evaluation(
            made,
            system=make_system(1, agent={"id": AGENT}),
            framework={"name": "onnxruntime", "version": "1.18.0"},
            cold_start=COLD_START,
            measurements=[_point(1, 0.04, 0.06), _point(8, 1.6, 2.4)],
        )
    finally:
        store.close()
    return made


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(30_000)
    try:
        yield opened
    finally:
        context.close()


def screenshot(page: Any, name: str) -> None:
    folder = os.environ.get("MLSCOPE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def test_the_submit_form_chooses_what_a_live_agent_serves_and_says_so_before_sending_what_none_does(
    page: Any, farm: Farm
) -> None:
    posts: list[str] = []
    page.on("request", lambda request: request.method == "POST" and posts.append(request.url))

    # Given a live agent serving only onnxruntime, the form chooses onnxruntime and shows no notice
    page.goto(farm.api_url + "/submit", wait_until="networkidle")
    form = page.locator("#submit-form")
    framework = form.locator("[name=framework]")
    notice = page.locator("#framework-unserved")
    assert framework.input_value() == "onnxruntime"
    assert framework.locator("option[value=caffe2]").inner_text() == "caffe2 (no live agent)"
    assert notice.is_hidden()

    # When pytorch, which no live agent serves, is chosen and the form submitted
    framework.select_option("pytorch")
    assert notice.is_visible() and notice.locator("[data-framework]").inner_text() == "pytorch"
    form.locator("[name=token]").fill(TOKEN)
    form.locator("[name=model]").fill("test_tiny_mlp")
    form.locator("button[type=submit]").click()

    # Then nothing is sent: the page says no live agent serves it and asks for a second submit
    page.wait_for_function("document.querySelector('#submit-form button').textContent === 'Submit anyway'")
    assert notice.is_visible()
    assert posts == []
    screenshot(page, "first-hour-submit")

    # And submitted again, it is queued: the answer names no agent that can run it, and says why
    with page.expect_response(lambda response: response.request.method == "POST") as answer:
        form.locator("button[type=submit]").click()
    assert answer.value.status == 202, answer.value.text()
    assert answer.value.json()["served_by"] == []
    page.wait_for_selector("#submit-warnings li")
    assert "no live worker serves pytorch@cpu" in page.inner_text("#submit-warnings")


def _charts(page: Any) -> dict[str, Any]:
    """Each chart plotly drew, by kind: its traces' bins, its axes' tick labels, and where its legend
    and axis titles are."""
    charts: list[dict[str, Any]] = page.evaluate(
        """() => [...document.querySelectorAll('div.plot')].map(div => {
            const box = (selector) => {
              const found = div.querySelector(selector);
              if (!found) return null;
              const r = found.getBoundingClientRect();
              return r.width && r.height ? [r.left, r.top, r.right, r.bottom] : null;
            };
            const texts = (selector) => [...div.querySelectorAll(selector)].map(t => t.textContent);
            return {
              kind: div.dataset.kind,
              edges: div.data.map(t => (t.width || []).map((w, i) => +(t.x[i] - w / 2).toPrecision(6))),
              xticks: texts('.xtick text'),
              legend: box('.legend'),
              titles: ['.g-xtitle', '.g-ytitle', '.g-y2title'].map(box).filter(b => b),
              y2range: div._fullLayout.yaxis2 ? div._fullLayout.yaxis2.range : null,
              y2ticks: texts('.y2tick text'),
            };
        })"""
    )
    return {chart["kind"]: chart for chart in charts}


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_an_evaluations_charts_bin_each_point_label_log_axes_and_keep_legends_off_axis_titles(
    page: Any, farm: Farm, evaluation_id: str
) -> None:
    # When the evaluation's page is drawn
    page.goto(f"{farm.api_url}/evaluations/{evaluation_id}", wait_until="networkidle")
    page.wait_for_function("performance.getEntriesByName('charts-drawn').length > 0")
    charts = _charts(page)
    screenshot(page, "first-hour-evaluation")

    # Then the two points' histograms have bin edges of their own, each point many bars
    batch_1, batch_8 = charts["latency"]["edges"]
    assert set(batch_1).isdisjoint(batch_8)
    assert len(batch_1) >= 10 and len(batch_8) >= 10
    # And log axes are labelled with values and units, never bare digits
    assert charts["cdf"]["xticks"] and all(tick.endswith(" ms") for tick in charts["cdf"]["xticks"])
    assert charts["batch"]["xticks"] == ["batch 1", "batch 8"]
    # And the throughput axis starts at zero, and says so
    assert charts["batch"]["y2range"][0] == 0 and charts["batch"]["y2ticks"][0] == "0"
    # And the histogram, its points forty times apart, is read on a log axis labelled in ms
    assert charts["latency"]["xticks"] and all(tick.endswith(" ms") for tick in charts["latency"]["xticks"])
    # And no legend lies over an axis title
    for kind, chart in charts.items():
        assert chart["legend"] and chart["titles"], kind
        assert not any(_overlap(chart["legend"], title) for title in chart["titles"]), kind
