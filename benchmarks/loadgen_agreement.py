"""Whether mlscope's single_stream and server scenarios agree with MLPerf LoadGen on the same model.

A small MLP (`--hidden` wide, 3 layers, random weights seeded) is exported with torch.onnx.export
into a temporary directory and run with one onnxruntime InferenceSession (intra_op_num_threads
fixed), the same session and the same inputs for both tools:

* LoadGen (the `mlcommons-loadgen` package, import name `mlperf_loadgen`): a SUT whose
  issue_queries runs the session inline (SingleStream) or hands the query to one worker thread
  through a queue (Server), then calls QuerySamplesComplete; PerformanceOnly, min_duration_ms and
  min_query_count as given; its figures are read from mlperf_log_summary.txt;
* mlscope: get_scenario("single_stream" / "server").run with the session's run as predict, the
  same rate, percentile (90 for single stream; the server percentile for server), latency bound
  and minimum duration.

Prints per scenario each tool's median and p90, the ratios mlscope / LoadGen of the medians and of
the p90s (target: within 3%), and LoadGen's VALID / INVALID beside mlscope's validity (with its
reasons). The runs alternate (LoadGen, mlscope for single_stream; mlscope, LoadGen for server) so
machine drift affects both.

When `mlperf_loadgen` is not importable, the benchmark pip-installs `mlcommons-loadgen` into a
directory of its own under the user's cache directory (not the project's environment) and imports
it from there.

    python benchmarks/loadgen_agreement.py [--qps 100] [--bound-ms 50] [--seconds 10]
"""

from __future__ import annotations

import argparse
import importlib
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure import MeasureSettings, get_scenario

__all__ = ["TARGET_RATIO", "ensure_loadgen", "parse_summary"]

TARGET_RATIO = 0.03
_PACKAGE = "mlcommons-loadgen"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return Path(base) / "mlscope" / f"loadgen-{tag}"


def ensure_loadgen() -> Any:
    """`mlperf_loadgen`, installed into the cache directory first if it is not importable.

    Raises:
        RuntimeError: pip could not install it (its output is in the message).
    """
    try:
        return importlib.import_module("mlperf_loadgen")
    except ImportError:
        pass
    target = _cache_dir()
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
    try:
        return importlib.import_module("mlperf_loadgen")
    except ImportError:
        pass
    print(f"  installing {_PACKAGE} into the user cache directory ...", flush=True)
    target.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--target",
        str(target),
        _PACKAGE,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {_PACKAGE} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    importlib.invalidate_caches()
    return importlib.import_module("mlperf_loadgen")


def build_session(directory: Path, width: int, hidden: int, batch: int, threads: int, seed: int) -> Any:
    """Export a seeded 3-layer MLP to ONNX in `directory` and open it with onnxruntime."""
    import onnxruntime as ort
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 1000),
    ).eval()
    path = directory / "mlp.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy exporter, chosen for speed
        torch.onnx.export(
            model,
            (torch.zeros(batch, width),),
            str(path),
            input_names=["x"],
            output_names=["y"],
            dynamo=False,
        )
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


_PERCENTILE = re.compile(r"^\s*(\d+(?:\.\d+)?) percentile latency \(ns\)\s*:\s*(\d+)")


def parse_summary(text: str) -> dict[str, Any]:
    """LoadGen's mlperf_log_summary.txt: percentiles (ms, by percentile), result, early stopping."""
    percentiles: dict[float, float] = {}
    result, early = None, []
    in_early = False
    for line in text.splitlines():
        match = _PERCENTILE.match(line)
        if match:
            percentiles[float(match.group(1))] = int(match.group(2)) / 1e6
        if line.startswith("Result is"):
            result = line.split(":", 1)[1].strip()
        if line.startswith("Early Stopping Result"):
            in_early = True
            continue
        if in_early:
            if line.strip().startswith("*"):
                early.append(line.strip().lstrip("* ").strip())
            elif line.strip() and not line.startswith(" "):
                in_early = False
        elif "Early stopping" in line or "early stopping" in line:
            early.append(line.strip())
    return {"percentiles": percentiles, "result": result, "early_stopping": early}


def run_loadgen(
    lg: Any, scenario: str, run: Any, inputs: list[Any], args: argparse.Namespace, outdir: Path
) -> dict[str, Any]:
    """One LoadGen PerformanceOnly run; its summary parsed."""
    settings = lg.TestSettings()
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_duration_ms = int(args.seconds * 1000)
    settings.min_query_count = args.min_queries
    if scenario == "single_stream":
        settings.scenario = lg.TestScenario.SingleStream
        settings.single_stream_expected_latency_ns = int(args.expected_ms * 1e6)
        settings.single_stream_target_latency_percentile = 0.9
    else:
        settings.scenario = lg.TestScenario.Server
        settings.server_target_qps = args.qps
        settings.server_target_latency_ns = int(args.bound_ms * 1e6)
        settings.server_target_latency_percentile = args.server_percentile / 100

    work: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def complete(sample: Any) -> None:
        run(inputs[sample.index])
        lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, 0, 0)])

    def worker() -> None:
        while True:
            samples = work.get()
            if samples is None:
                return
            for sample in samples:
                complete(sample)

    def issue_queries(samples: list[Any]) -> None:
        if scenario == "single_stream":
            for sample in samples:
                complete(sample)
        else:
            work.put(samples)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    sut = lg.ConstructSUT(issue_queries, lambda: None)
    qsl = lg.ConstructQSL(len(inputs), len(inputs), lambda indices: None, lambda indices: None)
    log = lg.LogSettings()
    log.log_output.outdir = str(outdir)
    log.log_output.copy_summary_to_stdout = False
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, log)
    finally:
        work.put(None)
        thread.join()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    return parse_summary((outdir / "mlperf_log_summary.txt").read_text())


def run_mlscope(scenario: str, run: Any, inputs: list[Any], args: argparse.Namespace) -> Any:
    settings = MeasureSettings(
        min_seconds=args.seconds, min_count=args.min_queries, max_seconds=args.seconds * 6
    )
    if scenario == "single_stream":
        load = LoadSettings(percentile=90)
    else:
        load = LoadSettings(
            qps=args.qps, percentile=args.server_percentile, latency_bound_ms=args.bound_ms, max_in_flight=1
        )
    return get_scenario(scenario).run(run, inputs, 1, settings, load=load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qps", type=float, default=100.0, help="server target QPS")
    parser.add_argument("--bound-ms", type=float, default=50.0, help="server latency bound")
    parser.add_argument("--server-percentile", type=float, default=99.0, help="server percentile")
    parser.add_argument("--seconds", type=float, default=10.0, help="minimum duration of each run")
    parser.add_argument("--min-queries", type=int, default=100, help="minimum query count")
    parser.add_argument("--hidden", type=int, default=2048, help="MLP hidden width")
    parser.add_argument("--width", type=int, default=512, help="MLP input width")
    parser.add_argument("--batch", type=int, default=8, help="rows per inference")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra_op_num_threads")
    parser.add_argument("--inputs", type=int, default=64, help="distinct inputs in the pool")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    try:
        lg = ensure_loadgen()
    except Exception as exc:  # the benchmark still reports mlscope's side
        lg = None
        print(f"  LoadGen unavailable: {exc}")

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        session = build_session(directory, args.width, args.hidden, args.batch, args.threads, args.seed)
        rng = np.random.default_rng(args.seed)
        inputs = [rng.standard_normal((args.batch, args.width), dtype=np.float32) for _ in range(args.inputs)]

        def run(x: Any) -> Any:
            return session.run(None, {"x": x})

        for x in inputs * 4:  # warm-up, for LoadGen's sake (mlscope warms up itself)
            run(x)
        started = time.perf_counter()
        for x in inputs:
            run(x)
        args.expected_ms = (time.perf_counter() - started) * 1000 / len(inputs)
        print(
            f"LoadGen vs mlscope: {args.width}→{args.hidden}→{args.hidden}→1000 MLP, batch {args.batch}, "
            f"onnxruntime {args.threads} thread(s), ~{args.expected_ms:.2f} ms per inference"
        )
        print(
            f"  server {args.qps:g} qps, p{args.server_percentile:g} ≤ {args.bound_ms:g} ms; "
            f"≥ {args.seconds:g} s and {args.min_queries} queries per run; "
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
        )
        if lg is None:
            print("  LoadGen side skipped")

        rows = []
        for scenario, order in (
            ("single_stream", ("loadgen", "mlscope")),
            ("server", ("mlscope", "loadgen")),
        ):
            figures: dict[str, Any] = {}
            for tool in order:
                if tool == "loadgen":
                    if lg is None:
                        continue
                    outdir = directory / f"loadgen-{scenario}"
                    outdir.mkdir()
                    figures["loadgen"] = run_loadgen(lg, scenario, run, inputs, args, outdir)
                else:
                    figures["mlscope"] = run_mlscope(scenario, run, inputs, args)
            rows.append((scenario, figures))

    print(f"  {'scenario':<14} {'tool':<8} {'median ms':>10} {'p90 ms':>8}  verdict")
    for scenario, figures in rows:
        m = figures["mlscope"]
        ml_median, ml_p90 = m.latency_ms.median, m.latency_ms.p90
        lg_figures = figures.get("loadgen")
        if lg_figures is not None:
            pct = lg_figures["percentiles"]
            lg_median, lg_p90 = pct.get(50.0, float("nan")), pct.get(90.0, float("nan"))
            print(
                f"  {scenario:<14} {'LoadGen':<8} {lg_median:>10.3f} {lg_p90:>8.3f}  {lg_figures['result']}"
            )
        print(
            f"  {scenario:<14} {'mlscope':<8} {ml_median:>10.3f} {ml_p90:>8.3f}  "
            f"{'VALID' if m.validity.valid else 'INVALID'} ({m.stop_reason}, {m.latency_ms.count} queries)"
        )
        if lg_figures is not None:
            median_ratio, p90_ratio = ml_median / lg_median, ml_p90 / lg_p90
            ok = abs(median_ratio - 1) <= TARGET_RATIO and abs(p90_ratio - 1) <= TARGET_RATIO
            agree = (lg_figures["result"] == "VALID") == m.validity.valid
            print(
                f"  {scenario:<14} {'ratio':<8} {median_ratio:>10.3f} {p90_ratio:>8.3f}  "
                f"within {TARGET_RATIO:.0%}: {'PASS' if ok else 'FAIL'}; "
                f"verdicts agree: {'yes' if agree else 'NO'}"
            )
            for line in lg_figures["early_stopping"]:
                print(f"      LoadGen early stopping: {line}")
        if m.load is not None and scenario == "server":
            print(
                f"      mlscope load: achieved {m.load['achieved_qps']:.1f} qps, "
                f"p99 issue lateness {m.load['issue_lateness_ms']['p99']:.3f} ms, "
                f"certified {m.load['certified']}"
            )
        for reason in m.validity.reasons:
            print(f"      mlscope validity: {reason}")


if __name__ == "__main__":
    main()
