"""What a run under load says about itself: the `load` section of a server or multi_stream
measurement, and the findings that make it invalid or carry a warning.

Owns `report`, which turns the generator's `IssueRecord` into per-query latencies (from each
query's scheduled arrival), the early-stopping certificate of the scenario's percentile, and the
generator's self-check: intended vs achieved arrival rate, issue lateness, Little's law, and
queries left unfinished.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure.certify import Certificate, certify_bound, estimate_percentile
from mlscope.runtime.measure.generator import IssueRecord
from mlscope.runtime.measure.loop import NS_PER_S

__all__ = [
    "ACHIEVED_RATE_LIMIT",
    "LATENESS_LIMIT_MS",
    "LATE_MS",
    "LITTLE_TOLERANCE",
    "LoadReport",
    "certificate_reason",
    "report",
]

NS_PER_MS = 1_000_000.0
# A query sent more than this after it was due is counted as late.
LATE_MS = 1.0
# The generator was the bottleneck when its p99 lateness exceeds this (or LATENESS_SHARE of the
# median latency, whichever is larger: a lateness far below the latencies measured changes nothing)
# for at least LATE_QUERIES_MIN queries (in a short run p99 is its latest query or two, and one
# scheduler hiccup on a shared machine is not a generator that cannot keep up: that query's wait is
# still in its latency, which runs from its due time); above LATE_MS (its accuracy target) it is a
# warning...
LATENESS_LIMIT_MS = 2.0
LATENESS_SHARE = 0.10
LATE_QUERIES_MIN = 3
# ...or when it sent fewer queries per second than its own schedule asked, by more than this.
ACHIEVED_RATE_LIMIT = 0.99
# Mean number in the system as Poisson arrivals found it vs arrival rate × mean latency (Little's
# law): a warning beyond this.
LITTLE_TOLERANCE = 0.10
# Warn when the serving side's own per-query cost makes the mean latency longer than this share (the
# queue-truth target, docs/load.md "Against queueing theory").
SERVING_GAP_SHARE = 0.02
_LITTLE_MIN_QUERIES = 200


@dataclass
class LoadReport:
    """One run under load, summarised.

    Attributes:
        latencies_ns: each completed query's latency, from its scheduled arrival, in send order.
        arrivals_ns: each completed query's scheduled arrival (perf_counter_ns), same order.
        section: the measurement's `load` section.
        certificate: the early-stopping certificate of the percentile.
        throughput: samples completed per second (batch_size × samples).
        invalid: findings that make the measurement invalid.
        warnings: findings that leave it valid.
    """

    latencies_ns: npt.NDArray[np.int64]
    arrivals_ns: npt.NDArray[np.int64]
    section: dict[str, Any]
    certificate: Certificate
    throughput: float
    invalid: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _ms_summary(values_ns: npt.NDArray[Any], names: tuple[str, ...]) -> dict[str, float | None]:
    if values_ns.size == 0:
        return {name: None for name in names}
    values = values_ns.astype(np.float64) / NS_PER_MS
    picks = {"mean": float(values.mean()), "max": float(values.max())}
    for name, q in (("p50", 50), ("median", 50), ("p90", 90), ("p99", 99)):
        picks[name] = float(np.percentile(values, q))
    return {name: picks[name] for name in names}


def _rate(count: int, times_ns: npt.NDArray[np.int64]) -> float | None:
    """Events per second from their times: (count − 1) gaps over the span."""
    if count < 2:
        return None
    span = int(times_ns[-1] - times_ns[0])
    return (count - 1) * NS_PER_S / span if span > 0 else None


def certificate_reason(certificate: Certificate) -> str | None:
    """The validity reason of a certificate that is not ok; None when it is."""
    if certificate.ok:
        return None
    name = f"p{certificate.percentile:g}"
    level = f"{certificate.confidence:.0%} confidence"
    if certificate.bound_ms is None:
        return (
            f"too few samples to certify {name}: {certificate.queries} of the "
            f"{certificate.queries + certificate.queries_needed} LoadGen's early stopping needs at {level}"
        )
    return (
        f"{name} ≤ {certificate.bound_ms:g} ms not certified at {level}: {certificate.over_bound} of "
        f"{certificate.queries} queries over the bound; {certificate.queries_needed} more, all under it, "
        "would be needed"
    )


def report(
    record: IssueRecord,
    scenario: str,
    load: LoadSettings,
    batch_size: int,
    target_qps: float | None,
    bound_ms: float | None,
) -> LoadReport:
    """Summarise a run under load.

    Args:
        record: the generator's record, trimmed to whole queries.
        scenario: "server" or "multi_stream".
        load: the run's load settings.
        batch_size: samples per input, for throughput.
        target_qps: the queries per second asked for; None when queries were issued back to back
            (each when the previous one completed: sent when scheduled, so never late).
        bound_ms: the latency bound certified against; None to estimate the percentile instead.

    Returns:
        The report; its invalid and warning findings follow the module's policy.
    """
    per_query = record.samples_per_query
    queries = record.issued // per_query
    shape = (queries, per_query)
    scheduled = record.scheduled.reshape(shape)[:, 0]
    sent = record.sent.reshape(shape)[:, 0]
    ended = record.ended.reshape(shape)
    complete = (ended > 0).all(axis=1)
    done_at = ended.max(axis=1)[complete]
    latencies = done_at - scheduled[complete]
    unfinished = int(queries - complete.sum())
    percentile = load.percentile_for(scenario)
    if bound_ms is None:
        certificate = estimate_percentile(latencies, percentile, load.confidence)
    else:
        certificate = certify_bound(latencies, bound_ms, percentile, load.confidence, unfinished=unfinished)

    lateness = record.sent - record.scheduled
    finished = record.ended > 0
    service = record.ended[finished] - record.started[finished]
    scheduled_qps, achieved_qps = _rate(queries, scheduled), _rate(queries, sent)
    done_times = np.sort(done_at)
    completed_qps = (
        float(complete.sum()) * NS_PER_S / int(done_times[-1] - scheduled[0])
        if done_times.size and done_times[-1] > scheduled[0]
        else None
    )
    section: dict[str, Any] = {
        "certified": certificate.to_dict(),
        "target_qps": target_qps,
        "scheduled_qps": scheduled_qps,
        "achieved_qps": achieved_qps,
        "completed_qps": completed_qps,
        "issue_lateness_ms": _ms_summary(lateness, ("mean", "p50", "p99", "max")),
        "queries": queries,
        "late": int((lateness > LATE_MS * NS_PER_MS).reshape(shape)[:, 0].sum()),
        "queued": int((record.in_flight >= load.max_in_flight).sum()),
        "unfinished": unfinished,
        "max_in_flight": load.max_in_flight,
        "seed": load.seed,
        "in_flight": _littles_law(record, scenario, scheduled_qps),
        "generator": {
            "process": "separate",
            "priority": record.issuer_priority,
            "cpu_share": record.issuer_cpu_ns / record.issue_end_ns if record.issue_end_ns > 0 else None,
            "idle_start_ms": _ms_summary(
                record.idle_start[record.idle_start >= 0] if record.idle_start is not None else np.zeros(0),
                ("p50", "p99", "max"),
            ),
        },
        "service_ms": _ms_summary(service, ("median", "p90", "p99")),
        "serving_gap_ms": _ms_summary(serving_gaps(record), ("p50", "p99", "max")),
    }
    if scenario == "multi_stream" and load.back_to_back:
        # No interval, so nothing to overrun; no issuing process either: each query follows the last.
        section.update(samples_per_query=per_query, back_to_back=True, interval_ms=None)
        del section["generator"]
    elif scenario == "multi_stream":
        section.update(
            samples_per_query=per_query,
            back_to_back=False,
            interval_ms=load.interval_ms,
            overruns=int((latencies > load.interval_ms * NS_PER_MS).sum()),
        )
    # Samples completed over the span from the first arrival to the last completion.
    span_ns = int(done_times[-1] - scheduled[0]) if done_times.size else record.issue_end_ns
    throughput = float(finished.sum()) * batch_size * NS_PER_S / max(span_ns, 1)
    result = LoadReport(
        latencies_ns=latencies.astype(np.int64),
        arrivals_ns=(scheduled[complete] + record.start_ns).astype(np.int64),
        section=section,
        certificate=certificate,
        throughput=throughput,
    )
    # A query is as late as its latest sample.
    per_query_lateness = lateness.reshape(shape).max(axis=1)
    _judge(result, scheduled_qps, achieved_qps, completed_qps, per_query_lateness, unfinished)
    return result


def serving_gaps(record: IssueRecord) -> npt.NDArray[np.int64]:
    """The serving side's own time per query in a busy period: for each sample that waited for a
    model thread, from the completion that freed the thread to its own start.

    That is the model threads' loop (taking the next sample, recording the last) and whatever the
    model's call costs outside the model: time the server is held for no query, which lengthens
    every wait behind it as a longer service would. A sample waited when the latest completion
    before its start came after it was due (threads take samples in due order, so that completion
    freed the thread that took it).
    """
    count = record.issued
    began = record.started[:count] > 0
    finished = record.ended[:count] > 0
    if not began.any() or not finished.any():
        return np.zeros(0, dtype=np.int64)
    starts = record.started[:count][began]
    due = record.scheduled[:count][began]
    ends = np.sort(record.ended[:count][finished])
    previous = np.searchsorted(ends, starts, side="right") - 1
    freed = ends[np.maximum(previous, 0)]
    waited = (previous >= 0) & (freed >= due)
    return (starts - freed)[waited]


def _littles_law(record: IssueRecord, scenario: str, scheduled_qps: float | None) -> dict[str, Any]:
    """The number of samples in the system (due and not completed), three ways: as a time average
    over the arrivals' span, as each arrival found it, and by Little's law (arrival rate × mean
    latency).

    All three come from the recorded due and completion times, the origin the latencies run from.
    `ratio` is the time average over Little's law: a queue whose record is whole gives 1, and a
    query lost, counted twice or timed from another origin moves it. Poisson arrivals see time
    averages (PASTA), so `observed` (the arrivals' mean) agrees too, within its sampling noise. A
    multi_stream query arrives on a clock tick and sees less than the average, so there neither
    ratio is given.
    """
    count = record.issued
    if count == 0:
        return {"observed": None, "time_average": None, "littles_law": None, "ratio": None}

    due = record.scheduled[:count]
    ended = record.ended[:count]
    # A sample never completed is in the system until the end.
    leave = np.where(ended > 0, ended, np.iinfo(np.int64).max)
    completions = np.sort(leave)
    # Those due before this one (or with it, in an earlier slot) and not yet completed when it came.
    found = np.arange(count) - np.searchsorted(completions, due, side="right")
    observed = float(np.maximum(found, 0).mean())
    first, last = int(due[0]), int(due[-1])
    time_average = None
    if last > first:
        overlap = np.clip(np.minimum(leave, last) - np.maximum(due, first), 0, None)
        time_average = float(overlap.sum()) / (last - first)
    finished = ended > 0
    if scenario != "server" or scheduled_qps is None or not finished.any():
        return {"observed": observed, "time_average": time_average, "littles_law": None, "ratio": None}
    mean_latency_s = float((ended[finished] - due[finished]).mean()) / NS_PER_S
    law = scheduled_qps * record.samples_per_query * mean_latency_s
    ratio = time_average / law if law > 0 and time_average is not None else None
    return {"observed": observed, "time_average": time_average, "littles_law": law, "ratio": ratio}


def _serving_gap_inflation(section: dict[str, Any], queries: int) -> float | None:
    """How much longer the mean latency is for the serving gap, by M/D/1's mean wait per server,
    W = ρS / (2(1 − ρ)): the gap g holds the server longer, S + g, at utilisation ρ(S + g)/S, while
    each query's own service stays S. Returns R'/R − 1 with R = S + W (inf when the longer hold
    would saturate the server); None when there is too little to say (no waits, no service or rate).
    """
    gap, service = section["serving_gap_ms"]["p50"], section["service_ms"]["median"]
    rate = section["completed_qps"]
    if gap is None or not service or not rate or queries < _LITTLE_MIN_QUERIES:
        return None
    samples = section.get("samples_per_query", 1)
    rho = rate * samples * service / 1000 / section["max_in_flight"]
    if not 0 < rho < 1:
        return None
    held = service + gap
    rho_held = rho * held / service
    if rho_held >= 1:
        return math.inf
    mean = service + rho * service / (2 * (1 - rho))
    mean_held = service + rho_held * held / (2 * (1 - rho_held))
    return mean_held / mean - 1


def _usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask, which a container's cpuset narrows)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _judge(
    result: LoadReport,
    scheduled_qps: float | None,
    achieved_qps: float | None,
    completed_qps: float | None,
    lateness: npt.NDArray[np.int64],
    unfinished: int,
) -> None:
    section = result.section
    queries = section["queries"]
    if scheduled_qps and achieved_qps is not None and achieved_qps / scheduled_qps < ACHIEVED_RATE_LIMIT:
        result.invalid.append(
            f"the load generator fell behind its schedule: it issued {achieved_qps:.4g} queries/s of the "
            f"{scheduled_qps:.4g} scheduled ({achieved_qps / scheduled_qps:.3f} < {ACHIEVED_RATE_LIMIT}); "
            "the figures describe the generator, not the model"
        )
    p99_late = section["issue_lateness_ms"]["p99"]
    median_ms = float(np.median(result.latencies_ns)) / NS_PER_MS if result.latencies_ns.size else 0.0
    late_limit = max(LATENESS_LIMIT_MS, LATENESS_SHARE * median_ms)
    too_late = int((lateness > late_limit * NS_PER_MS).sum())
    systematic = too_late >= LATE_QUERIES_MIN
    if p99_late is not None and p99_late > late_limit and systematic:
        result.invalid.append(
            f"the load generator was late: p99 issue lateness {p99_late:.3g} ms > {late_limit:.3g} ms "
            f"({too_late} of {queries} queries; the machine could not issue this load on time; the "
            "figures describe the generator, not the model)"
        )
    if unfinished:
        rate = f"{completed_qps:.4g}" if completed_qps is not None else "?"
        target = section["target_qps"]
        asked = f" of the {target:.4g} asked for" if target is not None else ""
        result.invalid.append(
            f"overloaded: {unfinished} of {queries} queries never completed (the model completed {rate} "
            f"queries/s{asked}); latencies grow with the run's length"
        )
    reason = certificate_reason(result.certificate)
    if reason is not None:
        result.invalid.append(reason)
    ratio = section["in_flight"]["ratio"]
    if ratio is not None and queries >= _LITTLE_MIN_QUERIES and abs(ratio - 1) > LITTLE_TOLERANCE:
        result.warnings.append(
            f"Little's law off by {ratio - 1:+.0%}: {section['in_flight']['time_average']:.3g} in the system "
            f"on average, rate × mean latency gives {section['in_flight']['littles_law']:.3g}"
        )
    if p99_late is not None and p99_late > LATE_MS and not (p99_late > late_limit and systematic):
        result.warnings.append(
            f"p99 issue lateness {p99_late:.3g} ms is above the generator's {LATE_MS:g} ms target "
            "(counted in the latencies, which run from each query's due time)"
        )
    late = section["late"]
    if late and not result.invalid:
        result.warnings.append(f"{late} of {queries} queries issued more than {LATE_MS:g} ms late")
    inflation = _serving_gap_inflation(section, queries)
    if inflation is not None and inflation > SERVING_GAP_SHARE:
        gap_ms = section["serving_gap_ms"]["p50"]
        share = gap_ms / section["service_ms"]["median"]
        result.warnings.append(
            f"the serving side's own {gap_ms * 1000:.3g} µs a query (from a completion to the next waiting "
            f"query's start, p50) is {share:.2%} of "
            f"the service; at this utilisation it makes the mean latency about {inflation:.0%} longer than "
            "the model alone would (part of what is measured, as a server's own loop would be)"
        )
    cores = _usable_cores()
    if section["max_in_flight"] > cores:
        result.warnings.append(
            f"max_in_flight={section['max_in_flight']} is above the {cores} cores this process may use: the "
            "model's threads contend for them, and the latencies include that contention"
        )
    overruns = section.get("overruns")
    if overruns:
        result.warnings.append(
            f"{overruns} of {queries} queries overran their {section['interval_ms']:g} ms interval"
        )
