"""The bricks pipeline: a model cut into bricks (`mlscope.analysis.bricks`), the bricks the store
does not hold yet measured (`mlscope.workers.bricks`), the model measured whole, and the two set side
by side. It lives in the bricks service, above both, because workers and analysis may not import
each other.

    REF ─▶ its ONNX graph ─▶ decompose: the graph ORT runs, its layers, their bricks
        ─▶ each unique brick: its stored result reused; the others (and, the first time, the
           calibrations) measured now, all in one job (mlscope.runtime.bricks) ─▶ the model whole
        ─▶ compose: estimate, interval, sequential and critical-path bounds, overhead
        ─▶ the prediction interval, calibrated on this system's earlier pairs (bricks.calibration)

What is framework-specific (the layers, a brick's model, the calibrations, the job) is a
`FrameworkBricks`: ONNX Runtime's here (`OrtBricks`), PyTorch's in `mlscope.services.bricks.pytorch`
(the module torch.fx traces, each layer an eager module), chosen by name in the `mlscope.bricks`
registry (`mlscope.services.bricks.registry.BRICKS`).

A model whose graph cannot be decomposed (control flow, a model torch.fx cannot trace, a brick that
fails to build or run) is still measured whole; its report names the layers and why, and has no
estimate. `BrickBench.estimate_stored` composes from stored bricks only, measuring nothing.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from mlscope.analysis.bricks import (
    DISPATCH_CHAIN,
    BrickPlan,
    BrickTime,
    Composition,
    LayerGraph,
    NotABrick,
    brick_model,
    compose,
    decompose,
    identity_plan,
    plan_bricks,
)
from mlscope.analysis.bricks import brick_name as name_of
from mlscope.contract.errors import UserError
from mlscope.contract.result import result_validity
from mlscope.contract.settings import Settings
from mlscope.runtime.predictors.inputs import synthetic_batch
from mlscope.services.bricks.calibration import PAIRS_FILE, PairLog, interval_section, setup_of
from mlscope.services.bricks.registry import BRICKS, check_brick_framework
from mlscope.workers.bricks import BrickJobReport, BrickResult, BrickRuns, single_stream

__all__ = [
    "DISPATCH_CHAIN",
    "BrickBench",
    "FrameworkBricks",
    "OrtBricks",
    "summary",
]


def _time(result: BrickResult) -> BrickTime:
    """The brick's median and interval, and the least it can cost: its fastest hot run (nothing
    flushed), or for a brick stored before those were recorded its fastest flushed run."""
    least = result.min_ms if result.hot_min_ms is None else result.hot_min_ms
    return BrickTime(result.median_ms, result.ci_ms, min_ms=least)


def _fastest(result: BrickResult) -> float:
    return result.median_ms if result.min_ms is None else result.min_ms


@dataclass
class _Bricks:
    """What measuring one model's bricks came to."""

    times: dict[str, BrickTime] = field(default_factory=dict)
    failed: list[NotABrick] = field(default_factory=list)
    seconds: float = 0.0
    # Where `seconds` went: lookup, build, import, sessions, measure, statistics, store.
    detail: dict[str, float] = field(default_factory=dict)
    measured_now: int = 0
    reused: int = 0
    invalid: list[str] = field(default_factory=list)


class FrameworkBricks:
    """How one framework's models become bricks and its bricks are measured: what BrickBench asks of
    a framework (the ONNX Runtime one below, PyTorch's in `mlscope.services.bricks.pytorch`)."""

    def execution(self) -> dict[str, Any]:
        raise NotImplementedError

    def calibration_bricks(self) -> list[tuple[str, str, Any, int]]:
        raise NotImplementedError

    def decompose(self, ref: str) -> tuple[LayerGraph, list[BrickPlan | NotABrick]]:
        raise NotImplementedError

    def brick(self, plan: BrickPlan, graph: LayerGraph) -> Any:
        raise NotImplementedError

    def measure(self, bricks: list[tuple[str, str, Any, int]]) -> BrickJobReport:
        raise NotImplementedError

    def cudnn_section(
        self,
        ref: str,
        plans: list[BrickPlan | NotABrick],
        graph: LayerGraph,
        done: Any,
        report: dict[str, Any],
    ) -> dict[str, Any]:
        """cuDNN's algorithm-choice gap of a model measured on a GPU (the report's `cudnn`); asked only
        of a framework whose bricks run on one (BrickRuns refuses another device first)."""
        raise UserError(f"{type(self).__name__} run on the CPU only: no cuDNN gap", field="device")


@dataclass
class OrtBricks(FrameworkBricks):
    """ONNX Runtime's bricks: the graph ORT runs, each node a one-node ONNX model."""

    bench: BrickBench

    def execution(self) -> dict[str, Any]:
        # "method": bricks measured in one job, apart, the private caches flushed before each run,
        # through bound inputs and outputs (runtime.bricks); results of another method are other
        # measurements, never reused.
        bench = self.bench
        return {
            "threads": bench.threads,
            "level": bench.level,
            "framework": bench.framework,
            "method": "job-flush",
        }

    def calibration_bricks(self) -> list[tuple[str, str, Any, int]]:
        """One Identity and a chain of DISPATCH_CHAIN tiny Adds."""
        bricks = []
        for chain in (1, DISPATCH_CHAIN):
            key, model = identity_plan(self.execution(), chain=chain)
            bricks.append((key, name_of(key), model, 1))
        return bricks

    def decompose(self, ref: str) -> tuple[LayerGraph, list[BrickPlan | NotABrick]]:
        bench = self.bench
        manifest, source = bench.runs.resolve(ref)
        feeds = synthetic_batch(manifest, 1, np.random.default_rng(0))
        shapes = "fixed" if bench.fix_shapes else "as-exported"
        folder = bench.settings.cache_dir / "bricks" / "graphs"
        graph = decompose(
            source,
            feeds,
            folder / f"{manifest.sha256[:16]}-{bench.level}-t{bench.threads or 0}-{shapes}",
            level=bench.level,
            threads=bench.threads,
            fix_shapes=bench.fix_shapes,
        )
        return graph, plan_bricks(graph, execution=self.execution())

    def brick(self, plan: BrickPlan, graph: LayerGraph) -> Any:
        return brick_model(plan, graph)

    def measure(self, bricks: list[tuple[str, str, Any, int]]) -> BrickJobReport:
        return self.bench.runs.measure(bricks)


@dataclass
class BrickBench:
    """Reports of models measured as bricks and whole on this machine, into the settings' store.

    Attributes:
        whole: the request fields of each whole-model measurement (runner, measure, device, ...).
        threads: intra-op threads of both measurements; part of a brick's key, as is `level`.
        note: told of progress, a line at a time.

    Raises (on construction):
        UserError: a framework bricks cannot be made for, naming it.
    """

    settings: Settings
    whole: Mapping[str, Any]
    threads: int | None = None
    framework: str = "onnxruntime"
    level: str = "all"
    note: Callable[[str], None] = field(default=lambda line: None)
    brick_measure: Mapping[str, Any] | None = None
    fix_shapes: bool = False
    # What measures the bricks and models: this machine (BrickRuns), a farm agent (the command line's
    # FarmBrickRuns), or nothing (StoredBrickRuns: the stored bricks only).
    make_runs: Callable[..., BrickRuns] = BrickRuns
    # Where the bricks run (PyTorch's may run on a CUDA device; BrickRuns refuses what cannot).
    device: str = "cpu"
    # The estimate-vs-measured pairs the intervals are calibrated on [default: <cache>/PAIRS_FILE].
    pairs: Path | None = None

    def __post_init__(self) -> None:
        check_brick_framework(self.framework)
        runs = self.make_runs(
            self.settings, framework=self.framework, threads=self.threads, device=self.device
        )
        if self.brick_measure is not None:
            runs.brick_measure = dict(self.brick_measure)
        self.runs = runs
        self.version = runs.version
        self.kind: FrameworkBricks = BRICKS[self.framework](self)
        self._call: BrickResult | None = None
        self._dispatch: float | None = None
        self.pair_log = PairLog(self.pairs or self.settings.cache_dir / PAIRS_FILE)

    def close(self) -> None:
        """Close what the bench holds open (the store its brick lookups read)."""
        self.runs.close()

    def __enter__(self) -> BrickBench:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def execution(self) -> dict[str, Any]:
        """What a brick's latency depends on besides the brick itself: part of its key."""
        return self.kind.execution()

    def _calibration_bricks(self) -> list[tuple[str, str, Any, int]]:
        """The calibration bricks, (key, name, model, batch size) each: one tiny op (a run's cost with
        one node in it) and a chain of DISPATCH_CHAIN of them (what each further node costs)."""
        return self.kind.calibration_bricks()

    def _calibrate(self, found: Mapping[str, BrickResult | str]) -> None:
        """Take the calibrations from `found` (a job's or the store's results, by key)."""
        (call_key, *_), (chain_key, *_) = self._calibration_bricks()
        call, chain = found.get(call_key), found.get(chain_key)
        if not isinstance(call, BrickResult) or not isinstance(chain, BrickResult):
            raise RuntimeError(f"the calibration bricks failed: {call if isinstance(call, str) else chain}")
        self._call = call
        self._dispatch = max(_fastest(chain) - _fastest(call), 0.0) / (DISPATCH_CHAIN - 1)

    def call_cost(self) -> BrickResult:
        """The calibration brick's result: one session run that does nothing, on this machine."""
        if self._call is None:
            self._measure("calibration", [], None)
        assert self._call is not None
        return self._call

    def dispatch_ms(self) -> float:
        """What one more node costs ORT to run, ms: the difference between a chain of DISPATCH_CHAIN
        tiny Adds and one Identity, per further node, from their fastest runs. The cost given to
        shape arithmetic and views.

        Fastest runs, not medians: the chain's 33 nodes start out of cache every run (runtime.bricks
        flushes the core's caches before each), a cost the model's tiny nodes, run among its others,
        do not pay per node. The chain's medians carry those cache misses and would overcharge a
        model with many shape and view layers; its fastest runs match what a view adds to a model
        (docs/bricks.md)."""
        if self._dispatch is None:
            self.call_cost()
        assert self._dispatch is not None
        return self._dispatch

    def _decompose(self, ref: str) -> tuple[LayerGraph, list[BrickPlan | NotABrick]]:
        return self.kind.decompose(ref)

    def _measure(self, ref: str, plans: list[BrickPlan], graph: LayerGraph | None) -> _Bricks:
        """The unique bricks of `plans` (the model's layers, in its order) from the store, and those it
        does not hold measured now in one job; the calibrations too, the first time. Every second is
        counted: lookups, building the brick models, the job, the store writes."""
        done = _Bricks()
        unique = {plan.key: plan for plan in plans}
        wanted = [
            (plan.key, plan.name, partial(self.kind.brick, plan, graph), plan.batch_size)
            for plan in unique.values()
            if graph is not None
        ]
        began = time.perf_counter()
        found: dict[str, BrickResult | str] = {}
        missing = []
        calibrations = self._calibration_bricks() if self._call is None else []
        for key, name, model, batch_size in [*wanted, *calibrations]:
            stored = self.runs.stored(name, batch_size)
            if stored is not None:
                found[key] = stored
            else:
                missing.append((key, name, model, batch_size))
        done.detail["lookup"] = time.perf_counter() - began
        models: dict[str, Any] = {}
        began = time.perf_counter()
        for key, _, model, _ in missing:
            try:
                models[key] = model() if callable(model) else model
            except Exception as exc:  # the brick model cannot be built
                found[key] = f"{type(exc).__name__}: {exc}"[:200]
        built = [(key, name, models[key], batch) for key, name, _, batch in missing if key in models]
        done.detail["build"] = time.perf_counter() - began
        if built:
            self.note(f"{ref}: measuring {len(built)} bricks in one job")
            job = self.kind.measure(built)
            found.update(job.results)
            for part, seconds in job.seconds.items():
                done.detail[part] = done.detail.get(part, 0.0) + seconds
        if calibrations:
            self._calibrate(found)
        for key, plan in unique.items():
            result = found.get(key)
            if not isinstance(result, BrickResult):
                done.failed.append(
                    NotABrick(plan.layer.name, plan.layer.op_type, f"its brick failed: {result}")
                )
                continue
            done.times[key] = _time(result)
            if not result.valid:
                done.invalid.append(key)
            done.measured_now += result.measured_now
            done.reused += not result.measured_now
        done.seconds = sum(done.detail.values())
        return done

    def report(self, ref: str) -> dict[str, Any]:
        """Estimate vs measured for model `ref`: one JSON object of `mlscope bricks --json`.

        Raises:
            UserError: `ref` names no model this framework can run.
        """
        self.note(f"{ref}: decomposing")
        started = time.perf_counter()
        fallback: dict[str, Any] | None = None
        graph: LayerGraph | None = None
        plans: list[BrickPlan | NotABrick] = []
        try:
            graph, plans = self._decompose(ref)
        except UserError:
            raise
        except Exception as exc:  # an exporter's or ORT's failure: the model is still measured whole
            fallback = {
                "reason": f"the graph cannot be decomposed: {type(exc).__name__}: {exc}"[:300],
                "layers": [],
            }
        decompose_s = time.perf_counter() - started
        blocking = [plan for plan in plans if isinstance(plan, NotABrick) and not plan.zero_cost]
        if fallback is None and blocking:
            fallback = _fallback(blocking)
        done = _Bricks()
        if fallback is None and graph is not None:
            done = self._measure(ref, [plan for plan in plans if isinstance(plan, BrickPlan)], graph)
            if done.failed:
                fallback = _fallback(done.failed)
        if self._call is None:  # no brick measured yet (a model that cannot be decomposed)
            calibration = self._measure(ref, [], None)
            done.detail["calibration"] = calibration.seconds
            done.seconds += calibration.seconds
        call = self.call_cost()
        self.note(f"{ref}: measuring whole")
        whole, whole_s = self.runs.whole(ref, self.whole)
        measurement = single_stream(whole, 1)
        measured_ms = None if measurement is None else float(measurement["latency_ms"]["median"])
        fastest_ms = None if measurement is None else measurement["latency_ms"].get("min")
        environment = (measurement or {}).get("environment") or {}
        dispatch = self.dispatch_ms()
        layers: list[str | float | None] = [
            plan.key if isinstance(plan, BrickPlan) else dispatch if plan.dispatch_only else None
            for plan in plans
        ]
        report: dict[str, Any] = {
            "model": ref,
            **self.runs.place(),
            "system_id": (whole.get("system") or {}).get("id"),
            "framework": {"name": self.framework, "version": self.version},
            "device": self.device,
            "layers": len(plans),
            "bricks": {
                "total": sum(isinstance(key, str) for key in layers),
                "unique": len({key for key in layers if isinstance(key, str)}),
                "reused": done.reused,
                "measured_now": done.measured_now,
            },
            # The bricks' side counts everything a model's estimate costs: decomposing its graph,
            # the store lookups, building the brick models, the job, the store writes.
            "seconds": {
                "bricks": round(decompose_s + done.seconds, 3),
                "whole": round(whole_s, 3),
                "decompose": round(decompose_s, 3),
                "bricks_detail": {part: round(value, 3) for part, value in done.detail.items()},
            },
            "measured_ms": measured_ms,
            # The whole model's fastest run: a run no other process interrupted, where contention
            # (which the bricks' short runs mostly escape) inflates the median.
            "measured_min_ms": fastest_ms,
            # Other processes' share of the CPUs while the model was measured whole (None: unknown).
            "whole_other_cpu_share": environment.get("other_cpu_share"),
            "evaluation_id": whole["id"],
            "call_ms": _time(call).median_ms,
            "estimate_ms": None,
            "estimate_ci": None,
            "estimate_se_ms": None,
            # The nominal-90% prediction interval of the latency measured whole, and how often such
            # intervals held for this system's other models (bricks.calibration).
            "interval_ms": None,
            "coverage": None,
            "error_pct": None,
            "bounds": None,
            "overhead_ms": None,
        }
        report["validity"] = _validity(whole, done)
        if whole["status"] != "succeeded":
            report["error"] = whole.get("error")
        if fallback is not None or graph is None:
            report["fallback"] = fallback
            return report
        composition = compose(layers, done.times, graph.edges(), _time(call), dispatch_ms=dispatch)
        report.update(
            **_estimate(composition),
            shape_layers=sum(isinstance(plan, NotABrick) and plan.dispatch_only for plan in plans),
            dispatch_ms=dispatch,
            zero_cost_layers=sum(isinstance(plan, NotABrick) and not plan.dispatch_only for plan in plans),
            notes=sorted({note for plan in plans if isinstance(plan, BrickPlan) for note in plan.notes})[:10],
        )
        if measured_ms:
            report["error_pct"] = 100 * (composition.estimate_ms - measured_ms) / measured_ms
            report["overhead_ms"] = measured_ms - composition.sequential_ms
        if fastest_ms:
            report["error_vs_min_pct"] = 100 * (composition.estimate_ms - fastest_ms) / fastest_ms
        setup = setup_of(report["system_id"], self.framework, self.version, self.threads, self.device)
        report.update(interval_section(report, self.pair_log, setup))
        if self.device != "cpu":  # PyTorch on a GPU (BrickRuns refused any other framework)
            report["cudnn"] = self.kind.cudnn_section(ref, plans, graph, done, report)
        return report

    def estimate_stored(self, ref: str) -> dict[str, Any]:
        """Model `ref`'s estimate composed only from the bricks `runs` finds stored, measuring nothing
        (neither a brick nor the model whole): POST /api/v1/bricks/estimates's answer.

        The bricks the estimate needs are the model's unique bricks and the two calibrations;
        `coverage` is the share of them found, `missing` names the others (their evaluations'
        model names). The estimate is made only when every one is found.

        Raises:
            UserError: `ref` names no model this framework can run.
        """
        report: dict[str, Any] = {
            "model": ref,
            "system_id": getattr(self.runs, "system_id", None),
            "framework": {"name": self.framework, "version": self.version},
            "device": self.device,
            "threads": self.threads,
            "layers": 0,
            "bricks": {"total": 0, "unique": 0, "needed": 0, "found": 0},
            "coverage": 0.0,
            "missing": [],
            "estimate_ms": None,
            "estimate_ci": None,
            "estimate_se_ms": None,
            "bounds": None,
            "validity": {"valid": True, "reasons": []},
            "fallback": None,
        }
        try:
            graph, plans = self._decompose(ref)
        except UserError:
            raise
        except Exception as exc:  # an exporter's or ORT's failure: no estimate, saying why
            report["fallback"] = {
                "reason": f"the graph cannot be decomposed: {type(exc).__name__}: {exc}"[:300],
                "layers": [],
            }
            return report
        unique = {plan.key: plan for plan in plans if isinstance(plan, BrickPlan)}
        needed = [(key, plan.name, plan.batch_size) for key, plan in unique.items()]
        needed += [(key, name, batch) for key, name, _, batch in self._calibration_bricks()]
        found: dict[str, BrickResult | str] = {}
        missing = []
        for key, name, batch_size in needed:
            stored = self.runs.stored(name, batch_size)
            if stored is None:
                missing.append(name)
            else:
                found[key] = stored
        report.update(
            layers=len(plans),
            bricks={
                "total": sum(isinstance(plan, BrickPlan) for plan in plans),
                "unique": len(unique),
                "needed": len(needed),
                "found": len(found),
            },
            coverage=len(found) / len(needed) if needed else 0.0,
            missing=missing,
        )
        invalid = sum(not result.valid for result in found.values() if isinstance(result, BrickResult))
        if invalid:
            report["validity"] = {
                "valid": False,
                "reasons": [f"{invalid} of its stored bricks' measurements are not valid"],
            }
        blocking = [plan for plan in plans if isinstance(plan, NotABrick) and not plan.zero_cost]
        if blocking:
            report["fallback"] = _fallback(blocking, "so no estimate is made")
            return report
        if missing:
            return report
        self._calibrate(found)
        dispatch = self.dispatch_ms()
        layers: list[str | float | None] = [
            plan.key if isinstance(plan, BrickPlan) else dispatch if plan.dispatch_only else None
            for plan in plans
        ]
        times = {key: _time(result) for key, result in found.items() if isinstance(result, BrickResult)}
        composition = compose(layers, times, graph.edges(), _time(self.call_cost()), dispatch_ms=dispatch)
        report.update(_estimate(composition))
        return report


def _estimate(composition: Composition) -> dict[str, Any]:
    """A report's estimate: the composed latency, its interval and standard error, and Benanza's
    lower bounds from the bricks' fastest runs (compose's docstring: why)."""
    return {
        "estimate_ms": composition.estimate_ms,
        "estimate_ci": list(composition.estimate_ci),
        "estimate_se_ms": composition.estimate_se_ms,
        "bounds": {
            "sequential_ms": composition.sequential_ms,
            "critical_path_ms": composition.critical_path_ms,
        },
    }


def _validity(whole: Mapping[str, Any], done: _Bricks) -> dict[str, Any]:
    """Whether the report may be taken as valid: its whole-model measurement valid (contract's
    result_validity) and every brick its estimate is made of measured validly."""
    verdict = result_validity(whole)
    reasons = [f"measured whole: {reason}" for reason in verdict["reasons"]]
    if done.invalid:
        reasons.append(
            f"{len(done.invalid)} of its bricks' measurements are not valid (their evaluations say why)"
        )
    return {"valid": bool(verdict["valid"]) and not done.invalid, "reasons": reasons}


def _fallback(layers: list[NotABrick], then: str = "so the model is measured whole only") -> dict[str, Any]:
    reasons = sorted({layer.reason for layer in layers})
    more = f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else ""
    return {
        "reason": f"{len(layers)} layer(s) cannot be bricks, {then}: {reasons[0]}{more}",
        "layers": [
            {"layer": layer.layer, "op_type": layer.op_type, "reason": layer.reason} for layer in layers
        ],
    }


def summary(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's summary: the median |error| of the models with an estimate, the seconds spent on
    bricks against measuring every model whole, and how that ratio grew as models were added (in
    the order they were measured: bricks shared with earlier models cost nothing)."""
    errors = [abs(r["error_pct"]) for r in reports if r.get("error_pct") is not None]
    against_min = [abs(r["error_vs_min_pct"]) for r in reports if r.get("error_vs_min_pct") is not None]
    cumulative, bricks_s, whole_s = [], 0.0, 0.0
    for count, report in enumerate(reports, start=1):
        bricks_s += report["seconds"]["bricks"]
        whole_s += report["seconds"]["whole"]
        cumulative.append(
            {
                "models": count,
                "bricks_s": round(bricks_s, 3),
                "whole_s": round(whole_s, 3),
                "ratio": whole_s / bricks_s if bricks_s > 0 else None,
            }
        )
    return {
        "summary": True,
        "models": len(reports),
        "estimated": len(errors),
        "median_abs_error_pct": statistics.median(errors) if errors else None,
        "median_abs_error_vs_min_pct": statistics.median(against_min) if against_min else None,
        "seconds": {"bricks": round(bricks_s, 3), "whole": round(whole_s, 3)},
        "time_ratio_whole_to_bricks": whole_s / bricks_s if bricks_s > 0 else None,
        "cumulative": cumulative,
    }
