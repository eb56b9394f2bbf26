"""DLBricks and Benanza on ONNX Runtime or PyTorch over catalogue models: how close is the latency
composed from a model's layers (each measured once as a brick, shared bricks reused) to the model
measured whole, and how much benchmarking time do bricks save as models are added?

Prints per model: estimate, measured, error, the sequential and critical-path bounds (Benanza, from
the bricks' fastest runs), the critical path over the measured median (crit/meas) and over the
whole model's fastest run (crit/min: a lower bound must stay under both), the overhead beyond the
sequential bound, bricks new/reused/unique, and the cumulative seconds spent on
bricks vs measuring every model whole, with their ratio after 1, 2, ... N models in the order
measured, and oth%: other processes' share of the CPUs while the model was measured whole (the
validity check's contention figure), and err/min: the error against the whole model's fastest run
(a run nothing interrupted); then the median |error| (target ≤ 5%) and the time ratio
whole/bricks (target ≥ 3x).

What each side counts. Bricks: decomposing the model's graph (ORT's offline optimisation, the run that
learns every value's shape, the plans), the store lookups, building and writing the brick models and
admitting them, the one job that measures the new ones (sessions, sweeps, statistics), and storing
each as an evaluation. Whole: the ordinary evaluation of the model (`mlscope run`'s defaults: process
runner, at least 2 s and 30 inferences), admission to stored result. Neither counts exporting a
catalogue model to ONNX (both need the graph; it is cached).

A fresh store (a temporary SQLite file) is used, so every brick is measured from scratch in this run;
the exported graphs come from the user's cache (MLSCOPE_CACHE_DIR).

With --framework pytorch the bricks are the layers torch.fx traces (no ONNX export: the module is
built as `mlscope run -f pytorch` builds it), measured as eager modules, and the whole model is the
PyTorch predictor's run; the default models are then PYTORCH_MODELS.

Usage: python benchmarks/bricks.py [--framework onnxruntime|pytorch] [--device cpu|cuda[:N]] [--threads 1]
       [--limit N] [REF ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from mlscope.cli.bricks_pipeline import BrickBench, summary
from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings

# Small models of many families; some share layers (resnet18 of torchvision and timm, the MobileNets).
MODELS = [
    "torchvision:resnet18",
    "timm:resnet18",
    "torchvision:resnet34",
    "torchvision:mobilenet_v2",
    "hf:mobilenet_v2",
    "torchvision:mobilenet_v3_small",
    "timm:mobilenetv3_small_100",
    "timm:lcnet_050",
    "torchvision:shufflenet_v2_x0_5",
    "torchvision:shufflenet_v2_x1_0",
    "torchvision:squeezenet1_0",
    "torchvision:squeezenet1_1",
    "torchvision:mnasnet0_5",
    "torchvision:mnasnet1_0",
    "torchvision:regnet_x_400mf",
    "timm:regnetx_002",
    "torchvision:efficientnet_b0",
    "timm:efficientnet_b0",
    "timm:deit_tiny_patch16_224",
    "timm:vit_tiny_patch16_224",
    "mlscope:digits_cnn",
    "hf:bert",
]
# PyTorch's default set: torchvision and timm models, some sharing layers.
PYTORCH_MODELS = [
    "torchvision:resnet18",
    "timm:resnet18",
    "torchvision:resnet34",
    "torchvision:mobilenet_v2",
    "torchvision:mobilenet_v3_small",
    "torchvision:shufflenet_v2_x0_5",
    "torchvision:squeezenet1_1",
    "torchvision:mnasnet0_5",
    "torchvision:efficientnet_b0",
    "mlscope:digits_cnn",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("refs", nargs="*", help=f"models [default: {len(MODELS)} catalogue models]")
    parser.add_argument("--framework", default="onnxruntime", help="onnxruntime or pytorch")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of every measurement")
    parser.add_argument(
        "--device",
        default="cpu",
        help="where the bricks and the whole models run: cpu, or cuda[:N] with --framework pytorch "
        "(then each row ends with the cuDNN gap, cudnn.benchmark off − on over the convolutions)",
    )
    parser.add_argument("--limit", type=int, help="only the first N models")
    parser.add_argument("--json", dest="json_file", help="also write every report to this file")
    parser.add_argument(
        "--store", help="a store URL to keep (and reuse) the bricks in [default: a fresh one]"
    )
    args = parser.parse_args()
    refs = (args.refs or (PYTORCH_MODELS if args.framework == "pytorch" else MODELS))[: args.limit]
    with tempfile.TemporaryDirectory(prefix="mlscope-bricks-bench-") as folder:
        settings = replace(load_settings(), store_url=args.store or f"sqlite:///{Path(folder) / 'store.db'}")
        try:
            bench = BrickBench(
                settings,
                whole={"runner": "process", "device": args.device},
                threads=args.threads,
                framework=args.framework,
                device=args.device,
            )
        except UserError as exc:  # a framework or device the bricks cannot run on here
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        if args.framework == "onnxruntime":
            # Both sides need each model's ONNX graph, and neither counts exporting it: on a fresh cache
            # the first decomposition would otherwise pay the export (35 s of 42.6 for 6 models here).
            for ref in refs:
                try:
                    bench.runs.resolve(ref)
                except Exception as exc:  # reported with its model below
                    print(f"{ref}: not exported: {type(exc).__name__}: {str(exc)[:150]}", file=sys.stderr)
        label = {"onnxruntime": "ONNX Runtime", "pytorch": "PyTorch"}.get(args.framework, args.framework)
        print(
            f"{label} {bench.version}, threads {args.threads}, {len(refs)} models; ms, batch 1",
            flush=True,
        )
        header = (
            f"{'model':34} {'estimate':>9} {'measured':>9} {'error':>7} {'seq':>8} {'crit':>8} "
            f"{'crit/meas':>9} {'crit/min':>8} {'overhead':>8} {'new/reu/uniq':>12} {'cum s bricks':>12} "
            f"{'cum s whole':>11} "
            f"{'ratio':>6} {'oth%':>4} {'err/min':>7}"
        )
        print(header, flush=True)
        reports = []
        for ref in refs:
            started = time.perf_counter()
            try:
                report = bench.report(ref)
            except Exception as exc:  # one model's failure does not end the run
                print(f"{ref:34} failed: {type(exc).__name__}: {str(exc)[:150]}", flush=True)
                continue
            reports.append(report)
            total = summary(reports)
            bounds = report.get("bounds") or {}
            measured = report.get("measured_ms")
            crit = bounds.get("critical_path_ms")
            fastest = report.get("measured_min_ms")
            counts = report["bricks"]

            def ms(value: float | None) -> str:
                return "-" if value is None else f"{value:.3f}"

            error = report.get("error_pct")
            fallback = f"; {report['fallback']['reason'][:80]}" if report.get("fallback") else ""
            if report.get("cudnn"):
                fallback += f"; cuDNN gap {ms(report['cudnn']['gap_ms'])} ms"
            ratio = total["time_ratio_whole_to_bricks"]
            share = report.get("whole_other_cpu_share")
            other = "-" if share is None else f"{100 * share:.0f}"
            versus = report.get("error_vs_min_pct")
            against_min = "-" if versus is None else f"{versus:+.1f}%"
            print(
                f"{ref:34} {ms(report.get('estimate_ms')):>9} {ms(measured):>9} "
                f"{'-' if error is None else f'{error:+.1f}%':>7} {ms(bounds.get('sequential_ms')):>8} "
                f"{ms(crit):>8} {'-' if not (crit and measured) else f'{crit / measured:.3f}':>9} "
                f"{'-' if not (crit and fastest) else f'{crit / fastest:.3f}':>8} "
                f"{ms(report.get('overhead_ms')):>8} "
                f"{counts['measured_now']:>3}/{counts['reused']:>3}/{counts['unique']:>4} "
                f"{total['seconds']['bricks']:>12.1f} {total['seconds']['whole']:>11.1f} "
                f"{'-' if ratio is None else f'{ratio:.2f}':>6} {other:>4} {against_min:>7}"
                f"  ({time.perf_counter() - started:.0f} s{fallback})",
                flush=True,
            )
        bench.close()
        total = summary(reports)
        errors = [abs(r["error_pct"]) for r in reports if r.get("error_pct") is not None]
        print(
            f"\nmedian |error| {total['median_abs_error_pct']:.2f}% over {len(errors)} models "
            f"(mean {statistics.fmean(errors):.2f}%, max {max(errors):.2f}%); target ≤ 5%"
            if errors
            else "\nno model estimated"
        )
        if total["median_abs_error_vs_min_pct"] is not None:
            against = total["median_abs_error_vs_min_pct"]
            print(
                f"median |error| against the whole model's fastest run {against:.2f}% "
                "(a contention-free reference where the median is not)"
            )
        ratio = total["time_ratio_whole_to_bricks"]
        print(
            f"benchmarking time: bricks {total['seconds']['bricks']:.1f} s, "
            f"whole {total['seconds']['whole']:.1f} s, "
            f"ratio whole/bricks {'-' if ratio is None else f'{ratio:.2f}x'}; target ≥ 3x"
        )
        steps = total["cumulative"]
        print(
            "whole/bricks after 1..N models: "
            + " ".join("-" if step["ratio"] is None else f"{step['ratio']:.2f}" for step in steps)
        )
        parts: dict[str, float] = {}
        for report in reports:
            parts["decompose"] = parts.get("decompose", 0.0) + report["seconds"]["decompose"]
            for part, value in report["seconds"].get("bricks_detail", {}).items():
                parts[part] = parts.get(part, 0.0) + value
        print("bricks' seconds by part: " + ", ".join(f"{part} {value:.1f}" for part, value in parts.items()))
        for label, field in (("measured", "measured_ms"), ("fastest whole run", "measured_min_ms")):
            bound_ratios = [
                r["bounds"]["critical_path_ms"] / r[field]
                for r in reports
                if r.get("bounds") and r.get(field)
            ]
            if bound_ratios:
                print(
                    f"critical path / {label}: min {min(bound_ratios):.3f}, "
                    f"median {statistics.median(bound_ratios):.3f}, "
                    f"max {max(bound_ratios):.3f}; above 1 in {sum(b > 1 for b in bound_ratios)} models"
                )
        if args.json_file:
            Path(args.json_file).write_text(json.dumps([*reports, total], indent=1, default=str))
    sys.exit(0)


if __name__ == "__main__":
    main()
