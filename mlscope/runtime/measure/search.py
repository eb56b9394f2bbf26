"""The max-QPS search: the highest arrival rate whose certified percentile latency meets a bound.

Owns `find_max_qps` (bracketing, then bisection, on any probe function) and `search_max_qps`, the
server scenario's search: each probe is a server run long enough to certify (or certainly fail)
the percentile against the bound; a probe passes when its run is valid — certified, and neither
the generator nor an overload spoiled it. The curve of every probe (rate → p50/p90/p99, achieved
rate) is kept in the measurement's `load.search`, so a throughput–latency plot can be drawn from it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from mlscope.contract.load import MAX_QPS, LoadSettings
from mlscope.runtime.measure.generator import IssueRecord, Schedule
from mlscope.runtime.measure.load_report import LoadReport
from mlscope.runtime.measure.load_run import generator_capacity, outcome_of, run_under_load
from mlscope.runtime.measure.loop import NS_PER_S, Timer, _warm_up
from mlscope.runtime.measure.scenario_base import OnProbe, Outcome
from mlscope.runtime.measure.settings import MeasureSettings

__all__ = ["MAX_PROBES", "MIN_QPS", "Probe", "find_max_qps", "probe_passes", "search_max_qps"]

# A search gives up below this rate, and after this many probes.
MIN_QPS = 0.1
MAX_PROBES = 24


def probe_passes(report: LoadReport) -> tuple[bool, str]:
    """A probe's verdict from its run's report: it passes when the run is valid (its percentile
    certified against the bound, and neither the generator nor an overload spoiled it); the reason
    is the first finding against it, or "certified".
    """
    return (False, report.invalid[0]) if report.invalid else (True, "certified")


@dataclass
class Probe:
    """One rate tried: whether it passed, why not, and what it measured."""

    qps: float
    passed: bool
    reason: str
    record: IssueRecord
    report: LoadReport
    duration_s: float

    def curve_point(self) -> dict[str, Any]:
        """The probe as one point of the throughput–latency curve."""
        latencies = self.report.latencies_ns.astype(np.float64) / 1e6
        p50, p90, p99 = (
            (float(v) for v in np.percentile(latencies, [50, 90, 99])) if latencies.size else (None,) * 3
        )
        certificate = self.report.certificate
        return {
            "target_qps": self.qps,
            "scheduled_qps": self.report.section["scheduled_qps"],
            "achieved_qps": self.report.section["achieved_qps"],
            "completed_qps": self.report.section["completed_qps"],
            "queries": self.report.section["queries"],
            "duration_s": round(self.duration_s, 3),
            "p50_ms": p50,
            "p90_ms": p90,
            "p99_ms": p99,
            "percentile_ms": certificate.estimate_ms,
            "certified": certificate.ok,
            "passed": self.passed,
            "reason": self.reason,
        }


class Tried(Protocol):
    """What the search needs of a probe: the rate tried and whether it passed."""

    qps: float
    passed: bool


T = TypeVar("T", bound=Tried)


def find_max_qps(
    probe: Callable[[float], T],
    start_qps: float,
    *,
    resolution: float,
    cap_qps: float,
    max_probes: int = MAX_PROBES,
    min_qps: float = MIN_QPS,
) -> tuple[T | None, list[T]]:
    """Bracket, then bisect, the highest passing rate.

    From `start_qps`, double while probes pass (up to `cap_qps`) or halve while they fail (down to
    `min_qps`, MIN_QPS by default); then bisect between the highest passing rate and the lowest
    failing one above it until they are within `resolution` of each other. A pass above a failure
    (noise near the edge) moves the bracket up.

    Returns:
        The highest passing probe (None when none passed) and every probe, in the order run.
    """
    probes: list[T] = []
    best: T | None = None
    qps = min(max(start_qps, min_qps), cap_qps)
    while len(probes) < max_probes:
        result = probe(qps)
        probes.append(result)
        if result.passed and (best is None or qps > best.qps):
            best = result
        low = best.qps if best is not None else None
        failing = [p.qps for p in probes if not p.passed and (low is None or p.qps > low)]
        high = min(failing) if failing else None
        if high is None:
            if low is None or low >= cap_qps:
                break
            qps = min(low * 2, cap_qps)
        elif low is None:
            qps = high / 2
            if qps < min_qps:
                break
        else:
            if (high - low) / low <= resolution:
                break
            qps = (low + high) / 2
    return best, probes


def search_max_qps(
    predict: Callable[[Any], Any],
    batches: Sequence[Any],
    batch_size: int,
    settings: MeasureSettings,
    load: LoadSettings,
    *,
    timer: Timer | None,
    on_probe: OnProbe | None,
    record_starts: bool,
) -> Outcome:
    """The server scenario's search; the measurement is the best passing probe's, with the curve.

    Starts at `load.qps`, or else at half what `max_in_flight` model threads would serve at the
    warm-up's mean service time.
    """
    started = time.perf_counter_ns()
    warmup_count = _warm_up(predict, batches, settings, timer)
    warmup_s = (time.perf_counter_ns() - started) / NS_PER_S
    service_s = max(warmup_s / max(warmup_count, 1), 1e-6)
    start_qps = load.qps if load.qps is not None else 0.5 * load.max_in_flight / service_s
    cap = min(MAX_QPS, generator_capacity())

    def run_probe(qps: float) -> Probe:
        began = time.perf_counter_ns()
        schedule = Schedule("poisson", qps, seed=load.seed)
        record, result = run_under_load(
            predict,
            batches,
            batch_size,
            settings,
            load,
            "server",
            schedule,
            load.latency_bound_ms,
            timer=timer,
        )
        passed, reason = probe_passes(result)
        probe = Probe(qps, passed, reason, record, result, (time.perf_counter_ns() - began) / NS_PER_S)
        if on_probe is not None:
            on_probe(probe.curve_point())
        return probe

    best, probes = find_max_qps(run_probe, start_qps, resolution=load.resolution, cap_qps=cap)
    shown = best if best is not None else min(probes, key=lambda p: p.qps)
    outcome = outcome_of(shown.record, shown.report, warmup_count, record_starts)
    percentile = load.percentile_for("server")
    outcome.load = {
        **outcome.load,
        "search": {
            "latency_bound_ms": load.latency_bound_ms,
            "percentile": percentile,
            # As LoadGen reports "scheduled samples per second": the rate the seeded schedule
            # really had over the probe, not the target it was drawn for.
            "max_qps": None if best is None else best.report.section["scheduled_qps"] or best.qps,
            "max_target_qps": None if best is None else best.qps,
            "capped": best is not None and best.qps >= cap,
            "probes": [p.curve_point() for p in probes],
        },
    }
    if best is None:
        outcome.invalid.insert(
            0,
            f"no rate met p{percentile:g} ≤ {load.latency_bound_ms:g} ms: the lowest tried, "
            f"{shown.qps:.3g} queries/s, failed ({shown.reason})",
        )
    return outcome
