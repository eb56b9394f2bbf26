"""Many bricks measured in one predictor job (DLBricks, arXiv 1911.07967): one process, ONNX Runtime
imported once, a session per brick created back to back, then every brick timed in sweeps.

    specs ─▶ a session per brick (optimisation off: the node is optimised already), its inputs and
             its outputs bound once (IOBinding: no allocation, no conversion to numpy in a timed run)
          ─▶ warm-up sweeps ─▶ timed sweeps: every brick runs once per sweep, in the order given
             (the model's), its inputs rewritten just before (as the layer before it would)
          ─▶ per brick: stopping rule, statistics and verdict as any single_stream measurement

Why sweeps rather than one brick's loop after another: in a model each layer runs once between the
others, so its weights are not hot in cache when it starts, but its input is (the layer before just
wrote it). A brick timed back to back has both hot and comes out faster than the layer in the model;
a sweep leaves its weights as cold as the model does, and rewriting its input (and touching its
output buffer) just before it runs makes those as hot as in the model.

The stopping rule is MeasureSettings' own, applied to every brick of the job: `warmup_count` untimed
sweeps, then timed sweeps until, after at least `min_count` of them and `min_seconds`, every brick's
median has a `confidence` interval within ±`stability`, or until `max_seconds` of timed sweeps (the
cap of the whole job's timed phase, never before `min_count` sweeps: a slow brick still gets them).
A brick keeps its place in every sweep until the job ends, its runs all recorded: a brick that left
would change what the others see between two of their runs (a brick left alone is timed back to back,
its caches hot). The bricks still unsettled at the cap stop with the reason `max_seconds` and are
judged so.

The verdict is `judge`'s, with the job's environment (other processes' CPU use) shared by every
brick. Interleaving the bricks also spreads a burst of contention over all of them, rather than on
the few measured while it lasted.

Imports nothing but the contract and the runtime: it runs where a predictor runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlscope.runtime.measure.loop import STOP_MAX_SECONDS, STOP_STABLE, LoopResult
from mlscope.runtime.measure.scenario_base import Measurement
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.measure.stats import median_ci_relative_halfwidth, summarize
from mlscope.runtime.measure.validity import EnvironmentMonitor, judge

__all__ = ["BrickJob", "BrickOutcome", "BrickSpec", "measure_bricks"]

_NS_PER_S = 1_000_000_000
# Once a brick has its minimums, its stopping rule is checked every this many sweeps (a sort of its
# latencies each time: cheap, but a hundred bricks over hundreds of sweeps add up).
_CHECK_EVERY = 4

_DTYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
}  # fmt: skip


@dataclass(frozen=True)
class BrickSpec:
    """A brick to measure: its name, its one-node ONNX model (serialised), the batch size it runs."""

    name: str
    model: bytes
    batch_size: int = 1


@dataclass
class BrickOutcome:
    """One brick's end: its single_stream measurement (the result shape's, raw latencies included)
    and cold start, or why it failed (`error`: {"type", "message", "phase"})."""

    name: str
    measurement: dict[str, Any] | None = None
    cold_start: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None


@dataclass
class BrickJob:
    """What the job came to: an outcome per spec (in their order), ONNX Runtime's version, and
    where its seconds went (import, sessions, measuring, statistics)."""

    outcomes: list[BrickOutcome]
    framework_version: str
    seconds: dict[str, float]


class _Brick:
    """A brick's session with its inputs and outputs bound, and its runs so far."""

    def __init__(self, ort: Any, spec: BrickSpec, options: Any, rng: np.random.Generator) -> None:
        self.spec = spec
        started = time.perf_counter()
        self.session = ort.InferenceSession(
            spec.model, sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.load_ms = (time.perf_counter() - started) * 1000
        self.binding = self.session.io_binding()
        # (array ORT reads, the values it is rewritten with before each run)
        self.inputs: list[tuple[np.ndarray, np.ndarray]] = []
        for value in self.session.get_inputs():
            shape = [size if isinstance(size, int) else spec.batch_size for size in value.shape]
            dtype = _DTYPES.get(value.type, np.float32)
            source: np.ndarray = (rng.standard_normal(shape) * 0.5).astype(dtype)
            target = source.copy()
            self.binding.bind_ortvalue_input(value.name, ort.OrtValue.ortvalue_from_numpy(target))
            self.inputs.append((target, source))
        for value in self.session.get_outputs():
            self.binding.bind_output(value.name, "cpu")
        started = time.perf_counter()
        self.session.run_with_iobinding(self.binding)
        self.first_ms = (time.perf_counter() - started) * 1000
        # The outputs are written from now on into arrays of ours, of the shapes the first run made:
        # no allocation in a timed run, and they can be touched before it (see `run`).
        self.outputs: list[np.ndarray] = []
        first = self.binding.get_outputs()
        self.binding.clear_binding_outputs()
        for value, made in zip(self.session.get_outputs(), first, strict=True):
            array = np.zeros(made.shape(), dtype=_DTYPES.get(made.data_type(), np.float32))
            self.binding.bind_output(value.name, "cpu", 0, array.dtype, list(array.shape), array.ctypes.data)
            self.outputs.append(array)
        self.latencies: list[int] = []
        self.own_ns = 0
        self.warmups = 0
        self.stop_reason: str | None = None

    def run(self, clock: Callable[[], int]) -> int:
        """One timed run, its inputs rewritten and its outputs touched just before, untimed: in the
        model the layer before has just written its input, and its output buffer is arena memory
        another layer has just used, both in cache. Returns the run's latency, ns; what the brick
        cost the job (preparation included) is added to `own_ns`."""
        began = clock()
        for target, source in self.inputs:
            np.copyto(target, source)
        for output in self.outputs:
            output.fill(0)
        run, binding = self.session.run_with_iobinding, self.binding
        started = clock()
        run(binding)
        ended = clock()
        self.own_ns += ended - began
        return ended - started

    def stable(self, settings: MeasureSettings) -> bool:
        """Whether the brick's median is known to ±stability at the settings' confidence."""
        halfwidth = median_ci_relative_halfwidth(np.asarray(self.latencies), settings.confidence)
        return bool(halfwidth <= settings.stability)


def _ort() -> Any:
    import onnxruntime

    return onnxruntime


def measure_bricks(
    specs: Sequence[BrickSpec],
    settings: MeasureSettings,
    *,
    threads: int | None = None,
    seed: int = 0,
    note: Callable[[str], None] = lambda line: None,
) -> BrickJob:
    """Measure every brick of `specs` in this process, in sweeps (see the module docstring).

    Args:
        specs: the bricks, in the order a model runs them (their sweep order).
        settings: warm-up, stopping rule, statistics and validity limits of every brick.
        threads: ONNX Runtime's intra-op threads (None: its default).
        seed: of the bricks' inputs.
        note: told of progress, a line at a time.

    Returns:
        An outcome per spec: a brick that fails to load or run is reported with its error, and the
        others are measured all the same.
    """
    seconds = {"import": 0.0, "sessions": 0.0, "measure": 0.0, "statistics": 0.0}
    began = time.perf_counter()
    ort = _ort()
    seconds["import"] = time.perf_counter() - began
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    rng = np.random.default_rng(seed)
    outcomes = {spec.name: BrickOutcome(spec.name) for spec in specs}
    bricks: list[_Brick] = []
    began = time.perf_counter()
    for spec in specs:
        try:
            bricks.append(_Brick(ort, spec, options, rng))
        except Exception as exc:  # one brick ORT cannot load or run: the others are measured
            outcomes[spec.name].error = {
                "type": type(exc).__name__,
                "message": str(exc)[:500],
                "phase": "load",
            }
    seconds["sessions"] = time.perf_counter() - began
    note(f"{len(bricks)} brick sessions in {seconds['sessions']:.2f} s; measuring")
    began = time.perf_counter()
    monitor = EnvironmentMonitor()
    monitor.start()
    _sweep(bricks, settings)
    environment = monitor.stop()
    seconds["measure"] = time.perf_counter() - began
    began = time.perf_counter()
    for brick in bricks:
        outcome = outcomes[brick.spec.name]
        outcome.cold_start = {
            "import_ms": None,
            "load_ms": brick.load_ms,
            "first_inference_ms": brick.first_ms,
        }
        outcome.measurement = _measurement(brick, settings, environment)
    seconds["statistics"] = time.perf_counter() - began
    return BrickJob([outcomes[spec.name] for spec in specs], str(ort.__version__), seconds)


def _sweep(bricks: list[_Brick], settings: MeasureSettings) -> None:
    """Warm-up sweeps, then timed ones until every brick's median is stable (checked every few
    sweeps once each has `min_count` runs and `min_seconds` have passed) or `max_seconds` of timed
    sweeps have passed. Every brick stays in every sweep, so each sees the same others run between
    two of its runs, as a layer does in its model."""
    clock = time.perf_counter_ns
    for _ in range(settings.warmup_count):
        for brick in bricks:
            brick.run(clock)
            brick.warmups += 1
    for brick in bricks:
        brick.own_ns = 0
    started, sweeps = clock(), 0
    waiting = list(bricks)
    while waiting:
        sweeps += 1
        for brick in bricks:
            brick.latencies.append(brick.run(clock))
        elapsed = clock() - started
        if sweeps < settings.min_count or elapsed < settings.min_seconds * _NS_PER_S:
            continue
        if elapsed >= settings.max_seconds * _NS_PER_S:
            for brick in waiting:
                brick.stop_reason = STOP_MAX_SECONDS
            break
        if sweeps % _CHECK_EVERY == 0:
            for brick in waiting:
                if brick.stable(settings):
                    brick.stop_reason = STOP_STABLE
            waiting = [brick for brick in waiting if brick.stop_reason is None]


def _measurement(brick: _Brick, settings: MeasureSettings, environment: dict[str, Any]) -> dict[str, Any]:
    latencies = np.asarray(brick.latencies, dtype=np.int64)
    loop = LoopResult(latencies, brick.own_ns, brick.stop_reason or STOP_MAX_SECONDS, brick.warmups)
    summary = summarize(latencies, settings)
    validity = judge(summary, loop, environment, settings)
    batch = brick.spec.batch_size
    return Measurement(
        scenario="single_stream",
        batch_size=batch,
        latency_ms=summary,
        throughput=batch / (summary.mean / 1000.0) if summary.mean > 0 else 0.0,
        validity=validity,
        latencies_ns=latencies,
        duration_s=brick.own_ns / _NS_PER_S,
        stop_reason=loop.stop_reason,
        warmup_count=brick.warmups,
        environment=environment,
        settings=settings,
    ).to_dict()
