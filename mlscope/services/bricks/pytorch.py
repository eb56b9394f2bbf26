"""PyTorch's bricks for `mlscope bricks --framework pytorch`: the model's module (built as `mlscope run
-f pytorch` builds it) traced with torch.fx (a Hugging Face model torch.fx cannot trace: with
TorchDynamo, on the batch) and run once on the manifest's synthetic batch
(`mlscope.analysis.bricks.fx`), each unique layer a tiny module measured in one job in this process
(`mlscope.workers.bricks.BrickRuns.measure_modules`).

torch is imported with this module: the pipeline loads it only for `--framework pytorch`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mlscope.analysis.bricks import DISPATCH_CHAIN, BrickPlan, LayerGraph, NotABrick
from mlscope.analysis.bricks.fx import (
    ModuleGraph,
    calibration_bricks,
    cudnn_benchmark_plan,
    decompose_module,
    is_convolution,
    module_brick,
    plan_module_bricks,
)
from mlscope.runtime.predictors.inputs import synthetic_batch
from mlscope.services.bricks.pipeline import BrickBench, FrameworkBricks
from mlscope.workers.bricks import BrickJobReport

__all__ = ["TorchBricks"]


@dataclass
class TorchBricks(FrameworkBricks):
    """PyTorch's bricks: each layer of the traced module a module of its own, run on random inputs of
    the shapes it had in the model."""

    bench: BrickBench
    # Each brick's key document, kept from its plan: a module brick's stored manifest snapshot.
    documents: dict[str, Any] = field(default_factory=dict)
    # The keys of the bricks to measure with torch.backends.cudnn.benchmark on (`cudnn_variants`).
    benchmark_on: set[str] = field(default_factory=set)

    def execution(self) -> dict[str, Any]:
        # "method": bricks measured in one job, apart, the private caches flushed before each run,
        # each an eager module under inference_mode (runtime.predictors.pytorch.bricks). The device
        # only when not the CPU: the CPU's keys stay those of the bricks stored before it was one.
        bench = self.bench
        device = {} if bench.device == "cpu" else {"device": bench.device}
        return {"threads": bench.threads, "framework": bench.framework, "method": "job-flush-eager", **device}

    def cudnn_section(
        self,
        ref: str,
        plans: list[BrickPlan | NotABrick],
        graph: LayerGraph,
        done: Any,
        report: dict[str, Any],
    ) -> dict[str, Any]:
        """cuDNN's algorithm-choice gap (Benanza): each convolution layer's brick measured again with
        torch.backends.cudnn.benchmark on, and Σ over the model's convolution layers (a brick used k
        times: k layers) of its median with benchmark off (the estimate's brick, as the whole model
        runs) minus on. The run cost is in both medians and cancels. Adds the seconds and validity of
        the benchmark-on bricks to `report`'s."""
        convolutions = [plan for plan in plans if isinstance(plan, BrickPlan)]
        variants = self.cudnn_variants(convolutions)
        convolutions = [plan for plan in convolutions if plan.key in variants]
        on = self.bench._measure(f"{ref} (cudnn.benchmark on)", list(variants.values()), graph)
        report["seconds"]["bricks"] = round(report["seconds"]["bricks"] + on.seconds, 3)
        report["seconds"]["bricks_detail"]["cudnn"] = round(on.seconds, 3)
        section: dict[str, Any] = {
            "convolution_layers": len(convolutions),
            "bricks": {"unique": len(variants), "measured_now": on.measured_now, "reused": on.reused},
            "benchmark_off_ms": None,
            "benchmark_on_ms": None,
            "gap_ms": None,
        }
        if on.failed:
            section["error"] = f"{len(on.failed)} benchmark-on brick(s) failed: {on.failed[0].reason}"[:300]
            return section
        off_ms = [done.times[plan.key].median_ms for plan in convolutions]
        on_ms = [on.times[variants[plan.key].key].median_ms for plan in convolutions]
        section.update(
            benchmark_off_ms=math.fsum(off_ms),
            benchmark_on_ms=math.fsum(on_ms),
            gap_ms=math.fsum(off - benchmarked for off, benchmarked in zip(off_ms, on_ms, strict=True)),
        )
        if on.invalid:
            report["validity"]["valid"] = False
            report["validity"]["reasons"].append(
                f"{len(on.invalid)} of its cudnn.benchmark-on bricks' measurements are not valid"
            )
        return section

    def cudnn_variants(self, plans: list[BrickPlan]) -> dict[str, BrickPlan]:
        """Each convolution brick of `plans` (by its key) as a brick of its own measured with
        torch.backends.cudnn.benchmark on (`measure` knows them by key)."""
        variants = {plan.key: cudnn_benchmark_plan(plan) for plan in plans if is_convolution(plan)}
        for variant in variants.values():
            self.documents[variant.key] = variant.document
            self.benchmark_on.add(variant.key)
        return variants

    def calibration_bricks(self) -> list[tuple[str, str, Any, int]]:
        """One tiny add on a float32[1, 1] and a chain of DISPATCH_CHAIN of them."""

        bricks = calibration_bricks(self.execution(), DISPATCH_CHAIN)
        for key, *_ in bricks:
            self.documents[key] = {"calibration": True, "op": "add", "execution": self.execution()}
        return bricks

    def decompose(self, ref: str) -> tuple[LayerGraph, list[BrickPlan | NotABrick]]:
        """The layers of `ref`'s module and their plans.

        Raises:
            NotTraceable: torch.fx (nor, a Hugging Face model, TorchDynamo) cannot trace it, or its
                traced graph fails on the batch or does not reproduce the model's output.
        """
        manifest, module = self.bench.runs.module(ref)
        feeds = synthetic_batch(manifest, 1, np.random.default_rng(0))
        inputs = tuple(torch.from_numpy(feeds[spec.name]) for spec in manifest.inputs)
        graph = decompose_module(module, inputs)
        plans = plan_module_bricks(graph, execution=self.execution())
        for plan in plans:
            if isinstance(plan, BrickPlan):
                self.documents[plan.key] = plan.document
        return graph, plans

    def brick(self, plan: BrickPlan, graph: LayerGraph) -> Any:
        assert isinstance(graph, ModuleGraph), "decompose() made it"
        return module_brick(plan, graph)

    def measure(self, bricks: list[tuple[str, str, Any, int]]) -> BrickJobReport:
        """The bricks in one job; those of `cudnn_variants` in a job of their own, cuDNN's benchmark
        on (in a process of its own: see `runtime.predictors.pytorch.bricks`)."""
        report = BrickJobReport()
        for benchmark in (False, True):
            these = [
                (key, name, spec, batch, self.documents.get(key, {}))
                for key, name, spec, batch in bricks
                if (key in self.benchmark_on) == benchmark
            ]
            if not these:
                continue
            job = self.bench.runs.measure_modules(these, cudnn_benchmark=benchmark)
            report.results.update(job.results)
            for part, seconds in job.seconds.items():
                report.seconds[part] = report.seconds.get(part, 0.0) + seconds
        return report
