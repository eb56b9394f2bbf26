"""How accurately the server scenario's load generator issues its Poisson schedule, on a no-op model
and beside models that keep the machine busy.

For each target rate (default 100, 1,000, 5,000, 10,000 and 20,000 queries/s) one run of the
generator (`run_under_load`, which skips the MAX_QPS cap and the rate check, so rates past what this
machine can issue are measured too) to a model that does nothing, each at least `--seconds` long,
printing: achieved / target QPS (the Poisson schedule's own rate differs from the target by
sampling noise, ~1/√n), achieved / scheduled QPS (what the generator did against what its schedule
asked), the p99 and max issue lateness, and the Little's-law ratio (time-averaged number in the system /
rate × mean latency). Targets: achieved / scheduled ≥ 0.99 and p99 lateness ≤ 1 ms; the table says
at which rate they stop holding on this machine.

Then the same generator beside busy models (`--busy-seconds`, 0 to skip): torchvision ResNet-18
(random weights, seed 0) exported to ONNX and run by ONNX Runtime with its default threads (one per
core) at 30 queries/s, and a model whose Python code holds the GIL for 8 ms a query at 40 queries/s;
each once with the issuing process at the priority it obtains (real-time where the system grants
it) and once at the ordinary priority (MLSCOPE_GENERATOR_PRIORITY=normal). Per run: achieved /
scheduled, issue lateness p50/p99/max (how late the generator handed queries to the model's
process), the issuing process's share of one CPU, how late after its due time a query that found
the model idle started (p50/p99: the hand-over and the model thread's wake-up together) and
Little's law.
Targets: achieved / scheduled ≥ 0.99 and p99 issue lateness ≤ 0.5 ms.

    python benchmarks/loadgen_generator.py [--rates 100,1000,5000,10000,20000] [--seconds 5]
        [--busy-seconds 20]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.measure.generator import Schedule
from mlscope.runtime.measure.load_run import generator_capacity, run_under_load
from mlscope.runtime.scenarios import get_scenario

__all__ = ["TARGET_LATENESS_MS", "TARGET_RATIO", "measure_generator"]

TARGET_RATIO = 0.99
TARGET_LATENESS_MS = 1.0
TARGET_BUSY_LATENESS_MS = 0.5


def _noop(batch: Any) -> None:
    return None


def measure_generator(qps: float, seconds: float, seed: int = 0) -> dict[str, Any]:
    """One server-scenario run of the generator at `qps` to a no-op model.

    Returns:
        target, scheduled and achieved QPS, their ratios, p99 and max issue lateness (ms), the
        Little's-law ratio, queries issued, stop reason, whether both targets hold, and the
        report's invalid findings.
    """
    settings = MeasureSettings(min_seconds=seconds, max_seconds=seconds * 2 + 5, warmup_count=0)
    load = LoadSettings(qps=min(qps, 100_000.0), percentile=90, max_in_flight=1, seed=seed)
    record, result = run_under_load(
        _noop, [None], 1, settings, load, "server", Schedule("poisson", qps, seed=seed), None
    )
    section = result.section
    achieved, scheduled = section["achieved_qps"] or 0.0, section["scheduled_qps"] or 0.0
    late = section["issue_lateness_ms"]
    ratio_scheduled = achieved / scheduled if scheduled else 0.0
    return {
        "target_qps": qps,
        "scheduled_qps": scheduled,
        "achieved_qps": achieved,
        "achieved_over_target": achieved / qps,
        "achieved_over_scheduled": ratio_scheduled,
        "lateness_p99_ms": late["p99"],
        "lateness_max_ms": late["max"],
        "little_ratio": section["in_flight"]["ratio"],
        "queries": section["queries"],
        "stop_reason": record.stop_reason,
        "holds": ratio_scheduled >= TARGET_RATIO and (late["p99"] or 0.0) <= TARGET_LATENESS_MS,
        "invalid": list(result.invalid),
    }


def resnet18_session(directory: Path) -> Any:
    """torchvision ResNet-18 (random weights, seed 0) exported to ONNX, in an ONNX Runtime session
    with its default options (as many intra-op threads as cores)."""
    import onnxruntime as ort
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    path = directory / "resnet18.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.zeros(1, 3, 224, 224),),
            str(path),
            input_names=["x"],
            output_names=["y"],
            dynamo=False,
        )
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def gil_holder(milliseconds: float) -> Callable[[Any], None]:
    """A model whose Python code holds the GIL for `milliseconds` a query (a busy loop)."""

    def predict(batch: Any) -> None:
        end = time.perf_counter_ns() + int(milliseconds * 1e6)
        while time.perf_counter_ns() < end:
            pass

    return predict


@contextmanager
def priority(name: str) -> Iterator[None]:
    """The issuing process's priority for the runs inside: "granted" (what it obtains) or "normal"."""
    before = os.environ.pop("MLSCOPE_GENERATOR_PRIORITY", None)
    if name == "normal":
        os.environ["MLSCOPE_GENERATOR_PRIORITY"] = "normal"
    try:
        yield
    finally:
        os.environ.pop("MLSCOPE_GENERATOR_PRIORITY", None)
        if before is not None:
            os.environ["MLSCOPE_GENERATOR_PRIORITY"] = before


def measure_busy(
    predict: Callable[[Any], Any], batches: Sequence[Any], qps: float, seconds: float
) -> dict[str, Any]:
    """One server run beside a busy model; the generator's own figures."""
    settings = MeasureSettings(min_seconds=seconds, max_seconds=seconds * 2 + 5)
    load = LoadSettings(qps=qps, max_in_flight=1)
    measurement = get_scenario("server").run(predict, batches, 1, settings, load=load)
    section = measurement.load or {}
    late = section["issue_lateness_ms"]
    ratio = (section["achieved_qps"] or 0.0) / (section["scheduled_qps"] or 1.0)
    return {
        "achieved_over_scheduled": ratio,
        "late": late,
        "generator": section["generator"],
        "idle_start": section["generator"]["idle_start_ms"],
        "little": section["in_flight"]["ratio"],
        "median_ms": measurement.latency_ms.median,
        "queries": section["queries"],
        "valid": measurement.validity.valid,
        "reasons": list(measurement.validity.reasons),
        "holds": ratio >= TARGET_RATIO and (late["p99"] or 0.0) <= TARGET_BUSY_LATENESS_MS,
    }


def busy_part(seconds: float) -> None:
    print(
        f"\nbeside a busy model ({seconds:g} s per run; target: ach/sched ≥ {TARGET_RATIO}, p99 lateness "
        f"≤ {TARGET_BUSY_LATENESS_MS:g} ms)"
    )
    print(
        f"  {'model':<30} {'priority':<9} {'ach/sched':>9} {'late p50':>9} {'late p99':>9} {'late max':>9} "
        f"{'gen CPU':>8} {'idle p50':>9} {'idle p99':>9} {'Little':>7} {'median':>8} {'queries':>7}  "
        "holds  valid"
    )
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        session = resnet18_session(Path(tmp))
        images = [rng.standard_normal((1, 3, 224, 224), dtype=np.float32) for _ in range(8)]
        models = [
            ("ResNet-18 ORT default threads", lambda x: session.run(None, {"x": x}), images, 30.0),
            ("Python holding the GIL 8 ms", gil_holder(8.0), [None], 40.0),
        ]
        for name, predict, batches, qps in models:
            for wanted in ("granted", "normal"):
                with priority(wanted):
                    row = measure_busy(predict, batches, qps, seconds)
                late, gen, idle = row["late"], row["generator"], row["idle_start"]
                label = f"{name} {qps:g} qps"
                print(
                    f"  {label:<30} {gen['priority']:<9} {row['achieved_over_scheduled']:>9.4f} "
                    f"{late['p50']:>7.3f}ms {late['p99']:>7.3f}ms {late['max']:>7.2f}ms "
                    f"{gen['cpu_share']:>7.2%} {idle['p50'] or 0.0:>7.3f}ms {idle['p99'] or 0.0:>7.3f}ms "
                    f"{row['little']:>7.3f} {row['median_ms']:>6.2f}ms "
                    f"{row['queries']:>7,}  "
                    f"{'yes' if row['holds'] else 'NO':<5}  {'yes' if row['valid'] else 'NO'}",
                    flush=True,
                )
                for reason in row["reasons"]:
                    print(f"      validity: {reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="100,1000,5000,10000,20000", help="target QPS, comma separated")
    parser.add_argument("--seconds", type=float, default=5.0, help="minimum length of each run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the Poisson schedule")
    parser.add_argument(
        "--busy-seconds", type=float, default=20.0, help="length of each busy-model run; 0 skips"
    )
    args = parser.parse_args()
    rates = [float(rate) for rate in args.rates.split(",") if rate.strip()]

    capacity = generator_capacity()
    print(f"load generator accuracy, server scenario, no-op model ({args.seconds:g} s per rate)")
    print(
        f"  cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}; generator capacity "
        f"(all queries due at once): {capacity:,.0f} queries/s"
    )
    header = (
        f"  {'target':>8} {'achieved':>10} {'ach/target':>10} {'ach/sched':>9} "
        f"{'late p99':>9} {'late max':>9} {'Little':>7} {'queries':>8}  holds"
    )
    print(header)
    first_failure: float | None = None
    rows = []
    for qps in rates:
        row = measure_generator(qps, args.seconds, args.seed)
        rows.append(row)
        little = row["little_ratio"]
        print(
            f"  {qps:>8,.0f} {row['achieved_qps']:>10,.1f} {row['achieved_over_target']:>10.4f} "
            f"{row['achieved_over_scheduled']:>9.4f} {row['lateness_p99_ms']:>7.3f}ms "
            f"{row['lateness_max_ms']:>7.2f}ms {little if little is not None else float('nan'):>7.3f} "
            f"{row['queries']:>8,}  {'yes' if row['holds'] else 'NO'}",
            flush=True,
        )
        if not row["holds"] and first_failure is None:
            first_failure = qps
    print(f"  targets: achieved/scheduled ≥ {TARGET_RATIO}, p99 issue lateness ≤ {TARGET_LATENESS_MS:g} ms")
    held = [row["target_qps"] for row in rows if row["holds"]]
    if first_failure is None:
        print(f"  holds at every rate measured (up to {max(rates):,.0f} queries/s)")
    else:
        below = max((rate for rate in held if rate < first_failure), default=None)
        where = f"holds up to {below:,.0f}, " if below is not None else ""
        print(f"  {where}stops holding at {first_failure:,.0f} queries/s on this machine")
    for row in rows:
        for reason in row["invalid"]:
            print(f"  [{row['target_qps']:,.0f} qps] invalid: {reason}")
    if args.busy_seconds > 0:
        busy_part(args.busy_seconds)


if __name__ == "__main__":
    main()
