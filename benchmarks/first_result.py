"""How long until a user's own ONNX file gives its first result?

Prints, in one run on this machine, the wall-clock time of
  (a) `mlscope run ./model.onnx` with the shortest measurement (one timed inference, no warm-up):
      a cold process that imports mlscope, resolves the file (reads the graph, hashes it), opens the
      store, captures the system, runs the predictor in its child process and stores the result;
  (b) a bare script that imports onnxruntime, loads the same file and runs it once;
alternating in rounds so that the machine's load hits both alike, and their ratio (target ≤ 2).
Also (c) the same `mlscope run` with the default measurement settings, for scale, and (d) the very
first run, which also creates the store. Then (e) the CLI's own start: `mlscope --version`, `--help` and
`run --help` against `python -c pass`, alternating, median of the rounds (target for the three
<= 0.1 s).

The model is a small CNN made here with torch.onnx.export (about 1 MB). The store and cache are
fresh temporary directories.

Usage: python benchmarks/first_result.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE = """
import sys
import numpy as np
import onnxruntime as ort
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
feed = {i.name: np.random.rand(*[d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
        for i in session.get_inputs()}
print(session.run(None, feed)[0].shape)
"""

SHORTEST = [
    "--min-count",
    "1",
    "--min-seconds",
    "0",
    "--measure",
    "warmup_count=0",
    "--measure",
    "warmup_seconds=0",
]


def make_model(path: Path) -> None:
    import torch

    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, stride=2), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 1000),
    ).eval()  # fmt: skip
    torch.onnx.export(
        net, (torch.randn(1, 3, 224, 224),), str(path), input_names=["image"], output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False,
    )  # fmt: skip


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlscope-first-result-") as tmp:
        folder = Path(tmp)
        make_model(folder / "model.onnx")
        size_kb = (folder / "model.onnx").stat().st_size / 1024
        env = {
            **os.environ,
            "MLSCOPE_STORE_URL": f"sqlite:///{folder / 'store.db'}",
            "MLSCOPE_CACHE_DIR": str(folder / "cache"),
            "MLSCOPE_SETTINGS": str(folder / "no-settings.toml"),
        }
        mlscope = [sys.executable, "-m", "mlscope", "run", "./model.onnx", "--json"]
        bare = [sys.executable, "-c", BARE, "model.onnx"]
        first, _ = timed(mlscope + SHORTEST, env, folder)
        ours: list[float] = []
        theirs: list[float] = []
        cold: list[dict] = []
        for _ in range(args.rounds):
            elapsed, out = timed(mlscope + SHORTEST, env, folder)
            ours.append(elapsed)
            cold.append(json.loads(out.splitlines()[0])["cold_start"])
            theirs.append(timed(bare, env, folder)[0])
        default, _ = timed(mlscope, env, folder)
    median_ours, median_theirs = statistics.median(ours), statistics.median(theirs)
    print(f"model: a small CNN exported to ONNX ({size_kb:.0f} kB), batch 1, CPU")
    print(f"rounds: {args.rounds}, alternating; python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"(a) mlscope run ./model.onnx (shortest measurement): median {median_ours:.2f} s  {_spread(ours)}")
    print(
        f"(b) bare onnxruntime script, load + one run:        median {median_theirs:.2f} s  {_spread(theirs)}"
    )
    print(f"ratio (a)/(b): {median_ours / median_theirs:.2f}  (target <= 2)")
    print(
        "    inside (a), the predictor's own cold start (median): import "
        f"{statistics.median(c['import_ms'] for c in cold):.0f} ms, load "
        f"{statistics.median(c['load_ms'] for c in cold):.0f} ms, first inference "
        f"{statistics.median(c['first_inference_ms'] for c in cold):.1f} ms"
    )
    print(f"(c) mlscope run ./model.onnx, default measurement (>= 2 s timed): {default:.2f} s")
    print(f"(d) the very first run, which also creates the store: {first:.2f} s")
    script = Path(sys.executable).with_name("mlscope")  # the command users type, beside this Python
    _cli_start([str(script)] if script.exists() else mlscope[:3], env, args.rounds)


def _cli_start(mlscope: list[str], env: dict[str, str], rounds: int) -> None:
    """(e): the CLI's start, each command against a bare interpreter, alternating."""
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "mlscope --version": [*mlscope, "--version"],
        "mlscope --help": [*mlscope, "--help"],
        "mlscope run --help": [*mlscope, "run", "--help"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(max(rounds, 5)):
        for name, command in commands.items():
            times[name].append(timed(command, env, Path.cwd())[0])
    print("(e) the CLI's start (median of the rounds; target <= 0.10 s):")
    for name, values in times.items():
        print(f"    {name:<20} {statistics.median(values):.3f} s  {_spread(values)}")


def _spread(values: list[float]) -> str:
    return f"(min {min(values):.2f}, max {max(values):.2f})"


if __name__ == "__main__":
    main()
