"""How long until a user's own ONNX file gives its first result, against a bare script that runs it?

Prints one table, measured in one run on this machine:
  (a) `mlscope run ./model.onnx -f onnxruntime -b 1 --min-seconds 0 --min-count 10 --max-seconds 1
      --json`, the whole process: mlscope's start, the file resolved (its graph read, hashed), the store
      opened, the predictor's own process (import, load, first inference), the measurement (the
      default warm-up: at least 10 inferences, until the latency settles or for 0.5 s, then at least
      10 timed inferences until the figures are stable, for at most 1 s) and the result stored and
      printed;
  (b) a bare script that imports onnxruntime, loads the same file and runs it 10 times;
      alternating with (a) in rounds, the median of each and their ratio (target <= 2); then (a)'s
      parts: the measurement that (b) does not do (the warm-up, as its iterations at the timed median,
      a lower bound, and the timed loop, from the result), (a) without it against (b), and the
      predictor's cold start as the result reports it;
  (c) a second evaluation in the same command, against (b) (target <= 1.5). `mlscope run` takes one
      model, so the second is (c1) the same file evaluated once more (`-f onnxruntime,onnxruntime`: a
      second evaluation, stored apart, in a fresh predictor process of its own), and (c2) a second
      batch size (`-b 1,2`: a second point, measured in the same predictor process); what each adds
      to (a) is the median of the rounds' differences;
  (a0) (a) with the warm-up turned off, against (b): what mlscope costs beside the measurement the
      user asked for (the timed loop still runs to its certificate's minimum);
  (a1) (a) without -f, as the README's first command has it: the frameworks are found from the file,
      so the predictor's process starts before it knows which one it imports;
  (d) the very first run, which also creates the store;
  (e) the CLI's own start: `mlscope --version` and `mlscope --help` against `python -c pass`.

The model is MobileNetV3-Small (torchvision, random weights; about 10 MB) exported here with
torch.onnx's TorchScript exporter, batch axis dynamic. The store and the cache are fresh temporary
directories. A run whose figures are not stable enough to count as valid (exit 3) still counts here:
it is the time to a first result all the same.

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
import warnings
from pathlib import Path
from typing import Any

BARE = """
import sys
import numpy as np
import onnxruntime as ort
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
feed = {i.name: np.random.rand(*[d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
        for i in session.get_inputs()}
for _ in range(10):
    session.run(None, feed)
"""

SHORT = ["--min-seconds", "0", "--min-count", "10", "--max-seconds", "1", "--json"]
NO_WARMUP = ["--measure", "warmup_seconds=0", "--measure", "warmup_count=0"]
TARGET_FIRST = 2.0
TARGET_SECOND = 1.5


def make_model(path: Path) -> None:
    import torch
    import torchvision

    net = torchvision.models.mobilenet_v3_small(weights=None).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net, (torch.randn(1, 3, 224, 224),), str(path), input_names=["image"], output_names=["logits"],
            dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False,
        )  # fmt: skip


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """The command's wall-clock time and its stdout; exit 0, or 3 for a run whose result is not valid."""
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 3):
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    script = Path(sys.executable).with_name("mlscope")  # the command users type, beside this Python
    mlscope = [str(script)] if script.exists() else [sys.executable, "-m", "mlscope"]
    with tempfile.TemporaryDirectory(prefix="mlscope-first-result-") as tmp:
        folder = Path(tmp)
        make_model(folder / "model.onnx")
        size_mb = (folder / "model.onnx").stat().st_size / 2**20
        env = {
            # An installed package has its bytecode: this machine's PYTHONDONTWRITEBYTECODE would have
            # every run compile mlscope afresh.
            **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
            "MLSCOPE_STORE_URL": f"sqlite:///{folder / 'store.db'}",
            "MLSCOPE_CACHE_DIR": str(folder / "cache"),
            "MLSCOPE_SETTINGS": str(folder / "no-settings.toml"),
        }
        run = [*mlscope, "run", "./model.onnx", *SHORT]
        commands = {
            "a": [*run, "-f", "onnxruntime", "-b", "1"],
            "b": [sys.executable, "-c", BARE, "model.onnx"],
            "a0": [*run, "-f", "onnxruntime", "-b", "1", *NO_WARMUP],
            "a1": [*run, "-b", "1"],
            "c1": [*run, "-f", "onnxruntime,onnxruntime", "-b", "1"],
            "c2": [*run, "-f", "onnxruntime", "-b", "1,2"],
        }
        first, _ = timed(commands["a"], env, folder)
        times: dict[str, list[float]] = {name: [] for name in commands}
        results: list[dict[str, Any]] = []
        for _ in range(args.rounds):
            for name, command in commands.items():
                elapsed, out = timed(command, env, folder)
                times[name].append(elapsed)
                if name == "a":
                    results.append(json.loads(out.splitlines()[0]))
        cli = _cli_start(mlscope, env, max(args.rounds, 5))
    print(
        f"model: MobileNetV3-Small, random weights, exported to ONNX ({size_mb:.1f} MB), batch 1, CPU; "
        f"{args.rounds} rounds, alternating; python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    _table(times, results, first, cli)


def _cli_start(mlscope: list[str], env: dict[str, str], rounds: int) -> dict[str, list[float]]:
    """(e): each command's wall-clock time, alternating with a bare interpreter's, in rounds."""
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "mlscope --version": [*mlscope, "--version"],
        "mlscope --help": [*mlscope, "--help"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            times[name].append(timed(command, env, Path.cwd())[0])
    return times


def _table(
    times: dict[str, list[float]], results: list[dict[str, Any]], first: float, cli: dict[str, list[float]]
) -> None:
    rows: list[tuple[str, str, str, str]] = []  # what, median (min-max), ratio, target

    def row(
        what: str, values: list[float] | float | None = None, ratio: float | None = None, target: str = ""
    ) -> None:
        if isinstance(values, list):
            figure = f"{statistics.median(values):.3f} s ({min(values):.2f}-{max(values):.2f})"
        elif isinstance(values, float):
            figure = f"{values:.3f} s"
        else:
            figure = ""
        rows.append((what, figure, f"{ratio:.2f}" if ratio is not None else "", target))

    a, b = times["a"], times["b"]
    bare = statistics.median(b)
    # The warm-up's time is not in the result: its iterations at the timed median are a lower bound.
    measured = [
        sum(
            m["duration_s"] + m["warmup_count"] * m["latency_ms"]["median"] / 1000
            for m in result["measurements"]
        )
        for result in results
    ]
    rest = [total - measure for total, measure in zip(a, measured, strict=True)]
    cold = [result["cold_start"] for result in results]
    valid = sum(all(m["validity"]["valid"] for m in r["measurements"]) for r in results)
    row("(a) mlscope run ./model.onnx -f onnxruntime -b 1 (short)", a, statistics.median(a) / bare, "<= 2")
    row("(b) bare script: import onnxruntime, load, 10 runs", b)
    row("    (a)'s measurement: warm-up (its iterations at the median) + timed loop", measured)
    row("    (a) without its measurement, against (b)", rest, statistics.median(rest) / bare)
    row(
        "    (a)'s predictor cold start, ms: import {:.0f}, load {:.0f}, first inference {:.1f}".format(
            *(
                statistics.median(c[key] for c in cold)
                for key in ("import_ms", "load_ms", "first_inference_ms")
            )
        )
    )
    row(f"    (a)'s results valid: {valid} of {len(results)}")
    row("(a0) (a) with no warm-up: --measure warmup_seconds=0, warmup_count=0", times["a0"],
        statistics.median(times["a0"]) / bare)  # fmt: skip
    row("(a1) (a) without -f: the frameworks found from the file (ONNX Runtime)", times["a1"],
        statistics.median(times["a1"]) / bare)  # fmt: skip
    for name, what in (
        ("c1", "(c1) a second evaluation: -f onnxruntime,onnxruntime"),
        ("c2", "(c2) a second batch size: -b 1,2"),
    ):
        added = [both - one for both, one in zip(times[name], a, strict=True)]
        row(what, times[name])
        row("     what it adds to (a), against (b)", added, statistics.median(added) / bare, "<= 1.5")
    row("(d) the very first run, which also creates the store", first)
    bare_start = statistics.median(cli["python -c pass"])
    for name, values in cli.items():
        mine = name != "python -c pass"
        row(
            f"(e) {name}",
            values,
            statistics.median(values) / bare_start if mine else None,
            "<= 0.10 s" * mine,
        )
    width = max(len(r[0]) for r in rows)
    print(f"{'':<{width}}  {'median (min-max)':<24} {'ratio':>6}  target")
    for what, figure, ratio, target in rows:
        print(f"{what:<{width}}  {figure:<24} {ratio:>6}  {target}".rstrip())


if __name__ == "__main__":
    main()
