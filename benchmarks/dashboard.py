"""The dashboard's two targets, measured on this machine in one run:

1. The evaluation page of an evaluation with 10 points and a 50,000-span trace renders in headless
   Chromium in under 1 s: the browser's own performance timing, from navigation start to the load
   event, to the first screen drawn with its charts (the page's "first-screen-drawn" mark) and to the
   last chart drawn (the charts below the first screen are drawn while the browser is idle:
   "charts-drawn"). The viewport is 1280 x 720.
2. The comparison page over 10,000 stored evaluations answers in under 300 ms server-side: the
   median time of a GET of /compare (the HTML page, its chart and table) and of /api/v1/compare (the
   JSON it is built from) measured at the client on loopback, after one warm-up call.

The store is SQLite in a temporary directory (or --store-url, e.g. a PostgreSQL database of yours),
filled with the seeded evaluations of benchmarks/_store_fill.py; the API is `mlscope api` in a
process of its own, on settings of its own; Chromium is the system's (Debian's chromium), driven by
Playwright.

    .venv/bin/python benchmarks/dashboard.py [--evaluations 10000] [--spans 50000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import requests
from _store_fill import Evaluations, SQLiteBackend, _point, fill
from store_scale import Api

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from mlscope.store import open_store  # noqa: E402
from tests.fixtures.browser import CHROMIUM_ARGS, chromium_path  # noqa: E402

PAGE_TARGET_MS = 1000.0
COMPARE_TARGET_MS = 300.0
LAYERS_PER_INFERENCE = 960
PROFILED_INFERENCES = 5


def ten_point_evaluation(evaluations: Evaluations) -> dict[str, Any]:
    """A succeeded evaluation with 10 points: batch sizes 1..16 in single_stream and offline, each with
    1,000 raw latencies."""
    document = next(d for d in evaluations.take(20) if d["status"] == "succeeded")
    rng = np.random.default_rng(7)
    points = []
    for scenario in ("single_stream", "offline"):
        for batch_size in (1, 2, 4, 8, 16):
            raw = (4e6 * batch_size**0.8 * np.exp(0.08 * rng.standard_normal(1000))).astype(np.int64)
            ms = np.sort(raw) / 1e6
            q = np.percentile(ms, [25, 50, 75, 90, 95, 99, 99.9])
            point = _point(batch_size, raw, q, float(ms.mean()), float(ms.std(ddof=1)))
            point["scenario"] = scenario
            points.append(point)
    document["measurements"] = points
    document["id"] = "d" * 32
    document["trace_level"] = "FRAMEWORK"
    document["trace_id"] = "a" * 32
    document["request"] = {**document["request"], "batch_sizes": [1, 2, 4, 8, 16]}
    return document


def trace_spans(document: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """About `count` spans in the shape a framework-level trace has: a run, one measure span per point
    with its timed inferences (MODEL), and a profiled pass per point whose inferences hold a span per
    layer (FRAMEWORK)."""
    trace_id = document["trace_id"]
    spans: list[dict[str, Any]] = []
    serial = iter(range(1, 10**9))

    def span(name: str, level: str, parent: str | None, start: int, end: int, **attributes: Any) -> str:
        span_id = f"{next(serial):016x}"
        spans.append(
            {
                "trace_id": trace_id,
                "span_id": span_id,
                "parent_id": parent,
                "name": name,
                "level": level,
                "start_ns": start,
                "end_ns": end,
                "attributes": attributes,
            }
        )
        return span_id

    t0 = 1_795_000_000_000_000_000
    points = document["measurements"]
    per_point = count // len(points)
    timed = max(1, per_point - PROFILED_INFERENCES * (LAYERS_PER_INFERENCE + 1) - 2)
    root = span("run", "APPLICATION", None, t0, t0 + 10**12, **{"mlscope.process": "cli"})
    clock = t0 + 1000
    for point in points:
        batch, scenario = point["batch_size"], point["scenario"]
        step = int(point["latency_ms"]["median"] * 1e6)
        measure = span("measure", "APPLICATION", root, clock, clock + step * timed, batch_size=batch)
        for i in range(timed):
            span("inference", "MODEL", measure, clock, clock + step, batch_size=batch, iteration=i,
                 scenario=scenario, **{"pass": "MODEL"})  # fmt: skip
            clock += step
        layer_ns = step // LAYERS_PER_INFERENCE
        profile_end = clock + step * PROFILED_INFERENCES
        profile = span("profile FRAMEWORK", "APPLICATION", root, clock, profile_end, batch_size=batch)
        for i in range(PROFILED_INFERENCES):
            inference = span("inference", "MODEL", profile, clock, clock + step, batch_size=batch,
                             iteration=i, **{"pass": "FRAMEWORK"})  # fmt: skip
            for layer in range(LAYERS_PER_INFERENCE):
                start = clock + layer * layer_ns
                name = f"/layer{layer % 120}/Conv_{layer}"
                span(name, "FRAMEWORK", inference, start, start + layer_ns, batch_size=batch, layer=name,
                     **{"pass": "FRAMEWORK"})  # fmt: skip
            clock += step
    return spans


def page_timing(url: str) -> dict[str, float]:
    """Load `url` in a fresh headless Chromium; the browser's own timing of it, in ms."""
    from playwright.sync_api import sync_playwright

    chromium = chromium_path()
    if chromium is None:
        raise SystemExit("no chromium here: install Debian's chromium (make test does)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(url, wait_until="load")
            page.wait_for_function("performance.getEntriesByName('charts-drawn').length > 0", timeout=30_000)
            timing = page.evaluate(
                """() => {
                    const nav = performance.getEntriesByType('navigation')[0];
                    const drawn = performance.getEntriesByName('charts-drawn')[0];
                    const first = performance.getEntriesByName('first-screen-drawn')[0];
                    return {response_end: nav.responseEnd, dom_content_loaded: nav.domContentLoadedEventEnd,
                            load: nav.loadEventEnd, first_screen: first.startTime,
                            charts_drawn: drawn.startTime,
                            transfer_kb: performance.getEntriesByType('resource')
                                .reduce((s, r) => s + r.transferSize, nav.transferSize) / 1024,
                            charts: document.querySelectorAll('.js-plotly-plot').length};
                }"""
            )
            if errors:
                raise SystemExit(f"the page raised: {errors}")
            return timing
        finally:
            browser.close()


def timed_get(session: requests.Session, url: str, params: dict[str, Any], repeat: int) -> tuple[float, int]:
    """The median ms of `repeat` GETs after a warm-up, and the response's size in bytes."""
    response = session.get(url, params=params, timeout=120)
    response.raise_for_status()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = session.get(url, params=params, timeout=120)
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    return statistics.median(times), len(response.content)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--evaluations", type=int, default=10_000, help="stored evaluations for /compare")
    parser.add_argument("--spans", type=int, default=50_000, help="spans in the evaluation page's trace")
    parser.add_argument("--repeat", type=int, default=7, help="timed calls of each comparison")
    parser.add_argument(
        "--page-loads", type=int, default=3, help="fresh browser loads of the evaluation page"
    )
    parser.add_argument("--store-url", help="a store to fill instead of SQLite in a temporary directory")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mlscope-dashboard-bench-") as tmp_name:
        tmp = Path(tmp_name)
        store_url = args.store_url or SQLiteBackend(tmp).url
        evaluations = Evaluations(now=datetime.now(timezone.utc))
        store = open_store(store_url)
        started = time.perf_counter()
        document = ten_point_evaluation(evaluations)
        fill(store, [document])
        spans = trace_spans(document, args.spans)
        store.save_spans(document["id"], spans)
        while evaluations.made < args.evaluations:
            fill(store, evaluations.take(min(2000, args.evaluations - evaluations.made)))
        total = store.count_evaluations()
        store.close()
        print(f"store: {total:,} evaluations, {len(spans):,} spans in one trace "
              f"(filled in {time.perf_counter() - started:.1f} s; {store_url.split(':')[0]})")  # fmt: skip

        api = Api(store_url, tmp, rss_limit_mb=4000, call_timeout_s=120)
        try:
            report_page(api.url, document["id"], len(spans), args.page_loads)
            report_compare(api.url, total, args.repeat)
        finally:
            api.stop()


def report_page(url: str, evaluation_id: str, spans: int, loads: int) -> None:
    timings = [page_timing(f"{url}/evaluations/{evaluation_id}") for _ in range(loads)]
    print(f"\n1. evaluation page, 10 points, {spans:,}-span trace, headless Chromium ({loads} fresh loads; "
          "ms from navigation start)")  # fmt: skip
    print(f"   {'load':>4} {'response end':>13} {'DOM ready':>10} {'load event':>11} {'first screen':>13} "
          f"{'all charts':>11} {'charts':>7} {'transfer KB':>12}")  # fmt: skip
    for i, t in enumerate(timings, 1):
        print(f"   {i:>4} {t['response_end']:>13.0f} {t['dom_content_loaded']:>10.0f} {t['load']:>11.0f} "
              f"{t['first_screen']:>13.0f} {t['charts_drawn']:>11.0f} {t['charts']:>7} "
              f"{t['transfer_kb']:>12.0f}")  # fmt: skip
    for label, key in (("first screen drawn (the page as first seen)", "first_screen"),
                       ("every chart drawn (the last while idle)", "charts_drawn")):  # fmt: skip
        value = statistics.median(t[key] for t in timings)
        verdict = "met" if value < PAGE_TARGET_MS else "MISSED"
        print(f"   median {label}: {value:.0f} ms, target < {PAGE_TARGET_MS:.0f} ms {verdict}")


def report_compare(url: str, total: int, repeat: int) -> None:
    session = requests.Session()
    some = {"models": "resnet50,bert_base,gpt2", "frameworks": "pytorch,onnxruntime,tensorflow"}
    print(f"\n2. comparison over {total:,} stored evaluations (median of {repeat} GETs, ms)")
    for label, path, params in (
        ("page, 3 models x 3 frameworks", "/compare", some),
        ("JSON, 3 models x 3 frameworks", "/api/v1/compare", some),
        ("page, 1 model, every framework", "/compare", {"models": "resnet50"}),
        ("JSON, 1 model, every framework", "/api/v1/compare", {"models": "resnet50"}),
    ):
        ms, size = timed_get(session, url + path, params, repeat)
        verdict = "met" if ms < COMPARE_TARGET_MS else "MISSED"
        print(f"   {label:<32} {ms:>8.1f} ms  {size / 1024:>7.0f} KB  "
              f"target < {COMPARE_TARGET_MS:.0f} ms {verdict}")  # fmt: skip


if __name__ == "__main__":
    main()
