"""One run of the load generator as a scenario needs it: the stopping rule that ends it once the
percentile is certified (or certainly fails), the check that a rate is one this machine can issue at
all, and the outcome the scenario template summarises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mlscope.contract.errors import UserError
from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure.certify import certainly_fails, min_passing, min_queries
from mlscope.runtime.measure.closed_loop import issue_back_to_back
from mlscope.runtime.measure.generator import IssueRecord, Schedule, issue
from mlscope.runtime.measure.load_report import LoadReport, report
from mlscope.runtime.measure.loop import NS_PER_S, LoopResult, Timer
from mlscope.runtime.measure.scenario_base import Outcome
from mlscope.runtime.measure.settings import MeasureSettings

__all__ = ["check_rate", "generator_capacity", "outcome_of", "run_under_load"]

# Rates below this need no check that the generator can issue them.
_CHECKED_RATE = 1000.0
# After issuing ends, queued queries get this long (at least) to complete before they are cancelled.
_MIN_DRAIN_SECONDS = 1.0


@functools.lru_cache(maxsize=1)
def generator_capacity() -> float:
    """Queries per second this process's load generator sends when every query is already due
    (to a no-op model): the most it can issue. Measured once per process, in ~0.2 s."""
    record = issue(
        lambda batch: None,
        [None],
        Schedule("fixed", 10_000_000.0),
        max_in_flight=1,
        max_seconds=0.2,
        check_every_seconds=0.05,
        decide=lambda record, elapsed: None,
        drain_seconds=1.0,
    )
    return record.issued * NS_PER_S / max(record.issue_end_ns, 1)


def check_rate(queries_per_s: float, samples_per_query: int = 1) -> None:
    """Refuse a rate this machine cannot issue.

    Raises:
        UserError: the samples per second asked for exceed what the generator sends.
    """
    wanted = queries_per_s * samples_per_query
    if wanted <= _CHECKED_RATE:
        return
    capacity = generator_capacity()
    if wanted > capacity:
        raise UserError(
            f"qps={queries_per_s:g} is above what this machine can issue: its load generator sends at most "
            f"about {capacity:,.0f} queries/s (measured with a no-op model); lower the rate",
            field="qps",
        )


def run_under_load(
    predict: Callable[[Any], Any],
    batches: Sequence[Any],
    batch_size: int,
    settings: MeasureSettings,
    load: LoadSettings,
    scenario: str,
    schedule: Schedule | None,
    bound_ms: float | None,
    *,
    timer: Timer | None = None,
    on_progress: Callable[[float], None] | None = None,
    start_at_ns: int | None = None,
) -> tuple[IssueRecord, LoadReport]:
    """One run of the generator on `schedule`, stopped by the early-stopping rule; with no schedule,
    queries of `load.samples_per_query` samples issued back to back, each when the previous one
    completed (multi_stream's closed loop, see closed_loop).

    Issuing stops, once min_seconds and min_count are met, when the percentile is certified (with
    a bound: enough queries under it; without: enough queries for LoadGen's estimate) or, with a
    bound, when it certainly fails; at max_seconds otherwise.

    `start_at_ns`: when the schedule's time 0 falls (a part of a split load: the shared start).

    Returns:
        The generator's record and its report.
    """
    percentile = load.percentile_for(scenario)
    p, confidence = percentile / 100, load.confidence
    per_query = schedule.samples_per_query if schedule is not None else load.samples_per_query
    bound_ns = None if bound_ms is None else bound_ms * 1e6
    min_ns = settings.min_seconds * NS_PER_S
    estimate_needed = min_queries(p, confidence)

    def decide(record: IssueRecord, elapsed_ns: int) -> str | None:
        queries = record.issued // per_query
        shape = (queries, per_query)
        scheduled = record.scheduled[: queries * per_query].reshape(shape)[:, 0]
        ended = record.ended[: queries * per_query].reshape(shape)
        complete = (ended > 0).all(axis=1)
        if bound_ns is None:
            known, over, needed = int(complete.sum()), 0, estimate_needed
        else:
            latency = ended.max(axis=1) - scheduled
            now = elapsed_ns + int(scheduled[0]) if queries else elapsed_ns
            # A query not yet complete but already older than the bound is certainly over it.
            overdue = int((~complete & (now - scheduled > bound_ns)).sum())
            over = int((complete & (latency > bound_ns)).sum()) + overdue
            known = int(complete.sum()) + overdue
            needed = min_passing(over, p, confidence) + over
        if on_progress is not None:
            by_time = elapsed_ns / min_ns if min_ns > 0 else 1.0
            on_progress(max(0.0, min(1.0, by_time, queries / settings.min_count, known / needed)))
        if elapsed_ns < min_ns or queries < settings.min_count:
            return None
        if known >= needed:
            return "certified"
        if bound_ns is not None and certainly_fails(known, over, percentile, confidence):
            return "failed"
        return None

    # Both issuers stop on the same rule, with the same model threads and wall clock.
    common: dict[str, Any] = {
        "max_in_flight": load.max_in_flight,
        "max_seconds": settings.max_seconds,
        "check_every_seconds": settings.check_every_seconds,
        "decide": decide,
        "timer": timer,
    }
    if schedule is None:
        record = issue_back_to_back(predict, batches, per_query, **common)
    else:
        drain = max(_MIN_DRAIN_SECONDS, 0.25 * settings.max_seconds, 2 * (bound_ms or 0) / 1000)
        record = issue(predict, batches, schedule, drain_seconds=drain, start_at_ns=start_at_ns, **common)
    if on_progress is not None:
        on_progress(1.0)
    target_qps = schedule.rate if schedule is not None else None
    return record, report(record, scenario, load, batch_size, target_qps, bound_ms)


def outcome_of(record: IssueRecord, result: LoadReport, warmup_count: int, record_starts: bool) -> Outcome:
    """The scenario template's outcome of one run under load."""
    loop = LoopResult(
        latencies_ns=result.latencies_ns if result.latencies_ns.size else np.zeros(1, dtype=np.int64),
        wall_ns=record.issue_end_ns,
        stop_reason=record.stop_reason,
        warmup_count=warmup_count,
        starts_ns=result.arrivals_ns if record_starts else None,
    )
    invalid = list(result.invalid)
    if not result.latencies_ns.size:
        invalid.insert(0, "no query completed")
    return Outcome(
        loop,
        result.section,
        throughput=result.throughput,
        invalid=invalid,
        warnings=list(result.warnings),
        judge_stability=False,
    )
