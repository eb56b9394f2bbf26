"""How a point's request records become its measurement: per request TTFT, TPOT and end-to-end
latency, per point their summaries, tokens and requests per second, goodput and the SLO
certificates, the failures by reason, and the verdict (see `driver` for how requests are issued).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlscope.contract.generation import GenerationSettings
from mlscope.contract.load import LoadSettings
from mlscope.contract.trace import trace_identity
from mlscope.runtime.generate.records import RequestRecord
from mlscope.runtime.measure.certify import certify_bound
from mlscope.runtime.measure.generator import IssueRecord
from mlscope.runtime.measure.load_report import LATE_MS
from mlscope.runtime.measure.loop import NS_PER_S, STOP_STABLE, LoopResult
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.measure.stats import summarize
from mlscope.runtime.measure.validity import judge

__all__ = ["MIN_REQUESTS", "NS_PER_MS", "Point", "per_request", "reduce_records"]

NS_PER_MS = 1_000_000
# The figures of generation a pooling API (embeddings, rerank) has none of: named, never zero.
NOT_APPLICABLE_TO_POOLING = ("ttft_ms", "tpot_ms", "itl_ms", "output_tokens", "output_tokens_per_s")
# Fewest successful requests a point's intervals are reported from.
MIN_REQUESTS = 10
# Up to this many requests, the measurement keeps each one's figures (`generation.per_request`), as
# it keeps each latency: plots and checks read them; beyond, the summaries only.
_MAX_PER_REQUEST = 2_000


@dataclass
class Point:
    """One run of the requests at one rate: the records and how long it took, and for an open
    loop the generator's record (when each request was due and when it was handed over)."""

    records: list[RequestRecord]
    wall_ns: int
    qps: float | None
    environment: dict[str, Any]
    issued: IssueRecord | None = None


def per_request(record: RequestRecord) -> dict[str, float | None]:
    """TTFT, TPOT and end-to-end latency of one successful request, in ms (TPOT None for a single
    output token; TTFT and TPOT None for a request that asked for no tokens, a pooling API's)."""
    origin = record.origin_ns
    if not record.token_ns:
        return {"ttft_ms": None, "tpot_ms": None, "e2e_ms": (record.end_ns - origin) / NS_PER_MS}
    first, last = record.token_ns[0], record.token_ns[-1]
    tokens = max(record.output_tokens, len(record.token_ns))
    return {
        "ttft_ms": (first - origin) / NS_PER_MS,
        "tpot_ms": (last - first) / NS_PER_MS / (tokens - 1) if tokens > 1 else None,
        "e2e_ms": (max(record.end_ns, last) - origin) / NS_PER_MS,
    }


def _per_request_lists(records: list[RequestRecord]) -> dict[str, list[Any]]:
    """Each request's figures in request order, None where it failed (its error says why)."""
    columns: dict[str, list[Any]] = {
        "prompt_tokens": [],
        "output_tokens": [],
        "ttft_ms": [],
        "tpot_ms": [],
        "e2e_ms": [],
        "error": [],
    }
    for record in records:
        figures = per_request(record) if record.succeeded else {}
        columns["prompt_tokens"].append(record.prompt_tokens)
        columns["output_tokens"].append(record.output_tokens)
        for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
            value = figures.get(metric)
            columns[metric].append(None if value is None else round(value, 6))
        columns["error"].append(record.error)
    if any(record.turn is not None for record in records):
        columns["turn"] = [record.turn for record in records]
    return columns


def _error_kind(error: str) -> str:
    """A failure's reason without its particulars ("stopped early: 3 of 16 tokens" → "stopped early",
    "HTTP 500 from http://host/v1/chat/completions: ..." → "HTTP 500")."""
    return error.split(":", 1)[0].split(" from ", 1)[0].strip()[:80]


def reduce_records(
    point: Point,
    settings: GenerationSettings,
    load: LoadSettings,
    measure: MeasureSettings,
    *,
    remote: bool = False,
) -> dict[str, Any]:
    """The measurement of a point: `latency_ms` is the end-to-end latency, `throughput` requests/s,
    and `generation` holds the rest (docs/design.md's names).

    Args:
        remote: the model ran in another process (an endpoint): this machine's other processes
            (the server among them, when it is local) are not judged as contention.
    """
    records = point.records
    ok = [r for r in records if r.succeeded]
    failed = [r for r in records if not r.succeeded]
    wall_s = max(point.wall_ns, 1) / NS_PER_S
    invalid: list[str] = []
    warnings: list[str] = []
    reasons = Counter(_error_kind(r.error or "no output token") for r in failed)
    if failed:
        first_error = next(r.error for r in failed)
        invalid.append(
            f"{len(failed)} of {len(records)} requests failed "
            f"({', '.join(f'{k}: {n}' for k, n in reasons.items())}); "
            f"first: {first_error}"
        )
    per = [per_request(r) for r in ok]
    generation: dict[str, Any] = {
        "requests": len(records),
        "concurrency": settings.concurrency,
        # As the model saw them (a server's usage) where requests succeeded; as sent otherwise.
        "prompt_tokens": _token_counts([r.prompt_tokens for r in (ok or records)]),
        "output_tokens": _token_counts([r.output_tokens for r in ok]),
        "failed_requests": {
            "count": len(failed),
            "rate": len(failed) / len(records) if records else 0.0,
            "reasons": dict(reasons),
            **({"first": failed[0].error} if failed else {}),
        },
        "output_tokens_per_s": sum(r.output_tokens for r in ok) / wall_s,
        "total_tokens_per_s": sum(r.output_tokens + r.prompt_tokens for r in ok) / wall_s,
        "requests_per_s": len(ok) / wall_s,
        "goodput": None,
    }
    if settings.pooling:
        _pooling_figures(generation, settings, ok, wall_s)
    if len(records) <= _MAX_PER_REQUEST:
        generation["per_request"] = _per_request_lists(records)
    summaries: dict[str, Any] = {}
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        values = [p[metric] for p in per if p[metric] is not None]
        if values:
            summaries[metric] = summarize(np.asarray(values) * NS_PER_MS, measure)
            generation[metric] = summaries[metric].to_dict()
    workload = settings.workload()
    if workload is not None:
        generation["workload"] = workload
    if settings.turns > 1:
        generation["turns"] = _by_turn(ok, measure)
    gaps = [int(g) for r in ok for g in np.diff(np.asarray(r.token_ns, dtype=np.int64))]
    if gaps:
        generation["itl_ms"] = summarize(np.asarray(gaps, dtype=np.float64), measure).to_dict()
    if settings.slo:
        meets = [all((p[m] or 0.0) <= bound for m, bound in settings.slo.items()) for p in per]
        generation["slo"] = dict(settings.slo)
        generation["goodput"] = sum(meets) / wall_s
        generation["goodput_fraction"] = sum(meets) / len(records) if records else 0.0
        generation["certified"] = _certify(per, len(failed), settings.slo, load)
        for metric, certificate in generation["certified"].items():
            if not certificate["ok"]:
                # Under a preset the caps are the scenario's (MLPerf's Interactive): a run that does
                # not certify them is not valid, as MLPerf's is not; otherwise a caveat.
                (invalid if settings.preset else warnings).append(
                    f"{metric} p{certificate['percentile']:g} not certified ≤ {certificate['bound_ms']:g} ms "
                    f"({certificate['over_bound']} of {certificate['queries']} over; "
                    f"{certificate['queries_needed']} more requests needed)"
                )
    if len(ok) < MIN_REQUESTS:
        invalid.append(f"too few successful requests: {len(ok)} < {MIN_REQUESTS}")
    load_section: dict[str, Any] | None = None
    if point.qps is not None:
        late = [(r.start_ns - r.due_ns) / NS_PER_MS for r in records if r.due_ns is not None]
        load_section = {
            "target_qps": point.qps,
            "achieved_qps": len(records) / wall_s,
            "completed_qps": len(ok) / wall_s,
            "queries": len(records),
            "queue_wait_ms": {"median": float(np.median(late)), "max": float(max(late))} if late else None,
        }
        if point.issued is not None:
            load_section.update(_schedule_kept(point.issued, records, settings))
    e2e_ns = np.asarray([p["e2e_ms"] for p in per], dtype=np.float64) * NS_PER_MS
    tpot_ns = (
        np.asarray([p["tpot_ms"] for p in per if p["tpot_ms"] is not None], dtype=np.float64) * NS_PER_MS
    )
    if e2e_ns.size == 0:
        return _failed_point(generation, invalid, warnings, point, load_section)
    # Stability is judged on TPOT, the figure a request's length does not set (end-to-end latencies
    # spread with the drawn lengths by design); not under Poisson arrivals, whose queueing spreads all.
    judged = tpot_ns if tpot_ns.size else e2e_ns
    loop = LoopResult(judged.astype(np.int64), point.wall_ns, STOP_STABLE, settings.warmup_requests)
    summary_for_judge = summarize(judged, measure)
    count_settings = measure if len(records) >= measure.min_count else _with_min_count(measure, MIN_REQUESTS)
    environment = dict(point.environment)
    if remote:
        environment.pop("other_cpu_share", None)
    validity = judge(
        summary_for_judge,
        loop,
        environment,
        count_settings,
        judge_stability=point.qps is None,
        invalid=invalid,
        warnings=warnings,
    )
    measurement: dict[str, Any] = {
        "scenario": "generate",
        "batch_size": 1,
        "latency_ms": summaries["e2e_ms"].to_dict(),
        "throughput": generation["requests_per_s"],
        "validity": validity.to_dict(),
        "latencies_ns": [int(v) for v in e2e_ns.tolist()],
        "duration_s": point.wall_ns / NS_PER_S,
        "stop_reason": "requests",
        "warmup_count": settings.warmup_requests,
        "environment": dict(point.environment),
        "settings": measure.to_dict(),
        "generation": generation,
    }
    if load_section is not None:
        measurement["load"] = load_section
    return measurement


def _pooling_figures(
    generation: dict[str, Any], settings: GenerationSettings, ok: list[RequestRecord], wall_s: float
) -> None:
    """A pooling API's figures in `generation`: its api and inputs per request, input tokens and
    inputs per second instead of output tokens, and the figures of generation named not applicable
    (left out, never zero)."""
    for key in ("output_tokens", "output_tokens_per_s", "total_tokens_per_s"):
        generation.pop(key, None)
    generation["api"] = settings.api
    generation["inputs_per_request"] = settings.inputs_per_request
    generation["input_tokens_per_s"] = sum(r.prompt_tokens for r in ok) / wall_s
    generation["inputs_per_s"] = len(ok) * settings.inputs_per_request / wall_s
    # Whose count the input tokens are: the server's usage where every answer gave it.
    counted = bool(ok) and all(r.prompt_counted for r in ok)
    generation["input_tokens_counted_by"] = "server" if counted else "request"
    generation["not_applicable"] = list(NOT_APPLICABLE_TO_POOLING)


def _failed_point(
    generation: dict[str, Any],
    invalid: list[str],
    warnings: list[str],
    point: Point,
    load_section: dict[str, Any] | None,
) -> dict[str, Any]:
    """A point where no request succeeded: every figure absent (never zero-filled), invalid."""
    empty = {
        key: None
        for key in ("count", "mean", "median", "p90", "p95", "p99", "p999", "min", "max", "stdev", "iqr")
    }
    measurement: dict[str, Any] = {
        "scenario": "generate",
        "batch_size": 1,
        "latency_ms": {**empty, "count": 0, "cv": None, "trimmed_mean": None, "median_ci": None},
        "throughput": 0.0,
        "validity": {"valid": False, "reasons": invalid + warnings},
        "latencies_ns": [],
        "duration_s": point.wall_ns / NS_PER_S,
        "stop_reason": "requests",
        "warmup_count": 0,
        "environment": dict(point.environment),
        "generation": generation,
    }
    if load_section is not None:
        measurement["load"] = load_section
    return measurement


def _with_min_count(measure: MeasureSettings, count: int) -> MeasureSettings:
    return dataclasses.replace(measure, min_count=count)


def _token_counts(values: list[int]) -> dict[str, Any] | None:
    if not values:
        return None
    return {"total": int(sum(values)), "mean": float(np.mean(values)), "min": min(values), "max": max(values)}


def _certify(
    per: list[dict[str, float | None]], unfinished: int, slo: dict[str, float], load: LoadSettings
) -> dict[str, dict[str, Any]]:
    """Each bounded metric's percentile certified against its bound (failed requests count over)."""
    percentile = load.percentile_for("generate")
    certified = {}
    for metric, bound in slo.items():
        values = [p[metric] for p in per if p[metric] is not None]
        certificate = certify_bound(
            np.asarray(values, dtype=np.float64) * NS_PER_MS,
            bound,
            percentile,
            load.confidence,
            unfinished=unfinished + (len(per) - len(values)),
        )
        certified[metric] = certificate.to_dict()
    return certified


def _by_turn(ok: list[RequestRecord], measure: MeasureSettings) -> dict[str, Any]:
    """TTFT of conversations' first turns and of their later ones (whose prompts carry the history
    a server's prefix cache may hold), and the median per turn."""
    ttft: dict[int, list[float]] = {}
    for record in ok:
        if record.turn is not None:
            ttft.setdefault(record.turn, []).append(per_request(record)["ttft_ms"] or 0.0)
    first = ttft.get(1, [])
    later = [value for turn, values in ttft.items() if turn > 1 for value in values]
    return {
        "first_ttft_ms": summarize(np.asarray(first) * NS_PER_MS, measure).to_dict() if first else None,
        "later_ttft_ms": summarize(np.asarray(later) * NS_PER_MS, measure).to_dict() if later else None,
        "ttft_median_ms": {str(turn): float(np.median(ttft[turn])) for turn in sorted(ttft)},
    }


def _schedule_kept(
    issued: IssueRecord, records: list[RequestRecord], settings: GenerationSettings
) -> dict[str, Any]:
    """How the schedule was kept: intended vs achieved rate and span (from the first request due to
    the last, and from the first sent to the last), and each request's lateness as the generator
    handed it over (`issue_lateness_ms`: the generator's own; the wait for a free slot after it is
    in `queue_wait_ms`)."""
    count = issued.issued
    scheduled, sent = issued.scheduled[:count], issued.sent[:count]
    lateness = (sent - scheduled).astype(np.float64) / NS_PER_MS
    starts = [r.start_ns for r in records if r.due_ns is not None]

    intended_s = float(scheduled[-1] - scheduled[0]) / NS_PER_S if count else 0.0
    achieved_s = (max(starts) - min(starts)) / NS_PER_S if starts else 0.0
    kept: dict[str, Any] = {
        "scheduled_qps": (count - 1) / intended_s if intended_s > 0 else None,
        "sent_qps": (len(starts) - 1) / achieved_s if achieved_s > 0 else None,
        "intended_span_s": intended_s,
        "achieved_span_s": achieved_s,
        "issue_lateness_ms": {
            "mean": float(lateness.mean()),
            "p50": float(np.percentile(lateness, 50)),
            "p99": float(np.percentile(lateness, 99)),
            "max": float(lateness.max()),
        }
        if count
        else None,
        "late": int((lateness > LATE_MS).sum()),
    }
    if settings.trace is not None:
        kept["trace"] = {**trace_identity(settings.trace), "speed": settings.trace_speed}
    return kept
