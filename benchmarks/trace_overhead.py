"""What does tracing cost?

Prints, in one run on this machine:
  (a) the median latency mlscope reports for ResNet-18, batch 1, ONNX Runtime on the CPU when traced at
      MODEL level (one span per inference) divided by the median with NO_TRACE (target ≤ 1.02). The
      two alternate in rounds so that drift in the machine's load hits both alike;
  (b) how long the profiled passes of deeper levels add to an evaluation (FRAMEWORK, LIBRARY and
      HARDWARE passes, each run once after the measured pass), and how many spans each brings.

Usage: python benchmarks/trace_overhead.py [--rounds 4] [--seconds 3] [--model resnet18]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from mlscope.registry.models import ModelRegistry
from mlscope.runtime.execute import execute
from mlscope.runtime.predictors.onnxruntime.export import exported_graph

# The job is the one benchmarks/overhead.py measures, with a trace level.
_spec = importlib.util.spec_from_file_location("overhead", Path(__file__).resolve().parent / "overhead.py")
assert _spec and _spec.loader
overhead = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(overhead)


def run(manifest_doc: dict, origin: str, cache_dir: Path, seconds: float, level: str) -> dict[str, Any]:
    return execute(
        overhead.onnxruntime_job(manifest_doc, origin, cache_dir, seconds, level), lambda event: None
    )


def median_ms(result: dict[str, Any]) -> float:
    return float(result["measurements"][0]["latency_ms"]["median"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--model", default="resnet18")
    args = parser.parse_args()

    manifest = ModelRegistry.load().get(args.model, "onnxruntime")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        exported_graph(manifest, cache)
        untraced, traced = [], []
        model_spans = 0
        for round_ in range(args.rounds):
            # A B B A ...: whichever goes first alternates, so a drift in the machine cancels out.
            for level in ("NO_TRACE", "MODEL") if round_ % 2 == 0 else ("MODEL", "NO_TRACE"):
                result = run(manifest.to_dict(), manifest.origin, cache, args.seconds, level)
                if level == "MODEL":
                    traced.append(median_ms(result))
                    model_spans = sum(1 for s in result["trace"]["spans"] if s["level"] == "MODEL")
                else:
                    untraced.append(median_ms(result))
            print(f"round {round_ + 1}: NO_TRACE median {untraced[-1]:.3f} ms, MODEL {traced[-1]:.3f} ms")
        ratio = statistics.median(traced) / statistics.median(untraced)
        verdict = "met" if ratio <= 1.02 else "MISSED"
        print(
            f"(a) {args.model} b1 ONNX Runtime CPU: MODEL {statistics.median(traced):.3f} ms / NO_TRACE "
            f"{statistics.median(untraced):.3f} ms = {ratio:.4f}  (target ≤ 1.02: {verdict}); "
            f"{model_spans} inference spans in the last MODEL run"
        )

        for level in ("APPLICATION", "FRAMEWORK", "LIBRARY", "HARDWARE"):
            started = time.perf_counter()
            result = run(manifest.to_dict(), manifest.origin, cache, args.seconds, level)
            wall = time.perf_counter() - started
            spans = result["trace"]["spans"]
            passes = {
                s["attributes"]["pass"]: (s["end_ns"] - s["start_ns"]) / 1e9
                for s in spans
                if s["name"].startswith("profile ")
            }
            counts = Counter(s["level"] for s in spans)
            print(
                f"(b) {level:<11} job {wall:6.2f} s; passes: "
                + (", ".join(f"{name} {seconds:.3f} s" for name, seconds in passes.items()) or "none")
                + "; spans: "
                + ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))
            )


if __name__ == "__main__":
    main()
