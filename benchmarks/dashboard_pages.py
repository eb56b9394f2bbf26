"""The dashboard's pages: how long the server takes to render each, and how much it sends.

A SQLite store in a temporary directory gets --evaluations succeeded evaluations (two single_stream
points each, realistic summaries) and one large one: two points of --raw raw latencies each and a
stored trace of --spans spans (APPLICATION phases, MODEL inferences, FRAMEWORK layers). Each page is
then rendered through the real app (Flask's test client, in this process: the figures are the
server's work, without a network): the first request (for the large evaluation, the one that reads
its trace; later views of an unchanged trace come from the page's cache), then --repeat more (median
and max, in ms), and the page's size (and gzipped). plotly.min.js is served too: its size as sent
plain and gzipped, and the time of the first request (which reads and compresses it) and of a later
one (from memory).

Targets: every page ≤ 500 ms (the first view of a large trace excepted: it reads every span) and
≤ 1 MB with a 50,000-span trace and 100,000 latencies per point; a trace page ships at most 2,000
spans. Nothing is asserted; a figure over its target is marked "!".

Needs Redis at 127.0.0.1:6379 for the broker setting (database 15; the overview reads queue depths
from it and shows an error in their place without it). It never opens the user's store or settings.

Usage: python benchmarks/dashboard_pages.py [--evaluations 200] [--raw 100000] [--spans 50000]
           [--repeat 5]
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _store_fill import _point  # noqa: E402

from tests.contract.builders import submit  # noqa: E402

PAGE_TARGET_MS = 500.0
PAGE_TARGET_BYTES = 1024 * 1024


def _measurement(batch_size: int, median: float, raw: int, rng: np.random.Generator) -> dict[str, Any]:
    """A single_stream point of `raw` lognormal latencies around `median` ms (the shape of
    benchmarks/_store_fill.py's points)."""
    latencies = rng.lognormal(np.log(median * 1e6), 0.15, size=raw).astype(np.int64)
    ms = np.sort(latencies) / 1e6
    quantiles = np.percentile(ms, [25, 50, 75, 90, 95, 99, 99.9])
    return _point(batch_size, latencies, quantiles, float(ms.mean()), float(ms.std()))


def _evaluation(
    store: Any, model: str, framework: str, system: int, raw: int, rng: np.random.Generator
) -> str:
    evaluation_id = submit(store, model=model, framework=framework)
    store.start_evaluation(evaluation_id)
    store.finish_evaluation(
        evaluation_id,
        system={"id": f"sys-{system}", "hostname": f"host-{system}", "agent": {"id": f"agent-{system}"}},
        framework={"name": framework, "version": "1.0"},
        cold_start={"import_ms": 800.0, "load_ms": 90.0, "first_inference_ms": 12.0},
        measurements=[_measurement(size, 2.0 * size * (1 + system / 10), raw, rng) for size in (1, 8)],
    )
    return evaluation_id


def _spans(count: int) -> list[dict[str, Any]]:
    trace_id, spans, start = "ab" * 16, [], 1_000_000
    phases = ("queue_wait", "load", "preprocess", "predict", "postprocess")
    for index in range(count):
        level = "APPLICATION" if index < len(phases) else ("MODEL" if index % 20 == 0 else "FRAMEWORK")
        name = (
            phases[index]
            if index < len(phases)
            else ("inference" if level == "MODEL" else f"layer{index % 30}")
        )
        length = 50_000 + (index * 7919) % 400_000
        spans.append(
            {
                "trace_id": trace_id,
                "span_id": f"{index + 1:016x}",
                "parent_id": None,
                "name": name,
                "level": level,
                "start_ns": start + index * 10_000,
                "end_ns": start + index * 10_000 + length,
                "attributes": {"layer_type": f"Conv{index % 6}", "batch_size": 1 + (index % 2) * 7},
            }
        )
    return spans


def _timed(
    http: Any, url: str, repeat: int, headers: dict[str, str] | None = None
) -> tuple[float, list[float], Any]:
    """The first request's time, then `repeat` more, in ms, and the last response."""
    times = []
    for _ in range(repeat + 1):
        began = time.perf_counter()
        response = http.get(url, headers=headers or {})
        times.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return times[0], times[1:], response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=200)
    parser.add_argument("--raw", type=int, default=100_000)
    parser.add_argument("--spans", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mlscope-dashboard-bench-") as tmp:
        os.environ.update(
            {
                "MLSCOPE_STORE_URL": f"sqlite:///{Path(tmp) / 'store.db'}",
                "MLSCOPE_BROKER_URL": "redis://127.0.0.1:6379/15",
                "MLSCOPE_CACHE_DIR": str(Path(tmp) / "cache"),
                "MLSCOPE_SETTINGS": str(Path(tmp) / "no-settings.toml"),
            }
        )
        from mlscope.api import create_app
        from mlscope.api.dashboard import assets

        app = create_app()
        store = app.extensions["mlscope"].store
        rng = np.random.default_rng(0)
        began = time.perf_counter()
        models, frameworks = ("resnet18", "resnet50", "mobilenet_v2", "bert"), ("pytorch", "onnxruntime")
        for index in range(args.evaluations):
            _evaluation(store, models[index % 4], frameworks[index % 2], index % 5, 50, rng)
        large = _evaluation(store, "resnet50", "pytorch", 9, args.raw, rng)
        store.save_spans(large, _spans(args.spans))
        filled_s = time.perf_counter() - began
        print(f"filled: {args.evaluations + 1} evaluations, {args.spans:,} spans in {filled_s:.1f} s")

        http = app.test_client()
        pages = [
            ("overview /", "/"),
            ("evaluations", "/evaluations"),
            (f"evaluation ({args.raw:,} latencies/point, {args.spans:,} spans)", f"/evaluations/{large}"),
            (
                f"its trace section ({args.spans:,} spans; cached after the first)",
                f"/evaluations/{large}/trace-view",
            ),
            ("compare (every model)", "/compare"),
            (
                "compare (2 models × 2 frameworks)",
                "/compare?models=resnet18,resnet50&frameworks=pytorch,onnxruntime",
            ),
            ("models", "/models"),
            ("submit", "/submit"),
        ]
        print(f"\n{'page':<58} {'first ms':>9} {'median ms':>10} {'max ms':>9} {'bytes':>10} {'gzipped':>9}")
        for label, url in pages:
            first_ms, times, response = _timed(http, url, args.repeat)
            body = response.get_data()
            median = statistics.median(times)
            slow = median > PAGE_TARGET_MS
            flag = "!" if slow or len(body) > PAGE_TARGET_BYTES else ""
            print(
                f"{label:<58} {first_ms:>9.1f} {median:>10.1f} {max(times):>9.1f} {len(body):>10,} "
                f"{len(gzip.compress(body)):>9,} {flag}"
            )

        assets._plotly = None  # the first request reads and compresses it
        began = time.perf_counter()
        first = http.get("/static/vendor/plotly.min.js", headers={"Accept-Encoding": "gzip"})
        first_ms = (time.perf_counter() - began) * 1000
        _, later, zipped = _timed(
            http, "/static/vendor/plotly.min.js", args.repeat, {"Accept-Encoding": "gzip"}
        )
        plain = http.get("/static/vendor/plotly.min.js", headers={"Accept-Encoding": "identity"})
        assert first.status_code == 200
        print(
            f"\nplotly.js ({assets.plotly_js_url()}): {len(plain.get_data()):,} bytes plain, "
            f"{len(zipped.get_data()):,} gzipped; first request {first_ms:.0f} ms (read + compress), "
            f"later {statistics.median(later):.1f} ms"
        )
        store.close()
        app.extensions["mlscope"].agents.close()


if __name__ == "__main__":
    main()
