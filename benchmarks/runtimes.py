"""The same networks on every runtime mlscope has here, side by side: what a user came to compare.

For ResNet-50, MobileNetV3-Small and a BERT-base-sized encoder at batch 1 and 8 on this CPU, each
runtime row is one `mlscope run MODEL -f FRAMEWORK [--option ...] -b 1,8 --check-parity
--parity-against REFERENCE --json` in a process of its own, as a user would type it, and prints:

- the median latency with its 95% interval, and whether the point is valid (the run's own verdict:
  a point measured while other work used the CPUs says so rather than hiding it);
- the parity verdict against the runtime its graph or weights came from (PyTorch for ONNX Runtime,
  compiled PyTorch and JAX; ONNX Runtime for OpenVINO, which reads the same graph; TensorFlow for
  LiteRT); TensorFlow's networks are Keras's, with weights of their own, so it has no reference here;
- the cold start: the framework's import, the model's load and, for compiled runtimes, the compile.

Then the tiny decoder (the catalogue's 4-layer Llama) under the generate scenario, in process: TTFT
and TPOT medians under transformers (PyTorch) and llama.cpp at f16 and q8_0.

A runtime that is not installed, or that has no manifest for a model, gets a row saying so: the table
shows what could not be measured as well as what was.

    python benchmarks/runtimes.py [--models resnet50,mobilenet_v3_small,bert_base]
                                  [--runtimes LABEL,...] [--batch-sizes 1,8] [--quick] [--json]

--quick measures each point for at most 5 s (at least 10 inferences): a point whose median has not
settled by then is shown NO (unstable) rather than given a figure it has not earned.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Runtime:
    """One row of the table: a framework, the options that make it this variant, and the runtime its
    outputs are checked against (None: no reference shares its weights)."""

    label: str
    framework: str
    options: dict[str, str] = field(default_factory=dict)
    reference: str | None = "pytorch"


RUNTIMES = (
    Runtime("PyTorch eager", "pytorch", reference=None),
    Runtime("PyTorch compiled", "pytorch", {"compile": "default"}),
    Runtime("ONNX Runtime", "onnxruntime"),
    Runtime("ONNX Runtime int8", "onnxruntime", {"quantize": "int8"}),
    Runtime("OpenVINO", "openvino", reference="onnxruntime"),
    Runtime("TensorFlow", "tensorflow", reference=None),
    Runtime("LiteRT", "litert", reference="tensorflow"),
    Runtime("LiteRT int8", "litert", {"quantize": "int8"}, reference="tensorflow"),
    Runtime("JAX", "jax"),
)

# The networks, by the name each framework's manifest or catalogue entry has.
MODELS = {
    "resnet50": "resnet50",
    "mobilenet_v3_small": "torchvision:mobilenet_v3_small",
    "bert_base": "bert_base",
}
# Keras's own networks: TensorFlow and LiteRT run their manifests, which name them plainly.
KERAS_NAMES = {"resnet50": "resnet50", "mobilenet_v3_small": "mobilenet_v3_small"}
KERAS_FRAMEWORKS = ("tensorflow", "litert")

# The generate rows: the catalogue's tiny Llama, the same prompts, in process.
DECODER = "hf:llama"
DECODER_ROWS = (
    ("transformers (PyTorch)", "pytorch", {}),
    ("llama.cpp f16", "llamacpp", {"gguf_type": "f16"}),
    ("llama.cpp q8_0", "llamacpp", {"gguf_type": "q8_0"}),
)

QUICK = ["--min-seconds", "1", "--min-count", "10", "--max-seconds", "5"]


def _mlscope() -> list[str]:
    script = Path(sys.executable).with_name("mlscope")  # the command users type, beside this Python
    return [str(script)] if script.exists() else [sys.executable, "-m", "mlscope"]


def _options(options: dict[str, str]) -> list[str]:
    return [arg for name, value in options.items() for arg in ("--option", f"{name}={value}")]


def _run(command: list[str], env: dict[str, str], timeout_s: float) -> tuple[list[dict[str, Any]], str]:
    """The results a `mlscope run --json` printed, and its error line when it printed none."""
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return [], f"timed out after {timeout_s:.0f} s"
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not results:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit {done.returncode}"
        if "has no manifest for framework" in last:  # the registry's refusal, at length
            return [], f"no {command[command.index('-f') + 1]} manifest"
        return [], last.removeprefix("mlscope: error: ")[:160]
    return results, ""


def _validity(point: dict[str, Any], parity: dict[str, Any]) -> str:
    """The point's verdict as the run's table gives it: a result whose outputs differ from its
    reference's is not valid at any point; else the first reason a point is not valid, in short."""
    if parity.get("verdict") == "different":
        return "NO (parity)"
    validity = point["validity"]
    if validity["valid"]:
        return "yes"
    first = validity["reasons"][0] if validity["reasons"] else ""
    for words, short in _SHORT_REASONS:
        if first.startswith(words):
            return f"NO ({short})"
    return "NO"


# The measurement's invalidating reasons (runtime/measure/validity.py), as the table abbreviates them.
_SHORT_REASONS = (
    ("did not stabilise", "unstable"),
    ("unstable", "unstable"),
    ("other processes used", "busy CPU"),
    ("too few samples", "too few"),
    ("CPU frequency fell", "throttled"),
)


def _model_name(model: str, framework: str) -> str | None:
    if framework in KERAS_FRAMEWORKS:
        return KERAS_NAMES.get(model)
    return MODELS[model]


def measure_row(
    model: str, runtime: Runtime, batch_sizes: str, env: dict[str, str], extra: list[str], timeout_s: float
) -> list[dict[str, Any]]:
    """One runtime's points for one model: a row per batch size, or one row saying why there is none."""
    name = _model_name(model, runtime.framework)
    base = {"model": model, "runtime": runtime.label}
    if name is None:
        return [{**base, "error": f"no {runtime.framework} manifest"}]
    command = [*_mlscope(), "run", name, "-f", runtime.framework, "-b", batch_sizes, "--json", *extra]
    command += _options(runtime.options)
    if runtime.reference is not None:
        command += ["--check-parity", "--parity-against", runtime.reference]
    results, error = _run(command, env, timeout_s)
    if not results:
        return [{**base, "error": error}]
    (result,) = results
    if result.get("status") != "succeeded":
        return [{**base, "error": (result.get("error") or {}).get("message", result.get("status"))}]
    cold = result.get("cold_start") or {}
    parity = result.get("parity") or {}
    rows = []
    for point in result.get("measurements") or []:
        latency = point["latency_ms"]
        rows.append(
            {
                **base,
                "batch": point["batch_size"],
                "median_ms": latency["median"],
                "ci_ms": latency.get("median_ci"),
                "valid": _validity(point, parity),
                "parity": f"{parity['verdict']} vs {parity['against']}" if parity else "-",
                "import_ms": cold.get("import_ms"),
                "load_ms": cold.get("load_ms"),
                "compile_ms": cold.get("compile_ms"),
                "compile_cached": cold.get("compile_cached"),
            }
        )
    return rows


def measure_decoder(
    runtime: tuple[str, str, dict[str, str]], env: dict[str, str], timeout_s: float
) -> dict[str, Any]:
    """TTFT and TPOT medians of the tiny decoder's generate run on one runtime."""
    label, framework, options = runtime
    command = [*_mlscope(), "run", DECODER, "-f", framework, "--scenario", "generate", "--json"]
    results, error = _run(command + _options(options), env, timeout_s)
    if not results:
        return {"runtime": label, "error": error}
    (result,) = results
    if result.get("status") != "succeeded":
        return {"runtime": label, "error": (result.get("error") or {}).get("message", result.get("status"))}
    (point, *_) = result["measurements"]
    generation = point.get("generation") or {}
    return {
        "runtime": label,
        "ttft_ms": (generation.get("ttft_ms") or {}).get("median"),
        "tpot_ms": (generation.get("tpot_ms") or {}).get("median"),
        "valid": _validity(point, {}),
    }


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def print_table(rows: list[dict[str, Any]], decoder: list[dict[str, Any]]) -> None:
    header = (
        "model",
        "runtime",
        "batch",
        "median ms [95% CI]",
        "valid",
        "parity",
        "import",
        "load",
        "compile",
    )
    lines = [header]
    for row in rows:
        if "error" in row:
            lines.append(
                (row["model"], row["runtime"], "-", f"not measured: {row['error']}", "", "", "", "", "")
            )
            continue
        low, high = row["ci_ms"] or (None, None)
        lines.append(
            (
                row["model"],
                row["runtime"],
                str(row["batch"]),
                f"{_ms(row['median_ms'])} [{_ms(low)}-{_ms(high)}]",
                row["valid"],
                row["parity"],
                _ms(row["import_ms"]),
                _ms(row["load_ms"]),
                _ms(row["compile_ms"]) + (" (cached)" if row.get("compile_cached") else ""),
            )
        )
    _print(lines)
    print(
        "\ncold start in ms: the framework's import, the model's load and its compile, once per runtime and\n"
        "model (one process measures both batch sizes); (cached): the compiler's on-disk cache supplied it.\n"
        "NO (parity): outputs differ from the reference's beyond tolerance, which makes every point of the\n"
        "result not valid (an int8 model's usually do).\n"
    )
    dec = [("tiny decoder (generate)", "TTFT ms", "TPOT ms", "valid")]
    for row in decoder:
        if "error" in row:
            dec.append((row["runtime"], f"not measured: {row['error']}", "", ""))
        else:
            dec.append((row["runtime"], _ms(row["ttft_ms"]), _ms(row["tpot_ms"]), row["valid"]))
    _print(dec)


def _print(lines: list[tuple[str, ...]]) -> None:
    """Columns padded to the widest cell; a row that says why nothing was measured runs on."""
    measured = [line for line in lines if line[-1:] != ("",)] or lines
    widths = [max(len(line[i]) for line in measured) for i in range(len(lines[0]))]
    for line in lines:
        cells = [cell for cell in line if cell] if line[-1:] == ("",) else list(line)
        print("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)).rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--runtimes", default=",".join(r.label for r in RUNTIMES))
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-decoder", action="store_true")
    parser.add_argument("--timeout-s", type=float, default=1800)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--save", type=Path, help="also write the rows as JSON to this file")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(MODELS))
    chosen = {label.strip() for label in args.runtimes.split(",")}
    missing = sorted(chosen - {r.label for r in RUNTIMES})
    if unknown or missing:
        parser.error(
            f"unknown models {unknown} or runtimes {missing}; "
            f"known: {list(MODELS)}, {[r.label for r in RUNTIMES]}"
        )
    with tempfile.TemporaryDirectory(prefix="mlscope-runtimes-") as tmp:
        env = {
            **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
            "MLSCOPE_STORE_URL": f"sqlite:///{Path(tmp) / 'store.db'}",
        }
        extra = QUICK if args.quick else []
        started = time.monotonic()
        rows = [
            row
            for model in models
            for runtime in RUNTIMES
            if runtime.label in chosen
            for row in measure_row(model, runtime, args.batch_sizes, env, extra, args.timeout_s)
        ]
        decoder = [] if args.no_decoder else [measure_decoder(r, env, args.timeout_s) for r in DECODER_ROWS]
        took = time.monotonic() - started
    if args.save:
        args.save.write_text(json.dumps({"rows": rows, "decoder": decoder}, indent=2))
    if args.json:
        print(json.dumps({"rows": rows, "decoder": decoder}, indent=2))
        return
    print(f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}; {len(rows)} rows in {took:.0f} s")
    print_table(rows, decoder)


if __name__ == "__main__":
    main()
