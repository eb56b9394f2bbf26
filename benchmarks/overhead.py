"""How much does mlscope's harness add to what it measures?

Prints, in one run on this machine:
  (a) the median latency mlscope reports for ResNet-18, batch 1, ONNX Runtime on the CPU, divided by
      the median of a bare `session.run` loop timed in the same process (target ≤ 1.01). The two
      alternate in rounds so that drift in the machine's load hits both alike;
  (b) the per-iteration cost of the harness on a predictor that does nothing (target ≤ 5 µs).

Usage: python benchmarks/overhead.py [--rounds 4] [--seconds 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from mlscope.contract.job import Job
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.execute import execute
from mlscope.runtime.predictors.inputs import synthetic_batches
from mlscope.runtime.predictors.onnxruntime.export import exported_graph

HERE = Path(__file__).resolve().parent


def bare_session_median_ms(graph: Path, feed: dict[str, np.ndarray], seconds: float) -> float:
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    run = session.run
    for _ in range(10):
        run(None, feed)
    samples = []
    clock = time.perf_counter_ns
    end = clock() + int(seconds * 1e9)
    while True:
        start = clock()
        run(None, feed)
        stop = clock()
        samples.append(stop - start)
        if stop > end:
            break
    return statistics.median(samples) / 1e6


def onnxruntime_job(
    manifest_doc: dict, origin: str, cache_dir: Path, seconds: float, trace_level: str = "NO_TRACE"
) -> Job:
    """Batch 1 on ONNX Runtime's CPU provider, measured for at least `seconds`, one input batch."""
    return Job(
        evaluation_id="bench",
        manifest=manifest_doc,
        origin=origin,
        framework="onnxruntime",
        device="cpu",
        batch_sizes=(1,),
        scenarios=("single_stream",),
        measure={"min_seconds": seconds, "max_seconds": seconds * 3, "stability": 0.005},
        options={"input_pool": 1},
        cache_dir=str(cache_dir),
        trace_level=trace_level,
    )


def mlscope_median_ms(manifest_doc: dict, origin: str, cache_dir: Path, seconds: float) -> float:
    result = execute(onnxruntime_job(manifest_doc, origin, cache_dir, seconds), lambda event: None)
    return float(result["measurements"][0]["latency_ms"]["median"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()

    manifest = ModelRegistry.load().get("resnet18", "onnxruntime")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        graph = exported_graph(manifest, cache)
        feed = synthetic_batches(manifest, 1, 1)[0]
        ours, bare = [], []
        for round_ in range(args.rounds):
            # A B B A ...: whichever goes first alternates, so a drift in the machine cancels out.
            for which in ("mlscope", "bare") if round_ % 2 == 0 else ("bare", "mlscope"):
                if which == "mlscope":
                    ours.append(mlscope_median_ms(manifest.to_dict(), manifest.origin, cache, args.seconds))
                else:
                    bare.append(bare_session_median_ms(graph, feed, args.seconds))
            print(f"round {round_ + 1}: mlscope median {ours[-1]:.3f} ms, bare {bare[-1]:.3f} ms")
    ratio = statistics.median(ours) / statistics.median(bare)
    verdict = "met" if ratio <= 1.01 else "MISSED"
    print(
        f"(a) ResNet-18 b1 ONNX Runtime CPU: mlscope {statistics.median(ours):.3f} ms / bare "
        f"{statistics.median(bare):.3f} ms = {ratio:.4f}  (target ≤ 1.01: {verdict})"
    )

    spec = importlib.util.spec_from_file_location("harness_overhead", HERE / "harness_overhead.py")
    assert spec and spec.loader
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    figures = harness.measure_harness_overhead(seconds=2.0)
    per_iter = figures["harness_ns_per_iteration"] / 1000
    verdict_b = "met" if per_iter <= 5 else "MISSED"
    print(
        f"(b) harness cost on a no-op predictor: {per_iter:.3f} µs per iteration over "
        f"{figures['iterations']:,} iterations; a bare loop of two clock reads costs "
        f"{figures['bare_ns_per_iteration'] / 1000:.3f} µs (target ≤ 5 µs: {verdict_b})"
    )


if __name__ == "__main__":
    main()
