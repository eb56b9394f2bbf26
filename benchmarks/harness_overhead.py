"""What the timed loop itself costs per iteration, measured on a predictor that does nothing.

Compares the wall time per iteration of `timed_loop` around `lambda b: None` with a bare Python
loop that reads `perf_counter_ns` twice around the same no-op, and reports the median latency
the harness records for the no-op. Target: at most 5 µs per iteration.

    python benchmarks/harness_overhead.py [seconds]

Other benchmarks may load this file by path and call `measure_harness_overhead`.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from mlscope.runtime.measure import MeasureSettings, summarize, timed_loop

__all__ = ["TARGET_NS_PER_ITERATION", "measure_harness_overhead"]

TARGET_NS_PER_ITERATION = 5_000


def measure_harness_overhead(seconds: float = 2.0) -> dict[str, Any]:
    """Time the harness on a no-op predictor, then a bare loop of as many iterations.

    Args:
        seconds: how long the timed loop runs (it is both its minimum and maximum duration).

    Returns:
        iterations; harness_ns_per_iteration (timed-loop wall time / iterations, stopping-rule
        checks included); bare_ns_per_iteration; extra_ns_per_iteration (the difference);
        median_recorded_ns (the no-op's median recorded latency); stop_reason; target_ns;
        within_target.
    """

    def noop(batch: Any) -> None:
        return None

    settings = MeasureSettings(
        warmup_count=1000,
        warmup_seconds=min(0.2, seconds / 10),
        min_seconds=seconds,
        max_seconds=seconds,
    )
    loop = timed_loop(noop, [None], settings)
    iterations = int(loop.latencies_ns.size)
    bare_ns = _bare_loop_ns(noop, iterations) / iterations
    harness_ns = loop.wall_ns / iterations
    summary = summarize(loop.latencies_ns, settings)
    return {
        "iterations": iterations,
        "harness_ns_per_iteration": harness_ns,
        "bare_ns_per_iteration": bare_ns,
        "extra_ns_per_iteration": harness_ns - bare_ns,
        "median_recorded_ns": summary.median * 1_000_000,
        "stop_reason": loop.stop_reason,
        "target_ns": TARGET_NS_PER_ITERATION,
        "within_target": harness_ns <= TARGET_NS_PER_ITERATION,
    }


def _bare_loop_ns(noop: Any, iterations: int) -> int:
    clock = time.perf_counter_ns
    batch = None
    started = clock()
    for _ in range(iterations):
        _started = clock()
        noop(batch)
        _ended = clock()
    return clock() - started


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    figures = measure_harness_overhead(seconds)
    verdict = "PASS" if figures["within_target"] else "FAIL"
    print(f"harness overhead on a no-op predictor ({seconds:g} s, stop: {figures['stop_reason']})")
    print(f"  iterations                     {figures['iterations']:>12,}")
    print(f"  timed loop, wall / iteration   {figures['harness_ns_per_iteration']:>12.1f} ns")
    print(f"  bare loop (2 clock reads)      {figures['bare_ns_per_iteration']:>12.1f} ns")
    print(f"  harness cost above bare loop   {figures['extra_ns_per_iteration']:>12.1f} ns")
    print(f"  median recorded no-op latency  {figures['median_recorded_ns']:>12.1f} ns")
    print(f"  target ≤ {figures['target_ns']:,} ns per iteration: {verdict}")


if __name__ == "__main__":
    main()
