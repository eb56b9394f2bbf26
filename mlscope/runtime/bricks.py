"""Many bricks measured in one predictor job (DLBricks, arXiv 1911.07967): one process, ONNX Runtime
imported once, a session per brick created back to back, then each brick timed in turn.

    specs ─▶ a session per brick (optimisation off: the node is optimised already), its inputs and
             its outputs bound once (IOBinding: no allocation, no conversion to numpy in a timed run)
          ─▶ per brick: warm-up runs, then timed runs, each prepared untimed: the core's private
             caches flushed, its inputs rewritten, its outputs touched
          ─▶ per brick: stopping rule, statistics and verdict as any single_stream measurement
          ─▶ per brick: HOT_RUNS more runs, nothing flushed: the fastest, `hot_min_ms`, is the least
             the layer can cost (Benanza's lower bounds are made of it)

Why the flush. In a model each layer runs once between the others, so its weights and its kernel's
state are not in the core's own caches when it starts, but its input is (the layer before just wrote
it) and so is its output buffer (arena memory another layer just used). A brick timed back to back
has all of them hot and comes out faster than the layer in the model, so the estimate falls under
the model measured whole. Writing a buffer twice the size of the private caches (L1d + L2, from
sysfs) before each run, then the brick's inputs and outputs, leaves its weights in the shared
last-level cache, as in the model. (Timing the bricks interleaved, each once per sweep, moves a busy
machine's noise into every brick instead; docs/bricks.md has the comparison.) What it does not
reproduce: a model whose weights exceed the last-level cache streams them from memory; its bricks
still find theirs in that cache, so such a model's estimate reads low.

The stopping rule is MeasureSettings' own, per brick: `warmup_count` untimed runs, then timed runs
until, after at least `min_count` of them and `min_seconds`, the median has a `confidence` interval
within ±`stability`, or `max_seconds` of the job's time have gone to the brick (its runs and their
untimed preparation: the cap bounds what a brick costs the job). The verdict is `judge`'s, with the
job's environment (other processes' CPU use over the whole job) shared by every brick.

Imports nothing but the contract and the runtime: it runs where a predictor runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mlscope.runtime.measure.loop import STOP_MAX_SECONDS, STOP_STABLE, LoopResult
from mlscope.runtime.measure.scenario_base import Measurement
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.measure.stats import median_ci_relative_halfwidth, summarize
from mlscope.runtime.measure.validity import EnvironmentMonitor, judge

__all__ = ["BrickJob", "BrickOutcome", "BrickSpec", "TimedBrick", "brick_job", "measure_bricks", "run_job"]

_NS_PER_S = 1_000_000_000
# After its timed runs, each brick runs up to HOT_RUNS times more with nothing flushed (`_hot`), at least
# HOT_MIN_RUNS, and no longer than HOT_SHARE of what its timed runs took: the fastest is what a lower
# bound is made of (5 runs each left the critical path above 7 of 22 models' fastest whole runs, 20
# above 2, but cost 2.3 s more of 25.7). Not in its statistics: they describe the brick as in its model.
HOT_RUNS = 20
HOT_MIN_RUNS = 3
HOT_SHARE = 0.25
# Once a brick has its minimums, its stopping rule is checked every this many runs (a sort of its
# latencies each time: cheap, but hundreds of bricks over hundreds of runs add up).
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

    def run(self, clock: Callable[[], int], evict: np.ndarray | None = None) -> int:
        """One timed run, prepared untimed: the core's private caches flushed by writing `evict`
        (when given: so the brick's weights and state come from the shared cache, as a layer's do in
        its model, where the others ran since), then its inputs rewritten and its outputs touched
        (in the model the layer before has just written its input, and its output buffer is arena
        memory another layer has just used, both in cache). Returns the run's latency, ns; what the
        brick cost the job (preparation included) is added to `own_ns`."""
        began = clock()
        if evict is not None:
            evict += 1
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
    """Measure every brick of `specs` in this process, one after the other (see the module docstring).

    Args:
        specs: the bricks, in the order a model runs them. A name given k times is one brick: k
            sessions, each with its own copy of the weights, timed in turn as one.
        settings: warm-up, stopping rule, statistics and validity limits of every brick.
        threads: ONNX Runtime's intra-op threads (None: its default).
        seed: of the bricks' inputs.
        note: told of progress, a line at a time.

    Returns:
        An outcome per brick (name), in the order first given: a brick that fails to load or run is
        reported with its error, and the others are measured all the same.
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
    return run_job(
        specs, lambda spec: _Brick(ort, spec, options, rng), settings, str(ort.__version__), seconds, note
    )


class TimedBrick(Protocol):
    """What `run_job` times: a brick opened for a framework (an ORT session, a PyTorch module), its
    cold-start figures, and its runs so far (`run` appends nothing: the job does)."""

    spec: Any  # has .name and .batch_size
    load_ms: float
    first_ms: float
    latencies: list[int]
    own_ns: int
    warmups: int

    def run(self, clock: Callable[[], int], evict: np.ndarray | None = None) -> int: ...


def run_job(
    specs: Sequence[Any],
    open_brick: Callable[[Any], TimedBrick],
    settings: MeasureSettings,
    framework_version: str,
    seconds: dict[str, float],
    note: Callable[[str], None] = lambda line: None,
) -> BrickJob:
    """The framework-neutral part of a brick job: every spec (with .name and .batch_size) opened by
    `open_brick` back to back (one that fails is reported, the others measured), then each brick timed
    apart with the private caches flushed before every run, under its own stopping rule and verdict
    (the module docstring). `seconds` gets "sessions", "measure" and "statistics" added."""
    outcomes = {spec.name: BrickOutcome(spec.name) for spec in specs}
    groups: dict[str, _Occurrences] = {}
    began = time.perf_counter()
    for spec in specs:
        try:
            brick = open_brick(spec)
        except Exception as exc:  # one brick the framework cannot load or run: the others are measured
            outcomes[spec.name].error = {
                "type": type(exc).__name__,
                "message": str(exc)[:500],
                "phase": "load",
            }
            continue
        groups.setdefault(spec.name, _Occurrences(spec.name)).bricks.append(brick)
    seconds["sessions"] = time.perf_counter() - began
    note(f"{len(groups)} bricks, {sum(len(g.bricks) for g in groups.values())} sessions; measuring")
    began = time.perf_counter()
    monitor = EnvironmentMonitor()
    monitor.start()
    evict = np.zeros(private_cache_bytes() // 8 * 2, np.float64)  # twice the caches' size
    for group in groups.values():
        _apart(group, settings, evict)
    environment = monitor.stop()
    seconds["measure"] = time.perf_counter() - began
    began = time.perf_counter()
    for name, group in groups.items():
        first = group.bricks[0]
        outcome = outcomes[name]
        outcome.error = None
        outcome.cold_start = {
            "import_ms": None,
            "load_ms": first.load_ms,
            "first_inference_ms": first.first_ms,
        }
        outcome.measurement = _measurement(group, settings, environment)
    seconds["statistics"] = time.perf_counter() - began
    return BrickJob(list(outcomes.values()), framework_version, seconds)


@dataclass
class _Occurrences:
    """A brick's sessions (one per time its name is given), timed in turn as one brick."""

    name: str
    bricks: list[TimedBrick] = field(default_factory=list)
    stop_reason: str | None = None
    # The fastest of its runs with nothing flushed (`_hot`), ns.
    hot_min_ns: int | None = None

    def latencies(self) -> np.ndarray:
        """Every run of every session, in the order they ran."""
        return np.asarray(
            [run for runs in zip(*(b.latencies for b in self.bricks), strict=True) for run in runs], np.int64
        )

    def stable(self, settings: MeasureSettings) -> bool:
        """Whether the brick's median is known to ±stability at the settings' confidence."""
        return bool(median_ci_relative_halfwidth(self.latencies(), settings.confidence) <= settings.stability)


def private_cache_bytes() -> int:
    """The size of this machine's per-core caches (L1 data and L2 of the first CPU, from Linux's
    sysfs), or 2 MiB where it cannot be read."""
    total = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if level <= 2 and kind in ("Data", "Unified"):
            scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
            total += int(size.rstrip("KM")) * scale
    return total or 2 << 20


def _apart(group: _Occurrences, settings: MeasureSettings, evict: np.ndarray) -> None:
    """Time one brick's runs one after the other (its sessions in turn), each after `evict` is
    written, until its median is stable (after `min_count` runs and `min_seconds`, checked every
    few runs) or `max_seconds` of the job's time have gone to it."""
    clock = time.perf_counter_ns
    for _ in range(settings.warmup_count):
        for brick in group.bricks:
            brick.run(clock, evict)
            brick.warmups += 1
    for brick in group.bricks:
        brick.own_ns = 0
    runs = 0
    while True:
        for brick in group.bricks:
            brick.latencies.append(brick.run(clock, evict))
        runs += len(group.bricks)
        spent = sum(brick.own_ns for brick in group.bricks)
        if runs < settings.min_count or spent < settings.min_seconds * _NS_PER_S:
            continue
        if spent >= settings.max_seconds * _NS_PER_S:
            group.stop_reason = STOP_MAX_SECONDS
            break
        if runs % _CHECK_EVERY < len(group.bricks) and group.stable(settings):
            group.stop_reason = STOP_STABLE
            break
    _hot(group, clock)


def _hot(group: _Occurrences, clock: Callable[[], int]) -> None:
    """Up to HOT_RUNS runs of each of the brick's sessions back to back (HOT_MIN_RUNS at least, and no
    more once they took HOT_SHARE of its timed runs' time), nothing flushed: its weights, its kernel's
    state, its input and output all in the core's caches, the least the layer can cost. Their fastest
    is `hot_min_ns` (Benanza's lower bounds); they are not in the brick's statistics."""
    fastest = None
    allowed = HOT_SHARE * sum(brick.own_ns for brick in group.bricks)
    spent = 0
    for runs in range(HOT_RUNS):
        if runs >= HOT_MIN_RUNS and spent >= allowed:
            break
        for brick in group.bricks:
            latency = brick.run(clock, None)
            spent += latency
            fastest = latency if fastest is None else min(fastest, latency)
    group.hot_min_ns = fastest


def _measurement(
    group: _Occurrences, settings: MeasureSettings, environment: dict[str, Any]
) -> dict[str, Any]:
    latencies = group.latencies()
    own_ns = sum(brick.own_ns for brick in group.bricks)
    warmups = sum(brick.warmups for brick in group.bricks)
    loop = LoopResult(latencies, own_ns, group.stop_reason or STOP_MAX_SECONDS, warmups)
    summary = summarize(latencies, settings)
    validity = judge(summary, loop, environment, settings)
    batch = group.bricks[0].spec.batch_size
    return Measurement(
        scenario="single_stream",
        batch_size=batch,
        latency_ms=summary,
        throughput=batch / (summary.mean / 1000.0) if summary.mean > 0 else 0.0,
        validity=validity,
        latencies_ns=latencies,
        duration_s=own_ns / _NS_PER_S,
        stop_reason=loop.stop_reason,
        warmup_count=warmups,
        environment=environment,
        settings=settings,
    ).to_dict() | ({} if group.hot_min_ns is None else {"hot_min_ms": group.hot_min_ns / 1e6})


def brick_job(job: Any, enter: Callable[..., None]) -> dict[str, Any]:
    """A farm's brick job (`options.brick`, ONNX Runtime's `FrameworkSpec.bricks`): the job's own brick
    and its brick group's other members (`job.group`), each a one-node ONNX graph named by its
    manifest, measured together by `measure_bricks` with the job's measure settings and threads, each
    brick under its evaluation id.

    Returns:
        The job's result: system, framework, and `bricks`: each brick's end by evaluation id,
        {"cold_start", "measurements"} or {"error"} (a brick whose graph cannot be had, or that
        fails to load or run, fails alone; the others are measured).
    """
    from mlscope.contract.manifest import parse_manifest
    from mlscope.runtime.predictors.onnxruntime.export import onnx_graph
    from mlscope.runtime.system import capture_system

    own = {"evaluation_id": job.evaluation_id, "manifest": job.manifest, "origin": job.origin}
    members = [{**own, "batch_size": job.batch_sizes[0]}, *job.group]
    enter("fetch", bricks=len(members))
    specs: list[BrickSpec] = []
    ends: dict[str, dict[str, Any]] = {}
    for member in members:
        try:
            manifest = parse_manifest(member["manifest"], origin=member["origin"])
            graph = onnx_graph(manifest, Path(job.cache_dir))
            specs.append(BrickSpec(member["evaluation_id"], graph.read_bytes(), int(member["batch_size"])))
        except Exception as exc:  # one brick's graph cannot be had: the others are measured
            error = {"type": type(exc).__name__, "message": str(exc)[:500], "phase": "fetch"}
            ends[member["evaluation_id"]] = {"error": error}
    enter("measure", bricks=len(specs))
    settings = MeasureSettings.from_dict(dict(job.measure))
    measured = measure_bricks(specs, settings, threads=job.options.get("threads"))
    for outcome in measured.outcomes:
        if outcome.measurement is None:
            ends[outcome.name] = {"error": outcome.error or {"type": "BrickError", "message": "not measured"}}
        else:
            ends[outcome.name] = {"cold_start": outcome.cold_start, "measurements": [outcome.measurement]}
    enter("report")
    return {"system": capture_system(), "framework": {"version": measured.framework_version}, "bricks": ends}
