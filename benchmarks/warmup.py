"""Does a warm-up that ends once the latency settles measure what a fixed one does, for less time?

The warm-up ends once `warmup_count` is met and the medians of its last three windows agree within
`warmup_settle` (2%), or after `warmup_seconds` (docs/measuring.md). This benchmark runs each model
with the default (settling) warm-up and with `--measure warmup_settle=0` (the full 0.5 s), in
alternating rounds, and prints for each: the warm-up's iterations and their time (iterations at the
timed median, a lower bound), the median latency with its 95% interval, and per round the ratio of
the settled run's median to the fixed run's. Beside it, the same ratio between two fixed runs of
consecutive rounds: the run-to-run spread a difference must exceed to be the warm-up's.

Models: MobileNetV3-Small exported to ONNX (ONNX Runtime, batch 1) and ResNet-18 (PyTorch, batch 1),
random weights; each timed loop runs at least 1 s. The store and cache are temporary.

Usage: python benchmarks/warmup.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.first_result import make_model  # the same model file as the first-result benchmark

SHORT = ["--min-seconds", "1", "--max-seconds", "5", "--json"]
FIXED = ["--measure", "warmup_settle=0"]


def run(command: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 3):
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    measurement: dict[str, Any] = json.loads(done.stdout.splitlines()[0])["measurements"][0]
    return measurement


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    script = Path(sys.executable).with_name("mlscope")
    mlscope = [str(script)] if script.exists() else [sys.executable, "-m", "mlscope"]
    with tempfile.TemporaryDirectory(prefix="mlscope-warmup-") as tmp:
        folder = Path(tmp)
        make_model(folder / "model.onnx")
        env = {
            **os.environ,
            "MLSCOPE_STORE_URL": f"sqlite:///{folder / 'store.db'}",
            "MLSCOPE_CACHE_DIR": str(folder / "cache"),
            "MLSCOPE_SETTINGS": str(folder / "no-settings.toml"),
        }
        models = {
            "MobileNetV3-Small, onnxruntime, b1": [
                *mlscope,
                "run",
                "./model.onnx",
                "-f",
                "onnxruntime",
                "-b",
                "1",
            ],
            "ResNet-18, pytorch, b1": [*mlscope, "run", "resnet18", "-f", "pytorch", "-b", "1"],
        }
        seen: dict[str, dict[str, list[dict[str, Any]]]] = {m: {"settled": [], "fixed": []} for m in models}
        for _ in range(args.rounds):
            for name, command in models.items():
                seen[name]["settled"].append(run([*command, *SHORT], env, folder))
                seen[name]["fixed"].append(run([*command, *SHORT, *FIXED], env, folder))
    print(f"{args.rounds} rounds, alternating; python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    header = f"{'model':<36} {'warm-up':<8} {'iterations':>10} {'time, ms':>9} {'median ms (95% CI)':<24}"
    print(header + " settled/fixed   fixed/fixed")
    for name, kinds in seen.items():
        ratios = [
            s["latency_ms"]["median"] / f["latency_ms"]["median"]
            for s, f in zip(kinds["settled"], kinds["fixed"], strict=True)
        ]
        spread = [
            b["latency_ms"]["median"] / a["latency_ms"]["median"]
            for a, b in zip(kinds["fixed"], kinds["fixed"][1:], strict=False)
        ]
        for kind, measurements in kinds.items():
            count = statistics.median(m["warmup_count"] for m in measurements)
            spent = statistics.median(m["warmup_count"] * m["latency_ms"]["median"] for m in measurements)
            medians = [m["latency_ms"]["median"] for m in measurements]
            middle = measurements[medians.index(sorted(medians)[len(medians) // 2])]["latency_ms"]
            low, high = middle["median_ci"]
            figure = f"{middle['median']:.2f} ({low:.2f}-{high:.2f})"
            line = f"{name:<36} {kind:<8} {count:>10.0f} {spent:>9.0f} {figure:<24}"
            if kind == "settled":
                line += f" {_range(ratios):<15} {_range(spread)}"
            print(line)


def _range(values: list[float]) -> str:
    if not values:
        return ""
    return f"{statistics.median(values):.3f} ({min(values):.2f}-{max(values):.2f})"


if __name__ == "__main__":
    main()
