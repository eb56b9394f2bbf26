"""`mlscope bricks`'s pipeline: a model's layers measured as bricks (those the store does not hold yet
for this system and framework version), the model measured whole, and the two set side by side.

    REF ─ admit (resolves the manifest) ─▶ the ONNX graph ─▶ decompose (analysis.bricks)
        ─▶ each unique brick: stored result for (name, framework, version, system)? else write
           <cache>/bricks/<key>/brick-<key[:16]>.onnx and evaluate it like any .onnx reference
        ─▶ the model whole, the ordinary way ─▶ compose: estimate, interval, bounds, overhead

Bricks are ordinary evaluations in the store, so a later model (or a later run) reuses them. A model
whose graph cannot be decomposed (control flow, an op whose brick fails to build or run) is still
measured whole; its report says which layers and why, and has no estimate.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlscope.analysis.bricks import (
    BrickPlan,
    BrickTime,
    NotABrick,
    brick_model,
    brick_name,
    compose,
    decompose,
    identity_plan,
    plan_bricks,
)
from mlscope.contract.errors import UserError
from mlscope.contract.settings import Settings
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.frameworks import get_framework, installed_version
from mlscope.runtime.predictors.inputs import synthetic_batch
from mlscope.runtime.predictors.onnxruntime.export import onnx_graph
from mlscope.runtime.system import capture_system, system_id
from mlscope.store import open_store
from mlscope.workers.local import admit_all, evaluate_here

__all__ = ["BRICK_MEASURE", "FRAMEWORKS", "BrickBench", "summary"]

# The frameworks whose graphs can be cut into bricks: ONNX Runtime's, an ONNX graph it optimises.
FRAMEWORKS = ("onnxruntime",)
# Short measurements: a brick is one op, and thousands of its runs take no longer than a few of the
# model's; the stopping rule still asks for a median known to ±5%.
BRICK_MEASURE = {
    "warmup_count": 5,
    "warmup_seconds": 0.0,
    "min_count": 50,
    "min_seconds": 0.05,
    "max_seconds": 2.0,
    "stability": 0.05,
    "bootstrap_resamples": 500,
}

Note = Callable[[str], None]


@dataclass
class _Measured:
    time: BrickTime
    evaluation_id: str
    measured_now: bool


@dataclass
class BrickBench:
    """Measures models as bricks and whole on this machine, into the settings' store.

    Attributes:
        whole: the request fields of the whole-model measurement (measure, options, runner, ...).
        threads: intra-op threads of both measurements (None: ONNX Runtime's default); part of a
            brick's key, as is the optimisation level.
        brick_measure: the bricks' measure settings.
        note: told of progress, one line at a time.
    """

    settings: Settings
    whole: Mapping[str, Any]
    threads: int | None = None
    level: str = "all"
    brick_measure: Mapping[str, Any] = field(default_factory=lambda: dict(BRICK_MEASURE))
    note: Note = lambda line: None  # noqa: E731
    framework: str = "onnxruntime"
    _registry: ModelRegistry | None = None
    _system: str | None = None
    _call: _Measured | None = None

    def __post_init__(self) -> None:
        if self.framework not in FRAMEWORKS:
            raise UserError(
                f"framework {self.framework!r} cannot be decomposed into bricks; only "
                f"{', '.join(FRAMEWORKS)} is supported for now (its graph is an ONNX graph ORT optimises)",
                field="framework",
            )
        self.version = installed_version(get_framework(self.framework))
        if self.version is None:
            raise UserError(f"{self.framework} is not installed here", field="framework")
        self._registry = ModelRegistry.load(self.settings.manifests)
        system = capture_system()
        if self.settings.instance_type:
            system["instance_type"] = self.settings.instance_type
        self._system = system_id(system)

    @property
    def execution(self) -> dict[str, Any]:
        return {"threads": self.threads, "level": self.level, "framework": self.framework}

    # -- measuring ---------------------------------------------------------------------------------

    def _stored(self, name: str, batch_size: int) -> _Measured | None:
        """The newest stored result of brick `name` on this system and framework version."""
        with open_store(self.settings.store_url) as store:
            rows = store.list_evaluations(
                model=name, framework=self.framework, system_id=self._system, status="succeeded", limit=20
            )
        for row in rows:
            if (row.get("framework") or {}).get("version") != self.version:
                continue
            found = _brick_time(row, batch_size)
            if found is not None:
                return _Measured(found, row["id"], measured_now=False)
        return None

    def _measure_brick(self, key: str, model: Any, batch_size: int) -> tuple[_Measured | None, str | None]:
        """The brick's stored result, or a new one measured now; (None, why) when its run failed."""
        name = brick_name(key)
        stored = self._stored(name, batch_size)
        if stored is not None:
            return stored, None
        import onnx

        path = self.settings.cache_dir / "bricks" / key / f"{name}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file():
            partial = path.with_suffix(".partial")
            onnx.save(model, str(partial))
            partial.rename(path)
        document = {
            "batch_sizes": [batch_size],
            "scenarios": ["single_stream"],
            "runner": "inline",
            "device": "cpu",
            "measure": dict(self.brick_measure),
            # The brick is a node of the optimised graph already: optimising it again could change it.
            "options": {"graph_optimization_level": "disable", **self._threads()},
        }
        try:
            admitted = admit_all(str(path), [self.framework], document, settings=self.settings,
                                 registry=self._registry)  # fmt: skip
        except UserError as exc:
            return None, exc.message
        result = evaluate_here(str(path), [self.framework], document, settings=self.settings, admitted=admitted)[0]
        if result["status"] != "succeeded":
            error = result.get("error") or {}
            return None, f"{error.get('type')}: {str(error.get('message'))[:160]}"
        found = _brick_time(result, batch_size)
        if found is None:
            return None, "no single_stream measurement"
        return _Measured(found, result["id"], measured_now=True), None

    def _threads(self) -> dict[str, Any]:
        return {"threads": self.threads} if self.threads else {}

    def call_cost(self) -> _Measured:
        """The calibration brick's result: one session run that does nothing, on this machine."""
        if self._call is None:
            key, model = identity_plan(self.execution)
            measured, why = self._measure_brick(key, model, 1)
            if measured is None:
                raise RuntimeError(f"the calibration brick failed: {why}")
            self._call = measured
        return self._call

    def measure_whole(self, ref: str) -> tuple[dict[str, Any], float]:
        """The model measured the ordinary way (single_stream, batch 1), and the seconds it took."""
        document = {
            **self.whole,
            "batch_sizes": [1],
            "scenarios": ["single_stream"],
            "options": {**(self.whole.get("options") or {}), **self._threads()},
        }
        started = time.perf_counter()
        result = evaluate_here(ref, [self.framework], document, settings=self.settings)[0]
        return result, time.perf_counter() - started

    # -- one model ---------------------------------------------------------------------------------

    def report(self, ref: str) -> dict[str, Any]:
        """Estimate vs measured for model `ref` (one JSON object of `mlscope bricks --json`).

        Raises:
            UserError: `ref` names no model this framework can run.
        """
        assert self._registry is not None
        admitted = admit_all(ref, [self.framework], {"batch_sizes": [1]}, settings=self.settings,
                             registry=self._registry)[0]  # fmt: skip
        manifest = admitted.manifest
        call = self.call_cost()
        report: dict[str, Any] = {"model": ref, "framework": {"name": self.framework, "version": self.version}}
        self.note(f"{ref}: decomposing")
        started = time.perf_counter()
        fallback: dict[str, Any] | None = None
        plans: list[BrickPlan | NotABrick] = []
        graph = None
        try:
            source = onnx_graph(manifest, self.settings.cache_dir)
            feeds = synthetic_batch(manifest, 1, np.random.default_rng(0))
            level_dir = f"{manifest.sha256[:16]}-{self.level}-t{self.threads or 0}"
            graph = decompose(source, feeds, self.settings.cache_dir / "bricks" / "graphs" / level_dir,
                              level=self.level, threads=self.threads)  # fmt: skip
            plans = plan_bricks(graph, execution=self.execution)
        except Exception as exc:  # an exporter's or ORT's failure: still measured whole
            fallback = {"reason": f"the graph cannot be decomposed: {type(exc).__name__}: {exc}"[:300],
                        "layers": []}  # fmt: skip
        decompose_s = time.perf_counter() - started
        blocking = [plan for plan in plans if isinstance(plan, NotABrick) and not plan.zero_cost]
        if fallback is None and blocking:
            fallback = _fallback(blocking)
        times: dict[str, BrickTime] = {}
        bricks_s, measured_now, reused = 0.0, 0, 0
        if fallback is None:
            unique = {plan.key: plan for plan in plans if isinstance(plan, BrickPlan)}
            failed: list[NotABrick] = []
            for number, (key, plan) in enumerate(unique.items(), start=1):
                assert graph is not None
                self.note(f"{ref}: brick {number}/{len(unique)} {plan.layer.op_type}")
                began = time.perf_counter()
                try:
                    measured, why = self._measure_brick(key, brick_model(plan, graph), plan.batch_size)
                except Exception as exc:  # the brick model cannot be built
                    measured, why = None, f"{type(exc).__name__}: {exc}"[:200]
                if measured is None or measured.measured_now:
                    bricks_s += time.perf_counter() - began
                if measured is None:
                    failed.append(NotABrick(plan.layer.name, plan.layer.op_type, f"its brick failed: {why}"))
                    continue
                times[key] = measured.time
                measured_now += measured.measured_now
                reused += not measured.measured_now
            if failed:
                fallback = _fallback(failed)
        self.note(f"{ref}: measuring whole")
        whole, whole_s = self.measure_whole(ref)
        measured_ms = _median(whole, 1)
        layers = [plan.key if isinstance(plan, BrickPlan) else None for plan in plans]
        report.update(
            layers=len(plans),
            bricks={"total": sum(key is not None for key in layers), "unique": len({k for k in layers if k}),
                    "reused": reused, "measured_now": measured_now},  # fmt: skip
            seconds={"bricks": round(bricks_s, 3), "whole": round(whole_s, 3), "decompose": round(decompose_s, 3)},
            measured_ms=measured_ms,
            evaluation_id=whole["id"],
            call_ms=call.time.median_ms,
        )
        if whole["status"] != "succeeded":
            report["error"] = whole.get("error")
        if fallback is not None:
            report.update(estimate_ms=None, estimate_ci=None, error_pct=None, bounds=None, overhead_ms=None,
                          fallback=fallback)  # fmt: skip
            return report
        assert graph is not None
        composition = compose(layers, times, graph.edges(), call.time)
        report.update(
            estimate_ms=composition.estimate_ms,
            estimate_ci=list(composition.estimate_ci),
            error_pct=None if not measured_ms else 100 * (composition.estimate_ms - measured_ms) / measured_ms,
            bounds={"sequential_ms": composition.sequential_ms, "critical_path_ms": composition.critical_path_ms},
            overhead_ms=None if measured_ms is None else measured_ms - composition.sequential_ms,
            zero_cost_layers=sum(isinstance(plan, NotABrick) for plan in plans),
            notes=sorted({note for plan in plans if isinstance(plan, BrickPlan) for note in plan.notes})[:10],
        )
        return report


def _fallback(layers: list[NotABrick]) -> dict[str, Any]:
    reasons = sorted({layer.reason for layer in layers})
    return {
        "reason": f"{len(layers)} layer(s) cannot be bricks, so the model is measured whole only: {reasons[0]}"
        + (f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else ""),
        "layers": [{"layer": layer.layer, "op_type": layer.op_type, "reason": layer.reason} for layer in layers],
    }


def _measurement(result: Mapping[str, Any], batch_size: int) -> dict[str, Any] | None:
    for measurement in result.get("measurements") or ():
        if measurement.get("scenario") == "single_stream" and measurement.get("batch_size") == batch_size:
            return dict(measurement)
    return None


def _median(result: Mapping[str, Any], batch_size: int) -> float | None:
    measurement = _measurement(result, batch_size)
    return None if measurement is None else float(measurement["latency_ms"]["median"])


def _brick_time(result: Mapping[str, Any], batch_size: int) -> BrickTime | None:
    measurement = _measurement(result, batch_size)
    if measurement is None:
        return None
    latency = measurement["latency_ms"]
    ci = latency.get("median_ci") or [latency["median"], latency["median"]]
    return BrickTime(float(latency["median"]), (float(ci[0]), float(ci[1])))


def summary(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's summary: the median |error| of the models with an estimate, and the seconds spent
    measuring bricks against measuring every model whole."""
    errors = [abs(r["error_pct"]) for r in reports if r.get("error_pct") is not None]
    bricks_s = sum(r["seconds"]["bricks"] for r in reports)
    whole_s = sum(r["seconds"]["whole"] for r in reports)
    return {
        "summary": True,
        "models": len(reports),
        "estimated": len(errors),
        "median_abs_error_pct": statistics.median(errors) if errors else None,
        "seconds": {"bricks": round(bricks_s, 3), "whole": round(whole_s, 3)},
        "time_ratio_whole_to_bricks": whole_s / bricks_s if bricks_s > 0 else None,
    }


def brick_files(cache_dir: Path) -> list[Path]:
    """The brick models written so far (for tests and clean-up)."""
    return sorted((cache_dir / "bricks").glob("*/brick-*.onnx"))
