"""DLBricks and Benanza on ONNX Runtime or PyTorch over catalogue models: how close is the latency
composed from a model's layers (each measured once as a brick, shared bricks reused) to the model
measured whole, and how much benchmarking time do bricks save as models are added?

Prints per model: estimate, measured, error, the sequential and critical-path bounds (Benanza, from
the bricks' fastest runs), the critical path over the measured median (crit/meas) and over the
whole model's fastest run (crit/min: a lower bound must stay under both), the overhead beyond the
sequential bound, bricks new/reused/unique, and the cumulative seconds spent on
bricks vs measuring every model whole, with their ratio after 1, 2, ... N models in the order
measured, and oth%: other processes' share of the CPUs while the model was measured whole (the
validity check's contention figure), err/min: the error against the whole model's fastest run
(a run nothing interrupted), the estimate's nominal-90% interval as `mlscope bricks` gives it
(calibrated on the models measured before it in the run) and whether the measured median fell inside;
then the median |error| (target ≤ 5%) and the time ratio whole/bricks (target ≥ 3x).

The whole benchmark runs --runs times (3 by default), each from a fresh store and pair log, and ends
with the figures over the runs: the median of the runs' median |error| with its min-max, the same
against the whole models' fastest runs, and the interval's coverage: each model's interval
calibrated leave-one-out on its run's other models (never on its own measured latency), the share of
measured medians inside (target ≥ 90%), and the median width, (high − low) / estimate (target ≤ 15%).

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
       [--limit N] [--runs 3] [REF ...]
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
from typing import Any

from mlscope.analysis.bricks.interval import NOMINAL, Pair, calibration_set, leave_one_out
from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings
from mlscope.services.bricks.pipeline import BrickBench, summary

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


# The targets the figures over the runs are held to.
TARGET_ERROR_PCT = 5.0
TARGET_RATIO = 3.0
TARGET_COVERAGE = NOMINAL
TARGET_WIDTH_PCT = 15.0


def _arguments() -> argparse.Namespace:
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
    parser.add_argument("--runs", type=int, default=3, help="how many times the whole benchmark runs")
    parser.add_argument("--json", dest="json_file", help="also write every run's reports to this file")
    parser.add_argument(
        "--store", help="a store URL to keep (and reuse) the bricks in [default: a fresh one per run]"
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _verdict(value: float, target: float, at_most: bool, unit: str) -> str:
    """'met', or by how much the target was missed."""
    if (value <= target) if at_most else (value >= target):
        return "met"
    return f"missed by {abs(value - target):.2f}{unit}"


def _row(ref: str, report: dict[str, Any], total: dict[str, Any], seconds: float) -> str:
    bounds = report.get("bounds") or {}
    measured = report.get("measured_ms")
    crit = bounds.get("critical_path_ms")
    fastest = report.get("measured_min_ms")
    counts = report["bricks"]
    error = report.get("error_pct")
    fallback = f"; {report['fallback']['reason'][:80]}" if report.get("fallback") else ""
    if report.get("cudnn"):
        fallback += f"; cuDNN gap {_ms(report['cudnn']['gap_ms'])} ms"
    ratio = total["time_ratio_whole_to_bricks"]
    share = report.get("whole_other_cpu_share")
    other = "-" if share is None else f"{100 * share:.0f}"
    versus = report.get("error_vs_min_pct")
    interval = report.get("interval_ms")
    span = "-" if not interval else f"{interval[0]:.3f}-{interval[1]:.3f}"
    inside = "-" if not (interval and measured) else "yes" if interval[0] <= measured <= interval[1] else "NO"
    return (
        f"{ref:34} {_ms(report.get('estimate_ms')):>9} {_ms(measured):>9} "
        f"{'-' if error is None else f'{error:+.1f}%':>7} {_ms(bounds.get('sequential_ms')):>8} "
        f"{_ms(crit):>8} {'-' if not (crit and measured) else f'{crit / measured:.3f}':>9} "
        f"{'-' if not (crit and fastest) else f'{crit / fastest:.3f}':>8} "
        f"{_ms(report.get('overhead_ms')):>8} "
        f"{counts['measured_now']:>3}/{counts['reused']:>3}/{counts['unique']:>4} "
        f"{total['seconds']['bricks']:>12.1f} {total['seconds']['whole']:>11.1f} "
        f"{'-' if ratio is None else f'{ratio:.2f}':>6} {other:>4} "
        f"{'-' if versus is None else f'{versus:+.1f}%':>7} {span:>17} {inside:>3}"
        f"  ({seconds:.0f} s{fallback})"
    )


def run_once(refs: list[str], args: argparse.Namespace, number: int) -> list[dict[str, Any]]:
    """One run of the benchmark over `refs`, a fresh store and pair log: its table and summary
    printed, its reports returned."""
    with tempfile.TemporaryDirectory(prefix="mlscope-bricks-bench-") as folder:
        settings = replace(load_settings(), store_url=args.store or f"sqlite:///{Path(folder) / 'store.db'}")
        try:
            bench = BrickBench(
                settings,
                whole={"runner": "process", "device": args.device},
                threads=args.threads,
                framework=args.framework,
                device=args.device,
                pairs=Path(folder) / "pairs.jsonl",
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
            f"\nrun {number} of {args.runs}: {label} {bench.version}, threads {args.threads}, "
            f"{len(refs)} models; ms, batch 1",
            flush=True,
        )
        print(
            f"{'model':34} {'estimate':>9} {'measured':>9} {'error':>7} {'seq':>8} {'crit':>8} "
            f"{'crit/meas':>9} {'crit/min':>8} {'overhead':>8} {'new/reu/uniq':>12} {'cum s bricks':>12} "
            f"{'cum s whole':>11} {'ratio':>6} {'oth%':>4} {'err/min':>7} {'90% interval':>17} {'in':>3}",
            flush=True,
        )
        reports: list[dict[str, Any]] = []
        for ref in refs:
            started = time.perf_counter()
            try:
                report = bench.report(ref)
            except Exception as exc:  # one model's failure does not end the run
                print(f"{ref:34} failed: {type(exc).__name__}: {str(exc)[:150]}", flush=True)
                continue
            reports.append(report)
            print(_row(ref, report, summary(reports), time.perf_counter() - started), flush=True)
        bench.close()
    _print_run(reports)
    return reports


def _print_run(reports: list[dict[str, Any]]) -> None:
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
            r["bounds"]["critical_path_ms"] / r[field] for r in reports if r.get("bounds") and r.get(field)
        ]
        if bound_ratios:
            print(
                f"critical path / {label}: min {min(bound_ratios):.3f}, "
                f"median {statistics.median(bound_ratios):.3f}, "
                f"max {max(bound_ratios):.3f}; above 1 in {sum(b > 1 for b in bound_ratios)} models"
            )


def held_out(reports: list[dict[str, Any]]) -> list[tuple[Pair, Any]]:
    """Each estimated and measured model of one run with the interval its run's OTHER models
    calibrate (leave one out: never its own measured latency)."""
    pairs = [
        Pair(r["model"], r["estimate_ms"], r["measured_ms"], r.get("estimate_se_ms") or 0.0)
        for r in reports
        if r.get("estimate_ms") and r.get("measured_ms")
    ]
    return leave_one_out(calibration_set(pairs))


def _spread(values: list[float], unit: str) -> str:
    return f"min {min(values):.2f}{unit}, max {max(values):.2f}{unit}"


def print_over_runs(runs: list[list[dict[str, Any]]]) -> None:
    """The figures over the runs: error and time with their min-max, and the interval's coverage."""
    totals = [summary(reports) for reports in runs]
    print(f"\nover {len(runs)} run(s):")
    medians = [t["median_abs_error_pct"] for t in totals if t["median_abs_error_pct"] is not None]
    if medians:
        median = statistics.median(medians)
        print(
            f"median |error| {median:.2f}% (median of the runs' medians; {_spread(medians, '%')}); "
            f"target ≤ {TARGET_ERROR_PCT:.0f}%: {_verdict(median, TARGET_ERROR_PCT, True, ' points')}"
        )
    against = [
        t["median_abs_error_vs_min_pct"] for t in totals if t["median_abs_error_vs_min_pct"] is not None
    ]
    if against:
        print(
            f"median |error| against the whole model's fastest run {statistics.median(against):.2f}% "
            f"(median of the runs'; {_spread(against, '%')})"
        )
    ratios = [t["time_ratio_whole_to_bricks"] for t in totals if t["time_ratio_whole_to_bricks"] is not None]
    if ratios:
        ratio = statistics.median(ratios)
        print(
            f"time ratio whole/bricks {ratio:.2f}x (median of the runs'; {_spread(ratios, 'x')}); "
            f"target ≥ {TARGET_RATIO:.0f}x: {_verdict(ratio, TARGET_RATIO, False, 'x')}"
        )
    tested = [held_out(reports) for reports in runs]
    flat = [(pair, interval) for run in tested for pair, interval in run]
    if not flat:
        print("no interval to test: no model estimated and measured")
        return
    inside = sum(interval.holds(pair.measured_ms) for pair, interval in flat)
    above = sum(pair.measured_ms > interval.high_ms for pair, interval in flat)
    share = inside / len(flat)
    per_run = ", ".join(
        f"{100 * sum(i.holds(p.measured_ms) for p, i in run) / len(run):.0f}%" for run in tested if run
    )
    calibrated = sum(interval.calibration.calibrated for _, interval in flat)
    print(
        f"interval coverage (nominal {100 * NOMINAL:.0f}%, each model's interval calibrated on its run's "
        f"other models, {calibrated} of {len(flat)} calibrated): {inside} of {len(flat)} measured "
        f"medians inside ({100 * share:.1f}%; per run {per_run}; outside: {above} above, "
        f"{len(flat) - inside - above} below); target ≥ {100 * TARGET_COVERAGE:.0f}%: "
        f"{_verdict(100 * share, 100 * TARGET_COVERAGE, False, ' points')}"
    )
    widths = [100 * (interval.high_ms - interval.low_ms) / pair.estimate_ms for pair, interval in flat]
    width = statistics.median(widths)
    print(
        f"median interval width {width:.1f}% of the estimate ((high − low) / estimate; "
        f"{_spread(widths, '%')}); target ≤ {TARGET_WIDTH_PCT:.0f}%: "
        f"{_verdict(width, TARGET_WIDTH_PCT, True, ' points')}"
    )


def main() -> None:
    args = _arguments()
    refs = (args.refs or (PYTORCH_MODELS if args.framework == "pytorch" else MODELS))[: args.limit]
    runs = [run_once(refs, args, number) for number in range(1, args.runs + 1)]
    print_over_runs(runs)
    if args.json_file:
        document = [
            {"run": number, "reports": reports, "summary": summary(reports)}
            for number, reports in enumerate(runs, 1)
        ]
        Path(args.json_file).write_text(json.dumps(document, indent=1, default=str))
    sys.exit(0)


if __name__ == "__main__":
    main()
