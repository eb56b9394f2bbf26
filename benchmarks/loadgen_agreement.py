"""Whether mlscope's single_stream and server scenarios agree with MLPerf LoadGen on the same model,
and when they do not, which tool is off, by how much and why.

Two setups (`--setup a|b|both`, default both), each one ONNX model exported with torch.onnx.export
(the legacy exporter, dynamo=False) into a temporary directory and run by one onnxruntime
InferenceSession, the same session and the same inputs (`--inputs` distinct, seeded) for both tools:

* a: a 512→2048→2048→1000 MLP (random weights, seeded), batch 8, ONNX Runtime with one intra-op
  thread; server at 100 qps, latency bound 50 ms; runs of at least 10 s;
* b: torchvision's ResNet-18 with random weights (torch.manual_seed(0), weights=None), batch 1,
  input 1x3x224x224, ONNX Runtime with its default session options (no thread settings); server at
  30 qps, latency bound 100 ms; runs of at least 20 s.

The tools:

* LoadGen (the `mlcommons-loadgen` package, import name `mlperf_loadgen`): a SUT whose
  issue_queries runs the session inline (SingleStream) or hands the query to one worker thread
  through a queue (Server), then calls QuerySamplesComplete; PerformanceOnly, min_duration_ms and
  min_query_count as given; its figures are read from mlperf_log_summary.txt (50/90/95/97/99/99.9
  percentiles, the result, early stopping, the scheduled and completed rates);
* mlscope: get_scenario("single_stream" / "server").run with the session's run as predict, the
  same rate, percentile (90 for single stream; `--server-percentile`, 99, for server), latency bound
  and minimum duration; max_in_flight 1 (LoadGen's one worker thread). Its p50/p90/p99 are the
  measurement's latency summary's.

Prints one table per setup: for single_stream and server, each tool's p50, p90 and p99 (ms) and
verdict, then a ratio row mlscope / LoadGen per percentile (target: each within 3%) and whether
the VALID / INVALID verdicts agree; then mlscope's validity reasons, its load section's achieved qps
and p99 issue lateness, and LoadGen's completed/scheduled rate, unmet conditions and (when not
VALID) early-stopping lines. The two tools draw different Poisson schedules (each its own seed),
and queueing delays are correlated, so a server p99 from ~600-1000 queries can differ between them
by more than 3% by sampling alone. mlscope runs on until its certificate decides (up to 6x the
duration); LoadGen stops at its minimums, and its early stopping needs at least ~460 queries for a
p99: a run shorter than that is INVALID under LoadGen alone. `--qps`, `--bound-ms` and `--seconds`
override the setups' values for every setup run.

`--rounds N` (1) runs each scenario's pair N times, each round in the reverse order of the last,
prints every round and then, per percentile, the median over the rounds of each tool's figure and
their ratio, and in how many rounds the verdicts agreed: the machine's drift between runs minutes
apart (several percent on a shared VM) then averages out of the comparison instead of deciding it.
In the server scenario a third run follows each pair: mlscope replaying the LoadGen run's own
arrivals (the instants LoadGen called the SUT, `Schedule.replay`), rows "replay" and "ratio rp".
It issues exactly LoadGen's queries and stops: the two tools then queue the same arrivals, and
what is left between them is each one's own cost and the model's own variation, not two Poisson
draws' sampling noise; LoadGen's latency still counts its issue path from the scheduled instant
to that call, which the replay's schedule starts from.
Each scenario's round ends with mlscope run again on the same schedule (rows "again" and "ratio aa",
again / first): the same tool, arrivals and model minutes apart, the floor under which no two
runs, of one tool or two, can be told apart.
The first round keeps each tool's default schedule seed; round k > 1 seeds both tools' schedules
(and LoadGen's sample choice) with `--seed` + k - 1, so the median compares several Poisson draws
per tool rather than the one draw each tool's default gives.

`--diagnose` adds, per setup:

* each tool's own per-query cost, on a no-op SUT: LoadGen single_stream with a SUT that completes
  at once inside issue_queries and mlscope single_stream with a predict that returns at once
  (`--noop-seconds`, 0.25 s, each: LoadGen pre-generates a single-stream run's queries, ~1 kB each,
  from the expected latency, so the run is kept to 250,000 of them, which at ~1 µs a query just
  fill it); then both server scenarios at the setup's rate on the no-op (`--noop-seconds-server`,
  default the setup's duration; LoadGen's through the same worker thread as the model's run);
  p50/p90/p99 in microseconds;
* LoadGen's SUT timed apart: in the LoadGen runs of the model (both scenarios), per query with
  time.perf_counter_ns (mlscope's clock) the moment issue_queries was entered, the moment the
  model started, its end and the return of QuerySamplesComplete; median and p99 of callback →
  model start (the handoff to the worker plus queueing behind the previous query), the model's
  time, the QuerySamplesComplete call, and callback → complete returned (median, p99, max, µs);
  beside them the model's time under mlscope (single stream: its latency; server: its load
  section's service_ms), and LoadGen's reported percentile minus the SUT-side one (a difference of
  percentiles, not a percentile of differences: in server roughly LoadGen's own issue path, from a
  query's scheduled time to the callback; in single stream LoadGen's clock stops inside the
  QuerySamplesComplete call, so it can be slightly negative);

* the model's own time per call in single stream, five runs of `--bracket-seconds` (10) back to
  back: the model alone (a plain loop timing each call), inside LoadGen's SUT, alone, under
  mlscope (its single-stream latency is the call), alone: a tool under which the model runs slower
  than alone just before and after it slows the model itself; drift moves the alone runs too;

and once after the setups (it does not depend on the model):

* both tools on `FixedService(D)` (a service of exactly D ms that holds neither the GIL nor a
  core) at D = 2 and 20 ms, utilisation 0.6 (qps = 0.6 * 1000 / D), max_in_flight 1 (LoadGen: one
  worker thread), bound 10 D, `--fixed-seconds` each: both tools' p50/p90/p99, the ratio row, and,
  when `mlscope.analysis.queueing.md_c_response_percentile` is importable, the M/D/1 theory's
  percentiles at the run's target rate with D' = the median of the service's own record of its
  calls (`taken_ns`, both runs), each tool / theory (rows LoadGen/M, mlscope/M), and the law again
  at each tool's own scheduled rate (a short run's Poisson draw strays from the target); else
  "theory: not available". The percentiles of one run stray from the stationary law by its
  sampling noise (several percent at p99 over a few hundred queries); the ratio row compares the
  tools with each other.

The runs alternate (LoadGen then mlscope for single_stream and D = 2 ms; mlscope then LoadGen for
server and D = 20 ms) so machine drift affects both.

When `mlperf_loadgen` is not importable, the benchmark pip-installs `mlcommons-loadgen` into a
directory of its own under the user's cache directory (not the project's environment) and imports
it from there.

    python benchmarks/loadgen_agreement.py [--setup a|b|both] [--diagnose] [--seconds S]
        [--qps Q] [--bound-ms B] [--noop-seconds 0.25] [--fixed-seconds 20] [--rounds 1]
        [--bracket-seconds 10]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.measure.schedule import Schedule
from mlscope.runtime.measure.synthetic import FixedService
from mlscope.runtime.scenarios import get_scenario
from mlscope.runtime.scenarios.server import Server

__all__ = ["TARGET_RATIO", "Plan", "ensure_loadgen", "parse_summary"]

TARGET_RATIO = 0.03
PERCENTILES = (50.0, 90.0, 99.0)
_PACKAGE = "mlcommons-loadgen"
# A no-op single-stream LoadGen run pre-generates its queries (~1 kB each) from the expected
# latency; at most this many, so the run's memory stays bounded.
_NOOP_MAX_QUERIES = 250_000
FIXED_SERVICE_MS = (2.0, 20.0)
FIXED_RHO = 0.6


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


def _export(model: Any, example: Any, path: Path) -> None:
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation, chosen for speed
        torch.onnx.export(model, (example,), str(path), input_names=["x"], output_names=["y"], dynamo=False)


def build_mlp_session(directory: Path, width: int, hidden: int, batch: int, threads: int, seed: int) -> Any:
    """Setup a: a seeded 3-layer MLP exported to ONNX in `directory`, opened with `threads` threads."""
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
    _export(model, torch.zeros(batch, width), path)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def build_resnet_session(directory: Path) -> Any:
    """Setup b: torchvision's ResNet-18, random weights (seed 0), batch 1, ONNX Runtime's defaults."""
    import onnxruntime as ort
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    path = directory / "resnet18.onnx"
    _export(model, torch.zeros(1, 3, 224, 224), path)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@dataclass(frozen=True)
class Plan:
    """What one pair of runs (one per tool) is asked for.

    Attributes:
        seconds: minimum duration of each run.
        min_queries: minimum query count of each run.
        qps: the server scenario's target rate.
        bound_ms: the server scenario's latency bound (LoadGen's target latency).
        percentile: the server scenario's percentile.
        expected_ms: LoadGen single stream's expected latency (it pre-generates queries from it).
    """

    seconds: float
    min_queries: int
    qps: float
    bound_ms: float
    percentile: float
    expected_ms: float


_PERCENTILE = re.compile(r"^\s*(\d+(?:\.\d+)?) percentile latency \(ns\)\s*:\s*(\d+)")
_RATE = re.compile(r"^\s*(Completed|Scheduled) samples per second\s*:\s*([\d.]+)")


def parse_summary(text: str) -> dict[str, Any]:
    """LoadGen's mlperf_log_summary.txt: percentiles (ms, by percentile), result, its unmet
    conditions, early stopping, and the server's completed / scheduled rates (None if absent)."""
    percentiles: dict[float, float] = {}
    rates: dict[str, float] = {}
    result, early, unmet = None, [], []
    in_early = False
    for line in text.splitlines():
        match = _PERCENTILE.match(line)
        if match:
            percentiles[float(match.group(1))] = int(match.group(2)) / 1e6
        rate = _RATE.match(line)
        if rate:
            rates[rate.group(1).lower()] = float(rate.group(2))
        if line.startswith("Result is"):
            result = line.split(":", 1)[1].strip()
        if line.strip().endswith(": NO"):
            unmet.append(line.strip())
        if line.startswith("Early Stopping Result"):
            in_early = True
            continue
        if in_early:
            if line.strip().startswith("*"):
                early.append(line.strip().lstrip("* ").strip())
            elif line.startswith(" ") and line.strip() and early:  # a wrapped line of the last item
                early[-1] += " " + line.strip()
            elif line.strip() and not line.startswith(" "):
                in_early = False
        elif ("Early stopping" in line or "early stopping" in line) and not line.strip().endswith(
            (": Yes", ": NO")
        ):
            early.append(line.strip())
    return {
        "percentiles": percentiles,
        "result": result,
        "unmet": unmet,
        "early_stopping": early,
        "completed_qps": rates.get("completed"),
        "scheduled_qps": rates.get("scheduled"),
    }


def run_loadgen(
    lg: Any,
    scenario: str,
    run: Callable[[Any], Any],
    inputs: Sequence[Any],
    plan: Plan,
    outdir: Path,
    *,
    stamp: bool = True,
    max_queries: int = 0,
    seed: int | None = None,
) -> dict[str, Any]:
    """One LoadGen PerformanceOnly run; its summary parsed. `seed` (None: LoadGen's own) seeds its
    schedule and sample choice.

    With `stamp`, the summary also carries "stamps": an (n, 4) int64 array, per query the
    perf_counter_ns of issue_queries entered, model start, model end and QuerySamplesComplete
    returned (a no-op run goes without: four clock reads would double its cost).
    """
    settings = lg.TestSettings()
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_duration_ms = int(plan.seconds * 1000)
    settings.min_query_count = plan.min_queries
    settings.max_query_count = max_queries
    if seed is not None:
        settings.schedule_rng_seed = seed
        settings.sample_index_rng_seed = seed
    if scenario == "single_stream":
        settings.scenario = lg.TestScenario.SingleStream
        settings.single_stream_expected_latency_ns = max(1, int(plan.expected_ms * 1e6))
        settings.single_stream_target_latency_percentile = 0.9
    else:
        settings.scenario = lg.TestScenario.Server
        settings.server_target_qps = plan.qps
        settings.server_target_latency_ns = int(plan.bound_ms * 1e6)
        settings.server_target_latency_percentile = plan.percentile / 100

    work: queue.SimpleQueue[Any] = queue.SimpleQueue()
    stamps: list[tuple[int, int, int, int]] = []
    clock = time.perf_counter_ns

    def complete(sample: Any, entered: int) -> None:
        if stamp:
            begun = clock()
            run(inputs[sample.index])
            ended = clock()
            lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, 0, 0)])
            stamps.append((entered, begun, ended, clock()))
        else:
            run(inputs[sample.index])
            lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, 0, 0)])

    def worker() -> None:
        while True:
            item = work.get()
            if item is None:
                return
            samples, entered = item
            for sample in samples:
                complete(sample, entered)

    def issue_queries(samples: list[Any]) -> None:
        entered = clock() if stamp else 0
        if scenario == "single_stream":
            for sample in samples:
                complete(sample, entered)
        else:
            work.put((samples, entered))

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    sut = lg.ConstructSUT(issue_queries, lambda: None)
    qsl = lg.ConstructQSL(len(inputs), len(inputs), lambda indices: None, lambda indices: None)
    log = lg.LogSettings()
    log.log_output.outdir = str(outdir)
    log.log_output.copy_summary_to_stdout = False
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, log)
    finally:
        work.put(None)
        thread.join()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    summary = parse_summary((outdir / "mlperf_log_summary.txt").read_text())
    summary["stamps"] = np.asarray(stamps, dtype=np.int64).reshape(-1, 4)
    return summary


def run_mlscope(
    scenario: str, run: Callable[[Any], Any], inputs: Sequence[Any], plan: Plan, seed: int = 0
) -> Any:
    """One mlscope measurement of `scenario`, as `plan` asks, its arrivals drawn with `seed`."""
    settings = MeasureSettings(
        min_seconds=plan.seconds, min_count=plan.min_queries, max_seconds=plan.seconds * 6
    )
    if scenario == "single_stream":
        load = LoadSettings(percentile=90)
    else:
        load = LoadSettings(
            qps=plan.qps,
            percentile=plan.percentile,
            latency_bound_ms=plan.bound_ms,
            max_in_flight=1,
            seed=seed,
        )
    return get_scenario(scenario).run(run, inputs, 1, settings, load=load)


def run_mlscope_replay(
    run: Callable[[Any], Any], inputs: Sequence[Any], plan: Plan, arrivals_ns: Sequence[int]
) -> Any:
    """mlscope's server scenario issuing at `arrivals_ns` (a LoadGen run's instants of calling the
    SUT) instead of a Poisson draw of its own: both tools then queue the same arrivals, and what is
    left between them is each one's own cost, not two draws' sampling noise."""
    schedule = Schedule.replay(arrivals_ns)

    class Replayed(Server):
        def _schedule(self, load: LoadSettings, inputs: int) -> Schedule:
            return schedule

    # Exactly the trace's queries, no lap: its span (and a mean gap), neither shorter nor longer.
    span = schedule.trace_ns[-1] / 1e9 + 0.5 / schedule.rate
    settings = MeasureSettings(min_seconds=span, min_count=1, max_seconds=span)
    load = LoadSettings(
        qps=plan.qps, percentile=plan.percentile, latency_bound_ms=plan.bound_ms, max_in_flight=1
    )
    return Replayed().run(run, inputs, 1, settings, load=load)


def _lg_percentiles(figures: dict[str, Any]) -> tuple[float, ...]:
    return tuple(figures["percentiles"].get(p, float("nan")) for p in PERCENTILES)


def _ml_percentiles(m: Any) -> tuple[float, ...]:
    return (m.latency_ms.median, m.latency_ms.p90, m.latency_ms.p99)


def _ml_verdict(m: Any) -> str:
    return f"{'VALID' if m.validity.valid else 'INVALID'} ({m.stop_reason}, {m.latency_ms.count} queries)"


def _lg_verdict(figures: dict[str, Any]) -> str:
    return str(figures["result"])


HEADER = f"  {'scenario':<16} {'tool':<10} {'p50':>9} {'p90':>9} {'p99':>9}  verdict"


def _row(label: str, tool: str, values: Sequence[float], verdict: str, scale: float = 1.0) -> str:
    cells = " ".join(f"{v * scale:>9.3f}" for v in values)
    return f"  {label:<16} {tool:<10} {cells}  {verdict}".rstrip()


def _ratio_row(
    label: str, ml: Sequence[float], lg: Sequence[float], agree: bool | None, tool: str = "ratio"
) -> str:
    ratios = [a / b if b else float("nan") for a, b in zip(ml, lg, strict=True)]
    passes = [abs(r - 1) <= TARGET_RATIO for r in ratios]
    marks = ", ".join(f"p{p:g} {'PASS' if ok else 'FAIL'}" for p, ok in zip(PERCENTILES, passes, strict=True))
    tail = f"within {TARGET_RATIO:.0%}: {marks}"
    if agree is not None:
        tail += f"; verdicts agree: {'yes' if agree else 'NO'}"
    return _row(label, tool, ratios, tail)


def _notes(scenario: str, m: Any, figures: dict[str, Any] | None) -> list[str]:
    lines = []
    if figures is not None:
        if figures["completed_qps"] is not None:
            lines.append(
                f"      LoadGen: completed {figures['completed_qps']:.2f} qps, "
                f"scheduled {figures['scheduled_qps'] or float('nan'):.2f} qps"
            )
        lines.extend(f"      LoadGen unmet: {line}" for line in figures["unmet"])
        if figures["result"] != "VALID":
            lines.extend(f"      LoadGen early stopping: {line}" for line in figures["early_stopping"])
    if m.load is not None and "achieved_qps" in m.load:
        lines.append(f"      mlscope load: {_load_line(m)}")
    lines.extend(f"      mlscope validity: {reason}" for reason in m.validity.reasons)
    return lines


def _pair(
    lg: Any,
    scenario: str,
    order: tuple[str, str],
    run: Callable[[Any], Any],
    inputs: Sequence[Any],
    plan: Plan,
    outdir: Path,
    seed: int | None = None,
    **loadgen_kwargs: Any,
) -> tuple[Any, dict[str, Any] | None]:
    """Both tools on the same `run`, in `order`; (mlscope's measurement, LoadGen's summary or None).
    `seed` (None: each tool's default) seeds both tools' schedules."""
    m, figures = None, None
    for tool in order:
        if tool == "loadgen":
            if lg is not None:
                figures = run_loadgen(lg, scenario, run, inputs, plan, outdir, seed=seed, **loadgen_kwargs)
        else:
            m = run_mlscope(scenario, run, inputs, plan, seed=seed or 0)
    return m, figures


def _load_line(m: Any) -> str:
    return (
        f"achieved {m.load['achieved_qps']:.2f} qps, "
        f"p99 issue lateness {m.load['issue_lateness_ms']['p99']:.3f} ms"
    )


def _print_pair(
    label: str,
    m: Any,
    figures: dict[str, Any] | None,
    scale: float = 1.0,
    replay: Any = None,
    again: Any = None,
) -> None:
    if figures is not None:
        print(_row(label, "LoadGen", _lg_percentiles(figures), _lg_verdict(figures), scale))
    print(_row(label, "mlscope", _ml_percentiles(m), _ml_verdict(m), scale))
    if figures is not None:
        agree = (figures["result"] == "VALID") == m.validity.valid
        print(_ratio_row(label, _ml_percentiles(m), _lg_percentiles(figures), agree))
    if replay is not None and figures is not None:
        print(_row(label, "replay", _ml_percentiles(replay), _ml_verdict(replay), scale))
        agree = (figures["result"] == "VALID") == replay.validity.valid
        print(_ratio_row(label, _ml_percentiles(replay), _lg_percentiles(figures), agree, "ratio rp"))
    if again is not None:
        print(_row(label, "again", _ml_percentiles(again), _ml_verdict(again), scale))
        agree = again.validity.valid == m.validity.valid
        print(_ratio_row(label, _ml_percentiles(again), _ml_percentiles(m), agree, "ratio aa"))


def _print_rounds(
    scenario: str,
    pairs: list[tuple[Any, dict[str, Any] | None]],
    replays: Sequence[Any] = (),
    again: Sequence[Any] = (),
) -> None:
    """The median over the rounds of each tool's percentile, their ratio, and the verdicts'
    agreement in how many rounds; the same for mlscope's replays of LoadGen's arrivals, if any."""
    measured = [(m, figures) for m, figures in pairs if figures is not None]
    if not measured:
        return
    ml = [float(v) for v in np.median([_ml_percentiles(m) for m, _ in measured], axis=0)]
    lg = [float(v) for v in np.median([_lg_percentiles(figures) for _, figures in measured], axis=0)]
    agreed = sum((figures["result"] == "VALID") == m.validity.valid for m, figures in measured)
    label = f"{scenario} med"
    print(_row(label, "LoadGen", lg, f"median of {len(measured)} rounds"))
    print(_row(label, "mlscope", ml, f"median of {len(measured)} rounds"))
    print(_ratio_row(label, ml, lg, None) + f"; verdicts agree in {agreed} of {len(measured)} rounds")
    replayed = [(r, figures) for r, (_, figures) in zip(replays, pairs, strict=False) if figures and r]
    if replayed:
        rp = [float(v) for v in np.median([_ml_percentiles(r) for r, _ in replayed], axis=0)]
        agreed = sum((figures["result"] == "VALID") == r.validity.valid for r, figures in replayed)
        print(_row(label, "replay", rp, f"median of {len(replayed)} rounds"))
        tail = f"; verdicts agree in {agreed} of {len(replayed)} rounds"
        print(_ratio_row(label, rp, lg, None, "ratio rp") + tail)
    if again:
        aa = [float(v) for v in np.median([_ml_percentiles(a) for a in again], axis=0)]
        print(_row(label, "again", aa, f"median of {len(again)} rounds"))
        print(_ratio_row(label, aa, ml, None, "ratio aa"))


@dataclass
class Setup:
    """One model under test: its session's run, inputs, and what the runs are asked for."""

    key: str
    title: str
    run: Callable[[Any], Any]
    inputs: list[Any]
    plan: Plan


def _prepare(key: str, directory: Path, args: argparse.Namespace) -> Setup:
    rng = np.random.default_rng(args.seed)
    if key == "a":
        session = build_mlp_session(directory, args.width, args.hidden, args.batch, args.threads, args.seed)
        inputs = [rng.standard_normal((args.batch, args.width), dtype=np.float32) for _ in range(args.inputs)]
        title = (
            f"{args.width}→{args.hidden}→{args.hidden}→1000 MLP, batch {args.batch}, "
            f"ONNX Runtime {args.threads} intra-op thread(s)"
        )
        qps, bound_ms, seconds = 100.0, 50.0, 10.0
    else:
        session = build_resnet_session(directory)
        inputs = [rng.standard_normal((1, 3, 224, 224), dtype=np.float32) for _ in range(args.inputs)]
        title = "ResNet-18 (random weights), batch 1, 1x3x224x224, ONNX Runtime default session options"
        qps, bound_ms, seconds = 30.0, 100.0, 20.0

    def run(x: Any) -> Any:
        return session.run(None, {"x": x})

    for x in inputs * 2:  # warm-up, for LoadGen's sake (mlscope warms up itself)
        run(x)
    started = time.perf_counter()
    for x in inputs:
        run(x)
    bare_ms = (time.perf_counter() - started) * 1000 / len(inputs)
    plan = Plan(
        seconds=args.seconds if args.seconds is not None else seconds,
        min_queries=args.min_queries,
        qps=args.qps if args.qps is not None else qps,
        bound_ms=args.bound_ms if args.bound_ms is not None else bound_ms,
        percentile=args.server_percentile,
        # LoadGen pre-generates min_duration / expected queries and stops early once its minimums
        # are met; half the bare time leaves room for a run that goes faster than the warm-up.
        expected_ms=bare_ms / 2,
    )
    return Setup(key, f"{title}, ~{bare_ms:.2f} ms per bare inference", run, inputs, plan)


def _stamp_lines(stamps: np.ndarray, label: str) -> list[str]:
    if stamps.size == 0:
        return [f"    {label}: no queries stamped"]
    parts = {
        "callback → model start": stamps[:, 1] - stamps[:, 0],
        "model": stamps[:, 2] - stamps[:, 1],
        "QuerySamplesComplete call": stamps[:, 3] - stamps[:, 2],
        "callback → complete returned": stamps[:, 3] - stamps[:, 0],
    }
    head = f"{label} ({stamps.shape[0]} queries)"
    lines = [f"    {head:<32} {'median µs':>11} {'p99 µs':>10} {'max µs':>10}"]
    for name, values in parts.items():
        median, p99 = np.percentile(values, [50, 99]) / 1e3
        lines.append(f"      {name:<30} {median:>11.1f} {p99:>10.1f} {values.max() / 1e3:>10.1f}")
    return lines


def _diagnose_setup(lg: Any, setup: Setup, directory: Path, args: argparse.Namespace, main: dict) -> None:
    plan = setup.plan
    print(f"  diagnose, setup {setup.key}")

    def noop(batch: Any) -> None:
        return None

    noop_inputs = [0] * 16
    # LoadGen single stream pre-generates seconds / expected queries: at most _NOOP_MAX_QUERIES.
    noop_plan = replace(
        plan,
        seconds=args.noop_seconds,
        expected_ms=args.noop_seconds * 1000 / _NOOP_MAX_QUERIES,
    )
    ss = _pair(
        lg,
        "single_stream",
        ("loadgen", "mlscope"),
        noop,
        noop_inputs,
        noop_plan,
        directory / "noop-ss",
        stamp=False,
    )
    server_plan = replace(plan, seconds=args.noop_seconds_server or plan.seconds)
    sv = _pair(
        lg,
        "server",
        ("mlscope", "loadgen"),
        noop,
        noop_inputs,
        server_plan,
        directory / "noop-sv",
        stamp=False,
    )
    print("  no-op SUT: each tool's own per-query cost (µs)")
    print(HEADER)
    _print_pair("single_stream", *ss, scale=1e3)
    _print_pair(f"server {plan.qps:g} qps", *sv, scale=1e3)
    for line in _notes("server", *sv):
        print(line)

    if lg is None:
        return
    print("  LoadGen's SUT timed apart (perf_counter_ns, the runs of the model above)")
    for scenario in ("single_stream", "server"):
        m, figures = main[scenario]
        print("\n".join(_stamp_lines(figures["stamps"], f"{scenario}:")))
        if scenario == "single_stream":  # mlscope's single-stream latency is the model's time
            name, median, p99, top = (
                "model under mlscope (latency)",
                m.latency_ms.median,
                m.latency_ms.p99,
                m.latency_ms.max,
            )
        elif m.load is not None and "service_ms" in m.load:
            service = m.load["service_ms"]
            name, median, p99, top = "model under mlscope (service)", service["median"], service["p99"], None
        else:
            name = ""
        if name:
            tail = f" {top * 1e3:>10.1f}" if top is not None else ""
            print(f"      {name:<30} {median * 1e3:>11.1f} {p99 * 1e3:>10.1f}{tail}")
        if figures["stamps"].size:
            lg_p = np.array(_lg_percentiles(figures))
            sut_p = np.percentile(figures["stamps"][:, 3] - figures["stamps"][:, 0], PERCENTILES) / 1e6
            gap = ", ".join(f"p{p:g} {g * 1e3:.1f}" for p, g in zip(PERCENTILES, lg_p - sut_p, strict=True))
            print(f"      LoadGen's percentile − SUT-side percentile (µs): {gap}")
    _bracket(lg, setup, directory, args.bracket_seconds)


def _bare(run: Callable[[Any], Any], inputs: Sequence[Any], seconds: float) -> npt.NDArray[np.int64]:
    """The model alone: `run` on the inputs in turn for `seconds`, each call timed (ns)."""
    clock, times = time.perf_counter_ns, []
    end = clock() + int(seconds * 1e9)
    index = 0
    while clock() < end:
        begun = clock()
        run(inputs[index % len(inputs)])
        times.append(clock() - begun)
        index += 1
    return np.asarray(times, dtype=np.int64)


def _bracket(lg: Any, setup: Setup, directory: Path, seconds: float) -> None:
    """The model's own time per call, single stream, in five runs back to back: alone, inside
    LoadGen's SUT, alone, under mlscope, alone. Whether the model runs slower under one tool than
    alone just before and after it separates that tool's interference from drift between runs."""
    plan = replace(setup.plan, seconds=seconds, min_queries=1)
    rows: list[tuple[str, npt.NDArray[np.float64]]] = []
    rows.append(("alone", _bare(setup.run, setup.inputs, seconds) / 1e3))
    if lg is not None:
        figures = run_loadgen(
            lg, "single_stream", setup.run, setup.inputs, plan, directory / "bracket-loadgen"
        )
        stamps = figures["stamps"]
        rows.append(("inside LoadGen's SUT", (stamps[:, 2] - stamps[:, 1]) / 1e3))
        rows.append(("alone", _bare(setup.run, setup.inputs, seconds) / 1e3))
    m = run_mlscope("single_stream", setup.run, setup.inputs, plan)
    rows.append(("under mlscope (its latency)", m.latencies_ns / 1e3))
    rows.append(("alone", _bare(setup.run, setup.inputs, seconds) / 1e3))
    print(f"  the model's own time per call, single stream, runs of {seconds:g} s back to back (µs)")
    print(f"    {'':<30} {'calls':>7} {'median':>10} {'p90':>10} {'p99':>10}")
    for label, values in rows:
        p50, p90, p99 = np.percentile(values, (50, 90, 99))
        print(f"    {label:<30} {values.size:>7} {p50:>10.1f} {p90:>10.1f} {p99:>10.1f}")


def _theory() -> Callable[..., float] | None:
    try:
        module = importlib.import_module("mlscope.analysis.queueing")
    except ImportError:
        return None
    return getattr(module, "md_c_response_percentile", None)


def _fixed_services(lg: Any, directory: Path, args: argparse.Namespace) -> None:
    print(
        f"\nFixedService(D): utilisation {FIXED_RHO:g}, max_in_flight 1 (LoadGen: one worker thread), "
        f"bound 10 D, ≥ {args.fixed_seconds:g} s per run (ms)"
    )
    print(HEADER)
    theory = _theory()
    for i, service_ms in enumerate(FIXED_SERVICE_MS):
        qps = FIXED_RHO * 1000 / service_ms
        plan = Plan(
            seconds=args.fixed_seconds,
            min_queries=args.min_queries,
            qps=qps,
            bound_ms=10 * service_ms,
            percentile=args.server_percentile,
            expected_ms=service_ms,
        )
        order = ("loadgen", "mlscope") if i % 2 == 0 else ("mlscope", "loadgen")
        service = FixedService(service_ms)
        taken: dict[str, np.ndarray] = {}
        m, figures = None, None
        for tool in order:
            service.reset()
            if tool == "loadgen":
                if lg is None:
                    continue
                figures = run_loadgen(
                    lg, "server", service, [None] * 16, plan, directory / f"fixed-{i}", stamp=False
                )
            else:
                m = run_mlscope("server", service, [None] * 16, plan)
            taken[tool] = service.taken_ns
        label = f"D={service_ms:g} {qps:g}qps"
        _print_pair(label, m, figures)
        if theory is None:
            print(f"  {label:<16} theory: not available")
        else:
            d_prime = float(np.median(np.concatenate(list(taken.values())))) / 1e6
            expected = [theory(p, qps, d_prime, 1) for p in PERCENTILES]
            print(_row(label, "M/D/1", expected, f"D' = {d_prime:.4f} ms (median of the service's calls)"))
            if figures is not None:
                lg_ratio = [a / b for a, b in zip(_lg_percentiles(figures), expected, strict=True)]
                print(_row(label, "LoadGen/M", lg_ratio, ""))
            ml_ratio = [a / b for a, b in zip(_ml_percentiles(m), expected, strict=True)]
            print(_row(label, "mlscope/M", ml_ratio, ""))
            # A short run's Poisson draw can fall well off the target rate: the law at each tool's
            # own scheduled rate, beside it.
            realised = {
                "LoadGen": figures and figures["scheduled_qps"],
                "mlscope": (m.load or {}).get("scheduled_qps"),
            }
            for tool, rate in realised.items():
                if rate and rate * d_prime < 1000:
                    at_rate = ", ".join(f"p{p:g} {theory(p, rate, d_prime, 1):.3f}" for p in PERCENTILES)
                    print(f"      M/D/1 at {tool}'s scheduled {rate:.2f} qps: {at_rate} ms")
        for tool, values in taken.items():
            print(f"      service under {tool}: median {np.median(values) / 1e6:.4f} ms, {values.size} calls")
        for line in _notes("server", m, figures):
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("--setup", choices=("a", "b", "both"), default="both", help="which setup(s)")
    parser.add_argument("--qps", type=float, default=None, help="server target QPS (default: a 100, b 30)")
    parser.add_argument(
        "--bound-ms", type=float, default=None, help="server latency bound (default: a 50, b 100)"
    )
    parser.add_argument("--server-percentile", type=float, default=99.0, help="server percentile")
    parser.add_argument(
        "--seconds", type=float, default=None, help="minimum duration of each run (a 10, b 20)"
    )
    parser.add_argument("--min-queries", type=int, default=100, help="minimum query count")
    parser.add_argument("--hidden", type=int, default=2048, help="setup a: MLP hidden width")
    parser.add_argument("--width", type=int, default=512, help="setup a: MLP input width")
    parser.add_argument("--batch", type=int, default=8, help="setup a: rows per inference")
    parser.add_argument("--threads", type=int, default=1, help="setup a: onnxruntime intra_op_num_threads")
    parser.add_argument("--inputs", type=int, default=64, help="distinct inputs in the pool")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--diagnose", action="store_true", help="no-op SUTs, LoadGen's SUT timed, FixedService"
    )
    parser.add_argument("--noop-seconds", type=float, default=0.25, help="no-op single-stream runs' duration")
    parser.add_argument(
        "--noop-seconds-server",
        type=float,
        default=None,
        help="no-op server runs' duration (default: the setup's)",
    )
    parser.add_argument("--fixed-seconds", type=float, default=20.0, help="FixedService runs' duration")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="pairs of runs per scenario, each round in the reverse order of the last; "
        "with more than one, the median over the rounds is compared too",
    )
    parser.add_argument(
        "--bracket-seconds", type=float, default=10.0, help="each run of the model-alone bracket"
    )
    args = parser.parse_args()

    try:
        lg = ensure_loadgen()
    except Exception as exc:  # the benchmark still reports mlscope's side
        lg = None
        print(f"  LoadGen unavailable: {exc}")

    keys = ("a", "b") if args.setup == "both" else (args.setup,)
    version = None
    if lg is not None:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            version = importlib.metadata.version(_PACKAGE)
    print(
        f"LoadGen{f' {version}' if version else ''} vs mlscope; load average {os.getloadavg()[0]:.2f} "
        f"on {os.cpu_count()} cores; target: every ratio within {TARGET_RATIO:.0%}, verdicts agree"
    )
    if lg is None:
        print("  LoadGen side skipped")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for key in keys:
            (directory / key).mkdir()
            try:
                setup = _prepare(key, directory / key, args)
            except ImportError as exc:
                print(f"\nsetup {key}: skipped ({exc})")
                continue
            plan = setup.plan
            print(f"\nsetup {key}: {setup.title}")
            print(
                f"  server {plan.qps:g} qps, p{plan.percentile:g} ≤ {plan.bound_ms:g} ms; "
                f"≥ {plan.seconds:g} s and "
                f"{plan.min_queries} queries per run; load average {os.getloadavg()[0]:.2f}"
            )
            rounds: dict[str, list[tuple[Any, dict[str, Any] | None]]] = {"single_stream": [], "server": []}
            replays: list[Any] = []  # per round, mlscope's server run on LoadGen's arrivals
            # per round, mlscope run again on the same schedule: its own repeatability
            again: dict[str, list[Any]] = {"single_stream": [], "server": []}
            for index in range(args.rounds):
                for scenario, order in (
                    ("single_stream", ("loadgen", "mlscope")),
                    ("server", ("mlscope", "loadgen")),
                ):
                    # Each round reverses the order of the last, so drift favours neither tool.
                    rounds[scenario].append(
                        _pair(
                            lg,
                            scenario,
                            order if index % 2 == 0 else order[::-1],
                            setup.run,
                            setup.inputs,
                            plan,
                            directory / key / f"loadgen-{scenario}-{index}",
                            # Round 1 keeps each tool's default schedule; later rounds draw new
                            # ones, so the median over rounds is not one Poisson draw per tool.
                            seed=None if index == 0 else args.seed + index,
                        )
                    )
                    seed = None if index == 0 else args.seed + index
                    again[scenario].append(
                        run_mlscope(scenario, setup.run, setup.inputs, plan, seed=seed or 0)
                    )
                    figures = rounds[scenario][-1][1]
                    if scenario == "server" and figures is not None and len(figures["stamps"]) > 1:
                        replays.append(
                            run_mlscope_replay(setup.run, setup.inputs, plan, figures["stamps"][:, 0])
                        )
                    elif scenario == "server":
                        replays.append(None)
            results = {scenario: pairs[-1] for scenario, pairs in rounds.items()}
            print(HEADER.replace("  verdict", "  verdict  (ms)"))
            for scenario, pairs in rounds.items():
                for index, (m, figures) in enumerate(pairs):
                    label = scenario if args.rounds == 1 else f"{scenario} {index + 1}"
                    replay = replays[index] if scenario == "server" else None
                    _print_pair(label, m, figures, replay=replay, again=again[scenario][index])
                    for line in _notes(scenario, m, figures):
                        print(line)
                    if replay is not None:
                        print(f"      replay load: {_load_line(replay)}")
                if args.rounds > 1:
                    _print_rounds(scenario, pairs, replays if scenario == "server" else (), again[scenario])
            if args.diagnose:
                _diagnose_setup(lg, setup, directory / key, args, results)
        if args.diagnose:
            _fixed_services(lg, directory, args)


if __name__ == "__main__":
    main()
