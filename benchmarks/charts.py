"""How long the chart builders (mlscope.analysis.chart_builders) and the file writers
(mlscope.analysis.chart_render) take on large inputs: a trace of `--spans` spans on three levels
drawn as a timeline of its `--max-spans` longest (the target: under 0.2 s for 50,000 spans), a
latency histogram and a CDF of two points of `--latencies` raw latencies each, and that timeline
written as PNG, SVG and HTML. Each figure is the median of `--repeat` runs. Prints the figures;
nothing is asserted.

    python benchmarks/charts.py [--spans 50000] [--max-spans 2000] [--latencies 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlscope.analysis.chart_builders import latency_cdf, latency_histogram, timeline
from mlscope.analysis.chart_render import write_chart

T0 = 1_700_000_000_000_000_000


def spans(n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """n spans in the store's shape: starts spread over 10 s, log-normal durations around 50 µs."""
    starts = np.sort(rng.integers(0, 10_000_000_000, size=n))
    durations = rng.lognormal(np.log(50_000), 1.5, size=n).astype(np.int64) + 1
    levels = ("MODEL", "FRAMEWORK", "LIBRARY")
    return [
        {
            "trace_id": "t" * 32,
            "span_id": f"{i:016x}",
            "parent_id": None,
            "name": f"op{i % 97}",
            "level": levels[i % 3],
            "start_ns": T0 + int(start),
            "end_ns": T0 + int(start + duration),
            "attributes": {"batch_size": 1, "thread": i % 2} if i % 3 == 2 else {"batch_size": 1},
        }
        for i, (start, duration) in enumerate(zip(starts, durations, strict=True))
    ]


def evaluation(latencies: int, rng: np.random.Generator) -> dict[str, Any]:
    def point(batch_size: int, scale: float) -> dict[str, Any]:
        raw = (rng.gamma(9.0, scale, size=latencies) * 1e6).astype(np.int64)
        return {
            "scenario": "single_stream",
            "batch_size": batch_size,
            "latency_ms": {"median": float(np.median(raw)) / 1e6, "count": latencies},
            "validity": {"valid": True, "reasons": []},
            "latencies_ns": raw.tolist(),
        }

    return {
        "id": "bench",
        "status": "succeeded",
        "model": {"name": "bench"},
        "framework": {"name": "numpy"},
        "measurements": [point(1, 0.25), point(8, 0.5)],
    }


def median_s(call: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=50_000)
    parser.add_argument("--max-spans", type=int, default=2000)
    parser.add_argument("--latencies", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    trace = spans(args.spans, rng)
    result = evaluation(args.latencies, rng)
    chart = timeline(trace, max_spans=args.max_spans)
    print(f"timeline of {args.spans:,} spans, the {args.max_spans:,} longest kept")
    build = median_s(lambda: timeline(trace, max_spans=args.max_spans), args.repeat)
    print(f"  build                 {build:8.3f} s")
    print(f"latency charts of 2 points × {args.latencies:,} raw latencies")
    print(f"  histogram             {median_s(lambda: latency_histogram(result), args.repeat):8.3f} s")
    print(f"  cdf                   {median_s(lambda: latency_cdf(result), args.repeat):8.3f} s")
    with tempfile.TemporaryDirectory() as folder:
        print(f"the timeline ({args.max_spans:,} bars) written as")
        for suffix in ("png", "svg", "html"):
            path = Path(folder) / f"timeline.{suffix}"
            seconds = median_s(lambda path=path: write_chart(chart, path), max(1, args.repeat // 2))
            print(f"  {suffix:<5} {path.stat().st_size / 1e6:8.2f} MB  {seconds:8.3f} s")


if __name__ == "__main__":
    main()
