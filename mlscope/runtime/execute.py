"""Runs one job where the predictor lives: import, fetch, load, first inference, measure, report.

This is the predictor runtime's entry point. The process runner starts it as
`python -m mlscope.runtime.execute` (a job as JSON on stdin, events as JSON lines on stdout); the
docker runner as `... --job FILE --result FILE` (the job read from a file, the final result or
error written to one, progress events still on stdout); the inline runner calls `execute` directly.
It imports no store, broker or web code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

from mlscope.contract.errors import UserError
from mlscope.contract.events import Emit, ErrorEvent, FinalEvent, PhaseEvent, PredictorEvent, ProbeEvent
from mlscope.contract.job import Job, JobFailed
from mlscope.contract.load import LoadSettings
from mlscope.contract.manifest import Manifest, parse_manifest
from mlscope.contract.result import Accuracy, ColdStart, Energy, Memory, PredictorResult, ResultMeasurement
from mlscope.runtime.compiled import cold_start_figures, compile_timed, note_recompiles
from mlscope.runtime.data import DatasetRef
from mlscope.runtime.dataset_pass import collect_outputs, postprocess, run_dataset_pass
from mlscope.runtime.energy import EnergyMeter, EnergyUnavailable, open_energy_meter
from mlscope.runtime.frameworks import get_framework, load_object, load_predictor_class
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.measure.parity import encode_outputs
from mlscope.runtime.measure.scenario_base import WholeJob
from mlscope.runtime.memory import PeakMemory
from mlscope.runtime.predictors import Predictor, PredictorError, PredictorOptions
from mlscope.runtime.predictors.inputs import synthetic_batches
from mlscope.runtime.scenarios import get_scenario
from mlscope.runtime.system import capture_system
from mlscope.runtime.trace.passes import add_model_spans, run_traced_passes
from mlscope.runtime.trace.spans import Clock, TraceContext, Tracer
from mlscope.runtime.warm_start import warm_start

__all__ = ["PARENT_ENV", "Emit", "Imported", "execute", "main", "prepare"]

# The environment variable in which the process that starts a predictor process names itself (its pid).
PARENT_ENV = "MLSCOPE_PREDICTOR_PARENT"


def _ms(start_ns: int) -> float:
    return round((time.perf_counter_ns() - start_ns) / 1e6, 3)


class _Phases:
    """Tracks the phase the job is in, so a failure names it, and tells the caller of each one."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.current = "import"

    def enter(self, phase: str, **detail: Any) -> None:
        self.current = phase
        self.emit(cast(PhaseEvent, {"event": "phase", "phase": phase, **detail}))


def _energy_meter(device: str) -> tuple[EnergyMeter | None, Energy | None]:
    """The energy counter for the evaluation's device, or None and the `energy` section that says
    why none is readable (every measurement then carries it: unavailable, never estimated)."""
    try:
        return open_energy_meter(device), None
    except EnergyUnavailable as exc:
        return None, {"unavailable": str(exc)}


def _measure_all(
    predictor: Predictor, job: Job, settings: MeasureSettings, phases: _Phases, tracer: Tracer
) -> list[ResultMeasurement]:
    measurements: list[ResultMeasurement] = []
    meter, unavailable = _energy_meter(job.device)
    timer = predictor.timer()
    scenarios = [get_scenario(name) for name in job.scenarios]
    load = LoadSettings.from_dict(job.load)
    pool = predictor.options.input_pool
    if "input_pool" not in job.options:
        # A query's samples are distinct inputs (multi_stream's; admission refused a smaller pool
        # set on purpose).
        pool = max(pool, *(scenario.inputs_needed(load) for scenario in scenarios))
    for index, batch_size in enumerate(job.batch_sizes):
        with tracer.span("preprocess", batch_size=batch_size):
            arrays = synthetic_batches(predictor.manifest, batch_size, pool, seed=predictor.options.seed)
            batches = [predictor.prepare(a) for a in arrays]
        # The first batch size was compiled in the cold start; each other one before it is measured.
        compile_ms = compile_timed(predictor, batches[0], tracer, batch_size) if index else None
        for scenario in scenarios:
            detail = scenario.phase_detail(load)
            phases.enter("measure", scenario=scenario.NAME, batch_size=batch_size, **detail)

            def progress(fraction: float, scenario_name: str = scenario.NAME, size: int = batch_size) -> None:
                phases.emit(
                    {
                        "event": "progress",
                        "scenario": scenario_name,
                        "batch_size": size,
                        "fraction": round(fraction, 3),
                    }
                )

            def probe(
                point: dict[str, Any], scenario_name: str = scenario.NAME, size: int = batch_size
            ) -> None:
                event = {"event": "probe", "scenario": scenario_name, "batch_size": size, **point}
                phases.emit(cast(ProbeEvent, event))

            compiled_before = predictor.compilations()
            with tracer.span("predict", scenario=scenario.NAME, batch_size=batch_size) as attributes:
                run = scenario.run(
                    predictor.predict,
                    batches,
                    batch_size,
                    settings,
                    timer=timer,
                    on_progress=progress,
                    record_starts=tracer.enabled("MODEL"),
                    load=load,
                    on_probe=probe,
                    energy=meter,
                )
                if attributes is not None:
                    attributes.update(
                        add_model_spans(
                            tracer, run, parent_id=tracer.current_id, max_spans=settings.max_model_spans
                        )
                    )
            measurement = run.to_dict()
            if unavailable is not None:
                measurement["energy"] = unavailable
            if compile_ms is not None:
                measurement["compile_ms"] = compile_ms
            note_recompiles(measurement, predictor, compiled_before)
            phases.emit(
                {
                    "event": "measurement",
                    "scenario": scenario.NAME,
                    "batch_size": batch_size,
                    "latency_ms": measurement["latency_ms"],
                    "throughput": measurement["throughput"],
                    "validity": measurement["validity"],
                    "load": measurement.get("load"),
                    "energy": measurement.get("energy"),
                }
            )
            measurements.append(measurement)
        raw_outputs = predictor.predict(batches[0])
        with tracer.span("postprocess", batch_size=batch_size):
            postprocess(predictor.manifest, predictor.outputs_to_numpy(raw_outputs))
        del batches, arrays
    if meter is not None:
        meter.close()
    return measurements


class _Answers(TypedDict, total=False):
    """What a result holds beside its measurements when it was asked for or could be read."""

    memory: Memory
    accuracy: Accuracy
    outputs: dict[str, Any]


def _pass_batch_size(job: Job, manifest: Manifest) -> int:
    """The batch size of the accuracy pass: a fixed-batch graph's own, else the largest measured,
    at most 64 (a dataset's samples are preprocessed a batch at a time, in memory)."""
    fixed = manifest.attributes.get("fixed_batch_size")
    return fixed if isinstance(fixed, int) else min(max(job.batch_sizes), 64)


def _answers(predictor: Predictor, job: Job, phases: _Phases, tracer: Tracer) -> _Answers:
    """The accuracy on the job's dataset and the raw outputs a parity check asked for (each only
    when asked): the result's `accuracy` and `outputs` entries."""
    answers: _Answers = {}
    batch_size = _pass_batch_size(job, predictor.manifest)
    if job.dataset:
        ref = DatasetRef.from_dict(job.dataset)
        phases.enter("accuracy", dataset=ref.name, count=ref.used)
        accuracy, outputs = run_dataset_pass(predictor, ref, batch_size, tracer, job.outputs_for)
        answers["accuracy"] = cast(Accuracy, accuracy)
    elif job.outputs_for:
        phases.enter("outputs", count=job.outputs_for)
        with tracer.span("outputs", count=job.outputs_for, batch_size=batch_size):
            outputs = collect_outputs(predictor, job.outputs_for, batch_size, predictor.options.seed)
    else:
        return answers
    if job.outputs_for:
        answers["outputs"] = encode_outputs(outputs)
    return answers


def _gpu_indices(device: str) -> tuple[int, ...]:
    return (int(device.partition(":")[2] or 0),) if device.startswith("cuda") else ()


@dataclass(frozen=True)
class Imported:
    """A framework's predictor class imported before its job arrived (`prepare`), and what its import
    cost: a process started ahead of its job imports while its parent still admits the request."""

    framework: str
    predictor_class: type[Predictor] | None
    import_ms: float
    warm_process: bool
    start_ns: int  # epoch ns, for the import's span
    end_ns: int


def prepare(framework: str) -> Imported:
    """Import `framework`'s predictor now, timed as `execute` times it. An import that fails is not
    raised here: `execute` imports again when the job comes, and fails in its import phase as it would
    have (with the job's trace and phase events)."""
    clock = Clock()
    try:
        warm_process = get_framework(framework).import_name in sys.modules
    except UserError:
        return Imported(framework, None, 0.0, False, 0, 0)
    start_ns, start = clock.now(), time.perf_counter_ns()
    try:
        predictor_class: type[Predictor] | None = load_predictor_class(framework)
    except Exception:
        predictor_class = None
    return Imported(framework, predictor_class, _ms(start), warm_process, start_ns, clock.now())


def _import(job: Job, tracer: Tracer, imported: Imported | None) -> tuple[type[Predictor], float, bool]:
    """The job's predictor class, its import time and whether the framework was imported already:
    the prepared import when it is this job's framework and succeeded, else imported now."""
    if imported is not None and imported.framework == job.framework and imported.predictor_class:
        tracer.add(
            "import",
            "APPLICATION",
            imported.start_ns,
            imported.end_ns,
            attributes={"warm_process": imported.warm_process, "prepared": True},
        )
        return imported.predictor_class, imported.import_ms, imported.warm_process
    warm_process = get_framework(job.framework).import_name in sys.modules
    start = time.perf_counter_ns()
    with tracer.span("import", warm_process=warm_process):
        predictor_class = load_predictor_class(job.framework)
    return predictor_class, _ms(start), warm_process


def execute(
    job: Job, emit: Emit, imported: Imported | None = None, ready: Callable[[], object] | None = None
) -> PredictorResult:
    """Run a job and return its result: system, framework, cold start and measurements.

    Args:
        imported: the framework as `prepare` imported it ahead of the job, in this process; None:
            imported here, as the job's first phase.
        ready: returns when the job may measure (a process given its job ahead waits for its runner,
            so no work of its parent's shares the measurement's time); None: at once.

    Raises:
        JobFailed: anything went wrong; it names the phase.
    """
    phases = _Phases(emit)
    predictor: Predictor | None = None
    memory = PeakMemory()
    memory.start()
    tracer = Tracer(job.trace_level, TraceContext.parse(job.traceparent))
    process: dict[str, Any] = {"mlscope.process": "predictor", "pid": os.getpid()}
    # A framework imported ahead of the job (`prepare`) was the evaluation's first work.
    began = imported.start_ns if imported is not None and imported.start_ns else tracer.clock.now()
    root = tracer.span_since(
        began,
        "evaluation",
        **process,
        model=job.manifest.get("name"),
        framework=job.framework,
        device=job.device,
    )
    root.__enter__()
    try:
        phases.enter("import")
        spec = get_framework(job.framework)
        predictor_class, import_ms, warm_process = _import(job, tracer, imported)

        if job.options.get("brick"):
            # One-node graphs timed by the framework's brick method, not the scenario loop.
            if spec.bricks is None:
                raise JobFailed("InvalidRequest", f"{spec.display} does not measure bricks", "import")
            if ready is not None:
                ready()
            result: PredictorResult = load_object(spec.bricks)(job, phases.enter)
            # The job's own: the worker adds it to its first brick's cold start.
            result["cold_start"] = {"import_ms": import_ms, "warm_process": warm_process}
            result["trace"] = {"trace_id": tracer.trace_id, "spans": tracer.spans}
            root.__exit__(None, None, None)
            return result

        manifest = parse_manifest(job.manifest, origin=job.origin)
        settings = MeasureSettings.from_dict(job.measure)
        options = PredictorOptions.from_dict(job.options)
        predictor = predictor_class(
            manifest=manifest, device=job.device, options=options, cache_dir=Path(job.cache_dir)
        )

        phases.enter("fetch")
        start = time.perf_counter_ns()
        with tracer.span("fetch", source=manifest.source.kind):
            predictor.fetch()
        fetch_ms = _ms(start)

        # A scenario that runs the whole job itself (the generate scenario's engine) takes over here.
        owner = next((s for s in (get_scenario(name) for name in job.scenarios) if s.RUNS_JOB), None)
        if owner is not None:
            if ready is not None:
                ready()
            generated = owner.run_job(WholeJob(predictor, job, settings, phases.enter, phases.emit, tracer))
            cold_start: ColdStart = {
                "import_ms": import_ms,
                "fetch_ms": fetch_ms,
                "warm_process": warm_process,
            }
            return _report(
                phases,
                predictor,
                memory,
                tracer,
                root,
                generated.framework,
                cold_start | generated.cold_start,
                generated.measurements,
                {},
            )

        phases.enter("load")
        start = time.perf_counter_ns()
        with tracer.span("load"):
            predictor.load()
        load_ms = _ms(start)

        first_arrays = synthetic_batches(manifest, job.batch_sizes[0], 1, seed=options.seed)[0]
        first = predictor.prepare(first_arrays)
        if predictor.compilations() is not None:
            phases.enter("compile")
        compile_ms = compile_timed(predictor, first, tracer, job.batch_sizes[0])

        phases.enter("first_inference")
        start = time.perf_counter_ns()
        with tracer.span("first_inference", batch_size=job.batch_sizes[0]):
            predictor.predict(first)
        first_inference_ms = _ms(start)
        del first

        def fresh() -> Predictor:
            return predictor_class(
                manifest=manifest, device=job.device, options=options, cache_dir=Path(job.cache_dir)
            )

        if ready is not None:
            ready()
        # The warm model replaces the cold one (closed by warm_start) when a warm start is measured.
        predictor, warm = warm_start(
            predictor, fresh, job, lambda loaded: loaded.prepare(first_arrays), phases.enter, tracer
        )

        measurements = _measure_all(predictor, job, settings, phases, tracer) if job.scenarios else []
        answers = _answers(predictor, job, phases, tracer)

        if tracer.enabled("FRAMEWORK") and job.scenarios:
            phases.enter("trace", level=job.trace_level)
            loaded = predictor

            def one_batch(batch_size: int) -> Any:
                arrays = synthetic_batches(manifest, batch_size, 1, seed=options.seed)[0]
                return loaded.prepare(arrays)

            run_traced_passes(
                predictor, one_batch, job.batch_sizes, tracer, settings, _gpu_indices(job.device)
            )

        cold_start = {
            "import_ms": import_ms,
            "load_ms": load_ms,
            "first_inference_ms": first_inference_ms,
            "fetch_ms": fetch_ms,
            # The framework was already imported by this process: import_ms is not a cold import.
            "warm_process": warm_process,
            **cold_start_figures(predictor, compile_ms),
            **warm,
        }
        return _report(
            phases, predictor, memory, tracer, root, predictor.describe(), cold_start, measurements, answers
        )
    except BaseException as exc:
        # The root span ends with the failure named on it; the spans so far travel with the error.
        root.__exit__(type(exc), exc, exc.__traceback__)
        failure = _as_failure(exc, phases.current)
        if failure is None:
            raise
        failure.spans = tracer.spans
        if failure is exc:
            raise
        raise failure from exc
    finally:
        if predictor is not None:
            predictor.close()


def _report(
    phases: _Phases,
    predictor: Predictor,
    memory: PeakMemory,
    tracer: Tracer,
    root: Any,
    framework: dict[str, Any],
    cold_start: ColdStart,
    measurements: list[ResultMeasurement],
    answers: _Answers,
) -> PredictorResult:
    """The job's result, and the root span ended."""
    phases.enter("report")
    memory_section = memory.section(predictor.device_memory_peak_bytes())
    present: _Answers = {"memory": memory_section} if memory_section is not None else {}
    result: PredictorResult = {
        # The framework's build facts stay with the framework: the system is the machine and its
        # installed stack, the same for every framework evaluated on it.
        "system": capture_system(),
        "framework": framework,
        "cold_start": cold_start,
        "measurements": measurements,
        **present,
        **answers,
        "trace": {"trace_id": tracer.trace_id, "spans": tracer.spans},
    }
    root.__exit__(None, None, None)  # the root span joins tracer.spans, which result shares
    return result


def _as_failure(exc: BaseException, phase: str) -> JobFailed | None:
    """The JobFailed an exception ends the job with; None for what must propagate (an interrupt)."""
    if isinstance(exc, JobFailed):
        return exc
    if isinstance(exc, (UserError, PredictorError)):
        return JobFailed(type(exc).__name__, str(exc), phase)
    if isinstance(exc, MemoryError):
        return JobFailed("OutOfMemory", f"out of memory: {exc}", phase)
    if isinstance(exc, Exception):
        return JobFailed(type(exc).__name__, str(exc) or repr(exc), phase, traceback.format_exc())
    return None


def _die_with_parent() -> None:
    """On Linux, ask the kernel to kill this process when the process that started it dies, so a
    worker killed with SIGKILL leaves no predictor running on behind it (its job is redelivered and
    would otherwise compete with its orphan for the machine)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    # The parent that started this process names itself (PARENT_ENV): it may have died while this
    # interpreter imported its modules, before this runs; then this process's parent is already
    # another (init, a subreaper) and comparing with it would miss the death.
    parent = int(os.environ.pop(PARENT_ENV, "0") or 0) or os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _write_atomically(path: Path, event: FinalEvent) -> None:
    """Write the final event so a reader sees all of it or no file: a predictor killed while
    writing leaves no half a result under the final name."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(event, separators=(",", ":")))
    os.replace(partial, path)


def _parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m mlscope.runtime.execute",
        description="Run one evaluation job; progress events go to stdout as JSON lines.",
    )
    parser.add_argument("--job", type=Path, help="read the job (JSON) from this file instead of stdin")
    parser.add_argument(
        "--result", type=Path, help="write the final result or error (JSON) to this file instead of stdout"
    )
    parser.add_argument(
        "--prepare",
        metavar="FRAMEWORK",
        help="import this framework's predictor before reading the job (a process started ahead of its "
        "job); a job of another framework imports its own; no job at all (stdin closed): exit 0",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Entry point of a predictor process: a job in, events as JSON lines on stdout.

    Args:
        argv: the command line's arguments; default sys.argv[1:]. `--job FILE` reads the job from a
            file (default: stdin); `--result FILE` writes the final {"event": "result" | "error"}
            there, replacing the file in one step (default: the last line on stdout).
    """
    arguments = _parse_arguments(argv)
    _die_with_parent()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    # Whatever a framework prints goes to stderr, so it cannot corrupt the event stream.
    os.dup2(2, 1)

    def emit(event: PredictorEvent | FinalEvent) -> None:
        protocol.write(json.dumps(event, separators=(",", ":")) + "\n")
        protocol.flush()

    def finish(event: FinalEvent) -> None:
        if arguments.result is None:
            emit(event)
        else:
            _write_atomically(arguments.result, event)

    imported = prepare(arguments.prepare) if arguments.prepare else None
    if arguments.job is not None:
        document, ready = arguments.job.read_text(), None
    else:
        # The job is stdin's first line; the runner closes stdin when the measurement may start.
        document, ready = sys.stdin.readline(), sys.stdin.read
    if arguments.job is None and not document.strip():
        return  # started ahead of a job that did not come: its parent no longer needs it
    job = Job.from_dict(json.loads(document))
    try:
        result = execute(job, emit, imported, ready)
    except JobFailed as failure:
        error: ErrorEvent = {
            "event": "error",
            **failure.to_error(),
            "detail": failure.detail,
            "spans": failure.spans,
        }
        finish(error)
        _exit(1)
    finish({"event": "result", "result": result})
    _exit(0)


def _exit(code: int) -> None:
    """End the process now that its final event is out: what is left is the interpreter's and the
    framework's teardown (tens of milliseconds for a loaded runtime), which nobody waits for."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
