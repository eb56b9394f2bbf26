"""Measuring bricks and whole models for `mlscope bricks`: a brick is a one-node ONNX file (or, for
PyTorch, a tiny module running one layer: `measure_modules`) whose single_stream measurement is
stored as an evaluation's result like any other, so a later model (or a later run) reuses it.

    brick name ─ stored for (name, framework, framework version, system)? ─▶ reuse it
    a model's bricks not stored yet ─▶ each written to <cache>/bricks/<key>/<name>.onnx and admitted
        ─▶ ONE job measures them all (mlscope.runtime.bricks: one process, ORT imported once)
        ─▶ each stored as its own evaluation (model brick-<key[:16]>, runner inline)
    model REF ─▶ evaluated the ordinary way (single_stream, batch 1), timed

What a brick is and how a model is cut into them is `mlscope.analysis.bricks`'s; the pipeline that
joins the two, and the registry of the frameworks whose models can be cut into bricks, are the
bricks service's (`mlscope.services.bricks`): this layer and analysis may not import each other.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest
from mlscope.contract.settings import Settings
from mlscope.contract.system_ids import machine_id
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.bricks import BrickJob, BrickSpec, measure_bricks
from mlscope.runtime.frameworks import FRAMEWORKS as FRAMEWORK_SPECS
from mlscope.runtime.frameworks import get_framework, installed_version, load_object
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.predictors.onnxruntime.export import onnx_graph
from mlscope.runtime.system import capture_system, system_id
from mlscope.store import Store, open_store
from mlscope.store.records import subsample_latencies
from mlscope.workers.local import admit_all, evaluate_here

__all__ = [
    "BRICK_MEASURE",
    "BrickJobReport",
    "BrickResult",
    "BrickRuns",
    "brick_files",
    "brick_result",
    "single_stream",
]

# The stopping rule of each brick in its job (runtime.bricks): 3 warm-up runs, then at least 15 timed
# ones, until its median is known to ±5% (95%: the precision the bricks had as evaluations of their
# own), or 0.25 s of the job's time spent on it (not settled by then: judged unstable, not valid).
BRICK_MEASURE = {
    "warmup_count": 3,
    "warmup_seconds": 0.0,
    "min_count": 15,
    "min_seconds": 0.0,
    "max_seconds": 0.25,
    "stability": 0.05,
    "bootstrap_resamples": 500,
}


@dataclass(frozen=True)
class BrickResult:
    """A brick's stored single_stream measurement: median and its confidence interval, ms."""

    median_ms: float
    ci_ms: tuple[float, float]
    evaluation_id: str
    measured_now: bool
    min_ms: float | None = None
    # The measurement's validity verdict: an estimate built on an invalid brick is not valid either.
    valid: bool = True
    # Its fastest run with nothing flushed (runtime.bricks' hot runs); None for a brick stored before.
    hot_min_ms: float | None = None


def single_stream(result: Mapping[str, Any], batch_size: int) -> dict[str, Any] | None:
    """The result's single_stream measurement at `batch_size`, if it has one."""
    for measurement in result.get("measurements") or ():
        if measurement.get("scenario") == "single_stream" and measurement.get("batch_size") == batch_size:
            return dict(measurement)
    return None


def brick_result(result: Mapping[str, Any], batch_size: int, measured_now: bool) -> BrickResult | None:
    """The brick's figures in a stored result (its single_stream measurement at `batch_size`)."""
    measurement = single_stream(result, batch_size)
    if measurement is None:
        return None
    latency = measurement["latency_ms"]
    ci = latency.get("median_ci") or [latency["median"], latency["median"]]
    low = latency.get("min")
    return BrickResult(
        float(latency["median"]),
        (float(ci[0]), float(ci[1])),
        result["id"],
        measured_now,
        None if low is None else float(low),
        (measurement.get("validity") or {}).get("valid") is True,
        None if measurement.get("hot_min_ms") is None else float(measurement["hot_min_ms"]),
    )


@dataclass
class BrickJobReport:
    """One job's bricks: each one's result by key (or why it failed, as text), and where the job's
    seconds went (build: write and admit; import, sessions, measure, statistics: the job's; store)."""

    results: dict[str, BrickResult | str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class BrickRuns:
    """Bricks and models measured on this machine, into the settings' store.

    Attributes:
        threads: intra-op threads of every measurement (None: ONNX Runtime's default).
        brick_measure: the bricks' measure settings.

    Raises (on construction):
        UserError: a framework not installed here, or a device its bricks cannot run on. (Which
            frameworks can be cut into bricks at all is the bricks service's registry, checked first
            by `mlscope.services.bricks`.)
    """

    settings: Settings
    framework: str = "onnxruntime"
    threads: int | None = None
    brick_measure: Mapping[str, Any] = field(default_factory=lambda: dict(BRICK_MEASURE))
    # Where PyTorch's bricks run ("cpu", "cuda", "cuda:1"); ONNX Runtime's run on the CPU only.
    device: str = "cpu"

    def __post_init__(self) -> None:
        self._check_setup()
        self.registry = ModelRegistry.load(self.settings.manifests, cache_dir=self.settings.cache_dir)
        system = capture_system()
        if self.settings.instance_type:
            system["instance_type"] = self.settings.instance_type
        self.system_id = system_id(system)
        self.system = {**system, "id": self.system_id, "machine_id": machine_id(system)}
        self._store: Store | None = None

    def _check_setup(self) -> None:
        """Set `version` to the framework's installed here.

        Raises:
            UserError: the framework is not installed here, or its bricks cannot run on `device`.
        """
        version = installed_version(get_framework(self.framework))
        if version is None:
            raise UserError(f"{self.framework} is not installed here", field="framework")
        self._check_device()
        self.version: str = version

    def place(self) -> dict[str, Any]:
        """Where the measurements run, for a report: nothing to say for this machine."""
        return {}

    def _check_device(self) -> None:
        """Raises UserError, naming the device and what is available, when the bricks cannot run on
        `device` here."""
        if self.device == "cpu":
            return
        check = get_framework(self.framework).brick_devices
        if check is None:
            able = [spec for spec in FRAMEWORK_SPECS.values() if spec.brick_devices is not None]
            also = "".join(f"; {spec.display}'s also run on a GPU (--framework {spec.name})" for spec in able)
            raise UserError(
                f"device {self.device!r}: {self.framework}'s bricks are measured on the CPU only; "
                f"available: cpu{also}",
                field="device",
            )
        refusal = load_object(check)(self.device)
        if refusal is not None:
            raise UserError(refusal, field="device")

    def _options(self, **more: Any) -> dict[str, Any]:
        return {**more, **({"threads": self.threads} if self.threads else {})}

    def admit(self, ref: str) -> Manifest:
        """The manifest `ref` resolves to for this framework.

        Raises:
            UserError: `ref` names no model this framework can run.
        """
        document = {"batch_sizes": [1]}
        return admit_all(ref, [self.framework], document, settings=self.settings, registry=self.registry)[
            0
        ].manifest

    def resolve(self, ref: str) -> tuple[Manifest, Path]:
        """The manifest `ref` resolves to, and its ONNX graph (exported on first use).

        Raises:
            UserError: `ref` names no model this framework can run.
            PredictorError: the export failed.
        """
        manifest = self.admit(ref)
        return manifest, onnx_graph(manifest, self.settings.cache_dir)

    def module(self, ref: str) -> tuple[Manifest, Any]:
        """The manifest `ref` resolves to, and its PyTorch module as `mlscope run -f pytorch` builds it
        (random weights seeded as the predictor's, eval mode, on the CPU).

        Raises:
            UserError: `ref` names no model PyTorch can run.
            PredictorError: the module cannot be built.
        """
        from mlscope.runtime.predictors.pytorch.models import build_module

        manifest = self.admit(ref)
        return manifest, build_module(manifest, seed=0)

    def _lookups(self) -> Store:
        """One store for every brick's lookup (a model has up to a hundred and more), opened once."""
        if self._store is None:
            self._store = open_store(self.settings.store_url)
        return self._store

    def close(self) -> None:
        """Close the lookups' store (measurements open their own)."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def stored(self, name: str, batch_size: int) -> BrickResult | None:
        """The newest stored result of brick `name` on this system and framework version."""
        rows = self._lookups().list_evaluations(
            model=name, framework=self.framework, system_id=self.system_id, status="succeeded", limit=20
        )
        for row in rows:
            # torch reports its build's local tag ("2.14.1+cu130") where its distribution's metadata,
            # what `self.version` is, does not: one installed framework either way.
            stored_version = str((row.get("framework") or {}).get("version") or "")
            if stored_version.split("+")[0] == self.version.split("+")[0]:
                found = brick_result(row, batch_size, measured_now=False)
                if found is not None:
                    return found
        return None

    def save_brick(self, key: str, name: str, model: Any) -> Path:
        """Brick `name`'s one-node ONNX model, written once to <cache>/bricks/<key>/<name>.onnx."""
        import onnx

        path = self.settings.cache_dir / "bricks" / key / f"{name}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file():
            partial = path.with_suffix(".partial")
            onnx.save(model, str(partial))
            partial.rename(path)
        return path

    def measure(self, bricks: Sequence[tuple[str, str, Any, int]]) -> BrickJobReport:
        """Measure `bricks` ((key, name, onnx ModelProto, batch size) each, in the order a model runs them;
        a brick given k times: k sessions timed in turn) in one job in this process
        (`mlscope.runtime.bricks`), and store each brick as the result of its own evaluation (model
        `brick-<key[:16]>`), so that a later model, or a later run, reuses it.

        Returns:
            Each brick's result by key (a brick that failed: why, as text), and the seconds spent.
        """

        report = BrickJobReport()
        began = time.perf_counter()
        specs, admitted = [], {}
        serialised: dict[str, bytes] = {}
        for key, name, model, batch_size in bricks:
            if name in serialised:  # the brick met again in the model: one more session of it
                specs.append(BrickSpec(name, serialised[name], batch_size))
                continue
            if key in report.results:
                continue
            try:
                path = self.save_brick(key, name, model)
                # The brick is a node of the optimised graph already: optimising it again could change it.
                request = self._brick_request(batch_size, graph_optimization_level="disable")
                admitted[name] = admit_all(
                    str(path), [self.framework], request, settings=self.settings, registry=self.registry
                )[0]
            except Exception as exc:  # the brick model cannot be saved or admitted
                report.results[key] = f"{type(exc).__name__}: {exc}"[:200]
                continue
            serialised[name] = model.SerializeToString()
            specs.append(BrickSpec(name, serialised[name], batch_size))
        report.seconds["build"] = time.perf_counter() - began
        if not specs:
            return report
        settings = MeasureSettings.from_dict(dict(self.brick_measure))
        job = measure_bricks(specs, settings, threads=self.threads)
        records = {name: item.record() for name, item in admitted.items()}
        batches = {name: item.request.batch_sizes[0] for name, item in admitted.items()}
        self._store_job(job, records, {name: key for key, name, _, _ in bricks}, batches, report)
        return report

    def measure_modules(
        self, bricks: Sequence[tuple[str, str, Any, int, Mapping[str, Any]]], cudnn_benchmark: bool = False
    ) -> BrickJobReport:
        """Measure PyTorch `bricks` ((key, name, ModuleBrickSpec, batch size, key document) each, in the
        order a model runs them) in one job in this process (`mlscope.runtime.predictors.pytorch.bricks`)
        and store each as the result of its own evaluation, as `measure` does ONNX Runtime's. A module
        brick has no file to admit: its evaluation's manifest snapshot is its key document.

        On a CUDA device the job runs with `torch.backends.cudnn.benchmark` off (as the whole model
        is measured), or, with `cudnn_benchmark`, on and in a process of its own (a fresh cuDNN
        algorithm cache: `measure_module_bricks_apart`)."""
        from mlscope.runtime.predictors.pytorch.bricks import (
            measure_module_bricks,
            measure_module_bricks_apart,
        )

        report = BrickJobReport()
        began = time.perf_counter()
        specs, records, batches, keys = [], {}, {}, {}
        for key, name, spec, batch_size, document in bricks:
            specs.append(spec)
            keys[name], batches[name] = key, batch_size
            request = {**self._brick_request(batch_size), "model": name, "framework": self.framework}
            records[name] = {
                "model": {"name": name, "version": "brick", "manifest_sha256": key},
                "manifest": {
                    "name": name,
                    "version": "brick",
                    "source": {"kind": "brick"},
                    "brick": document,
                },
                "framework": {"name": self.framework, "version": self.version},
                "runner": "inline",
                "device": self.device,
                "request": request,
                "trace_level": "NO_TRACE",
            }
        report.seconds["build"] = time.perf_counter() - began
        if not specs:
            return report
        settings = MeasureSettings.from_dict(dict(self.brick_measure))
        measure = measure_module_bricks_apart if cudnn_benchmark else measure_module_bricks
        job = measure(
            specs, settings, threads=self.threads, device=self.device, cudnn_benchmark=cudnn_benchmark
        )
        self._store_job(job, records, keys, batches, report)
        return report

    def _store_job(
        self,
        job: BrickJob,
        records: Mapping[str, Mapping[str, Any]],
        keys: Mapping[str, str],
        batches: Mapping[str, int],
        report: BrickJobReport,
    ) -> None:
        """Store each outcome of `job` as its own evaluation (created from `records[name]`), its result
        (or why it failed) into `report.results` by key, and the job's and the writes' seconds."""
        report.seconds.update(job.seconds)
        began = time.perf_counter()
        store = self._lookups()
        for outcome in job.outcomes:
            record = dict(records[outcome.name])
            record["framework"] = {"name": self.framework, "version": job.framework_version}
            evaluation_id = store.create_evaluation(**record)
            if outcome.measurement is None:
                error = outcome.error or {"type": "BrickError", "message": "not measured", "phase": "measure"}
                store.fail_evaluation(evaluation_id, error=error)
                report.results[keys[outcome.name]] = f"{error['type']}: {str(error['message'])[:160]}"
                continue
            measurement = subsample_latencies(outcome.measurement, self.settings.max_raw_latencies)
            store.finish_evaluation(
                evaluation_id,
                system=self.system,
                framework={"name": self.framework, "version": job.framework_version},
                cold_start=outcome.cold_start,
                measurements=[measurement],
            )
            found = brick_result(
                {"id": evaluation_id, "measurements": [measurement]}, batches[outcome.name], True
            )
            report.results[keys[outcome.name]] = (
                found if found is not None else "no single_stream measurement"
            )
        report.seconds["store"] = time.perf_counter() - began

    def _brick_request(self, batch_size: int, **options: Any) -> dict[str, Any]:
        return {
            "batch_sizes": [batch_size],
            "scenarios": ["single_stream"],
            # Measured in this process, in one job with the model's other bricks (runtime.bricks).
            "runner": "inline",
            "device": self.device,
            "measure": dict(self.brick_measure),
            "options": self._options(**options),
        }

    def whole(self, ref: str, fields: Mapping[str, Any]) -> tuple[Mapping[str, Any], float]:
        """Model `ref` measured the ordinary way (single_stream, batch 1) with the request `fields`
        (runner, measure, ...), and the seconds that took."""
        document = {
            **fields,
            "batch_sizes": [1],
            "scenarios": ["single_stream"],
            "options": self._options(**(fields.get("options") or {})),
        }
        started = time.perf_counter()
        result = evaluate_here(ref, [self.framework], document, settings=self.settings)[0]
        return result, time.perf_counter() - started


def brick_files(cache_dir: Path) -> list[Path]:
    """The brick models written so far."""
    return sorted((cache_dir / "bricks").glob("*/brick-*.onnx"))
