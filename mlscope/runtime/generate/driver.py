"""The generate scenario's driver: issue requests to an engine, then reduce their records to a point.

Requests go out in one of two ways. A closed loop: `concurrency` clients, each sending its next request
when its last one ends (concurrency 1 is back to back). Or Poisson arrivals at `load.qps` (seeded, the
server scenario's schedule): a dispatcher sends each request when it is due to one of `concurrency`
slots; a request that finds every slot busy waits, and its TTFT and end-to-end latency run from when
it was due, so queueing counts (as a served user sees it).

Per request: TTFT (first output token − origin), every inter-token latency, TPOT (the mean time per
output token after the first: (last − first) / (n − 1), vLLM's and AIPerf's definition) and the
end-to-end latency. Per point: their summaries with the median's interval, tokens/s, requests/s,
goodput (requests/s meeting every SLO bound), the failed requests by reason, and with an SLO the
early-stopping certificate of each bounded metric's percentile (MLPerf LoadGen's, as its LLM
benchmarks hold TTFT and TPOT). `--find-max-qps` searches the highest rate whose certificates pass,
with the server scenario's bracket-and-bisect search.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlscope.contract.errors import UserError
from mlscope.contract.generation import GenerationSettings
from mlscope.contract.load import LoadSettings
from mlscope.runtime.generate.records import GenerateEngine, GenerationRequest, RequestRecord
from mlscope.runtime.measure.certify import certify_bound, min_queries
from mlscope.runtime.measure.generator import Schedule
from mlscope.runtime.measure.loop import NS_PER_S, STOP_STABLE, LoopResult
from mlscope.runtime.measure.search import find_max_qps
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.measure.stats import median_ci_relative_halfwidth, summarize
from mlscope.runtime.measure.validity import EnvironmentMonitor, judge

__all__ = ["Point", "build_requests", "issue_requests", "reduce_records", "run_generate"]

NS_PER_MS = 1_000_000
# When this many requests have been sent and every one failed, the rest are not sent (they are left
# out of the point, which says how many failed of how many sent).
_GIVE_UP_AFTER = 8
# Fewest successful requests a point's intervals are reported from.
_MIN_REQUESTS = 10
# Up to this many requests, the measurement keeps each one's figures (`generation.per_request`), as
# it keeps each latency: plots and checks read them; beyond, the summaries only.
_MAX_PER_REQUEST = 2_000


@dataclass
class Point:
    """One run of the requests at one rate: the records and how long it took."""

    records: list[RequestRecord]
    wall_ns: int
    qps: float | None
    environment: dict[str, Any]


def build_requests(
    settings: GenerationSettings, count: int, seed: int, max_context: int | None, *, first: int = 0
) -> list[GenerationRequest]:
    """`count` requests with the settings' lengths drawn from `seed`, indices from `first`.

    Raises:
        UserError: a request's prompt and output do not fit the model's context (field
            generation.prompt_tokens), naming the first that does not.
    """
    prompts, outputs = settings.lengths(count + first, seed)
    requests = [
        GenerationRequest(index=i, prompt_tokens=prompts[i], output_tokens=outputs[i], seed=seed)
        for i in range(first, first + count)
    ]
    if max_context is not None:
        for request in requests:
            if request.prompt_tokens + request.output_tokens > max_context:
                raise UserError(
                    f"request {request.index}: {request.prompt_tokens} prompt + {request.output_tokens} "
                    f"output tokens exceed the model's context of {max_context} tokens: shorten "
                    "generation.prompt_tokens or generation.output_tokens",
                    field="generation.prompt_tokens",
                )
    return requests


def issue_requests(
    engine: GenerateEngine,
    requests: list[GenerationRequest],
    concurrency: int,
    *,
    qps: float | None = None,
    seed: int = 0,
    on_done: Callable[[int], None] | None = None,
) -> Point:
    """Send `requests` closed-loop (qps None) or as Poisson arrivals at `qps`; their records in
    request order."""
    records: list[RequestRecord | None] = [None] * len(requests)
    done = [0]
    failed = [0]
    lock = threading.Lock()

    def run(position: int, due_ns: int | None) -> None:
        if failed[0] >= _GIVE_UP_AFTER and failed[0] == done[0]:
            return  # every request so far failed: the rest would too (a dead or refusing endpoint)
        record = engine.generate(requests[position])
        record.due_ns = due_ns
        records[position] = record
        with lock:
            done[0] += 1
            failed[0] += not record.ok
            count = done[0]
        if on_done is not None:
            on_done(count)

    monitor = EnvironmentMonitor()
    monitor.start()
    started = time.perf_counter_ns()
    if qps is None:
        cursor = iter(range(len(requests)))

        def client() -> None:
            while True:
                with lock:
                    position = next(cursor, None)
                if position is None:
                    return
                run(position, None)

        threads = [
            threading.Thread(target=client, daemon=True) for _ in range(min(concurrency, len(requests)))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        offsets = Schedule("poisson", qps, seed=seed).offsets_ns(len(requests))
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="mlscope-generate") as pool:
            futures = []
            for position, offset in enumerate(offsets.tolist()):
                due = started + int(offset)
                delay = (due - time.perf_counter_ns()) / NS_PER_S
                if delay > 0:
                    time.sleep(delay)
                futures.append(pool.submit(run, position, due))
            for future in futures:
                future.result()
    wall_ns = time.perf_counter_ns() - started
    finished = [record for record in records if record is not None]
    return Point(finished, wall_ns, qps, monitor.stop())


def _per_request(record: RequestRecord) -> dict[str, float | None]:
    """TTFT, TPOT and end-to-end latency of one successful request, in ms (TPOT None for a single
    output token)."""
    origin = record.origin_ns
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
        figures = _per_request(record) if record.ok and record.token_ns else {}
        columns["prompt_tokens"].append(record.prompt_tokens)
        columns["output_tokens"].append(record.output_tokens)
        for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
            value = figures.get(metric)
            columns[metric].append(None if value is None else round(value, 6))
        columns["error"].append(record.error)
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
    and `generation` holds the rest (DESIGN.md's names).

    Args:
        remote: the model ran in another process (an endpoint): this machine's other processes
            (the server among them, when it is local) are not judged as contention.
    """
    records = point.records
    ok = [r for r in records if r.ok and r.token_ns]
    failed = [r for r in records if not (r.ok and r.token_ns)]
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
    per = [_per_request(r) for r in ok]
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
    if len(records) <= _MAX_PER_REQUEST:
        generation["per_request"] = _per_request_lists(records)
    summaries: dict[str, Any] = {}
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        values = [p[metric] for p in per if p[metric] is not None]
        if values:
            summaries[metric] = summarize(np.asarray(values) * NS_PER_MS, measure)
            generation[metric] = summaries[metric].to_dict()
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
                warnings.append(
                    f"{metric} p{certificate['percentile']:g} not certified ≤ {certificate['bound_ms']:g} ms "
                    f"({certificate['over_bound']} of {certificate['queries']} over; "
                    f"{certificate['queries_needed']} more requests needed)"
                )
    if len(ok) < _MIN_REQUESTS:
        invalid.append(f"too few successful requests: {len(ok)} < {_MIN_REQUESTS}")
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
    count_settings = measure if len(records) >= measure.min_count else _with_min_count(measure, _MIN_REQUESTS)
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
    import dataclasses

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


def requests_needed(settings: GenerationSettings, load: LoadSettings) -> int:
    """Requests per point: the settings', raised with an SLO to what certifying the percentile
    needs when no request misses its bounds (LoadGen's early stopping: 64 for p90, 662 for p99)."""
    if not settings.slo:
        return settings.requests
    return max(settings.requests, min_queries(load.percentile_for("generate") / 100.0, load.confidence))


# A closed loop adds requests in rounds of this fraction of those sent so far (at least 8).
_MORE = 0.5
# ... up to this many requests in all.
_MAX_REQUESTS = 100_000


def _stable(point: Point, measure: MeasureSettings) -> bool:
    """Whether the median TPOT of the point's successful requests is known to `measure.stability`
    (or, with single-token outputs, the end-to-end median); a point with failures is as stable as
    it gets (more requests would not make it valid)."""
    if any(not r.ok for r in point.records):
        return True
    per = [_per_request(r) for r in point.records if r.token_ns]
    tpots = [p["tpot_ms"] for p in per]
    values = [v for v in tpots if v is not None] or [p["e2e_ms"] or 0.0 for p in per]
    if len(values) < _MIN_REQUESTS:
        return False
    halfwidth = median_ci_relative_halfwidth(np.asarray(values, dtype=np.float64), measure.confidence)
    return bool(halfwidth <= measure.stability)


def _until_stable(
    engine: GenerateEngine,
    point: Point,
    settings: GenerationSettings,
    load: LoadSettings,
    measure: MeasureSettings,
) -> Point:
    """More closed-loop rounds until the point is stable or measure.max_seconds have passed."""
    while not _stable(point, measure) and point.wall_ns / NS_PER_S < measure.max_seconds:
        sent = len(point.records)
        if sent >= _MAX_REQUESTS:
            break
        count = min(max(8, int(sent * _MORE)), _MAX_REQUESTS - sent)
        more = build_requests(settings, count, load.seed, engine.max_context, first=sent)
        extra = issue_requests(engine, more, settings.concurrency)
        point = Point(point.records + extra.records, point.wall_ns + extra.wall_ns, None, point.environment)
    return point


@dataclass
class _Probe:
    """One rate the search tried."""

    qps: float
    passed: bool
    reason: str
    measurement: dict[str, Any]

    def curve_point(self) -> dict[str, Any]:
        generation = self.measurement.get("generation") or {}
        load = self.measurement.get("load") or {}
        return {
            "target_qps": self.qps,
            "achieved_qps": load.get("achieved_qps"),
            "completed_qps": load.get("completed_qps"),
            "goodput": generation.get("goodput"),
            "ttft_p50_ms": (generation.get("ttft_ms") or {}).get("median"),
            "tpot_p50_ms": (generation.get("tpot_ms") or {}).get("median"),
            "failed": (generation.get("failed_requests") or {}).get("count"),
            "passed": self.passed,
            "reason": self.reason,
        }


def run_generate(
    engine: GenerateEngine,
    settings: GenerationSettings,
    load: LoadSettings,
    measure: MeasureSettings,
    *,
    on_progress: Callable[[float], None] | None = None,
    on_probe: Callable[[dict[str, Any]], None] | None = None,
    remote: bool = False,
) -> dict[str, Any]:
    """Warm up, then measure one point (closed loop, or at load.qps), or search the highest rate
    whose SLO certificates pass (load.find_max_qps). A closed loop sends `settings.requests` and then
    more, until the median TPOT is stable (`measure.stability`) or `measure.max_seconds` have passed,
    as the other scenarios' timed loops do; `remote` as for `reduce_records`.

    Raises:
        UserError: a request does not fit the model's context; find_max_qps without an slo.
    """
    count = requests_needed(settings, load)
    requests = build_requests(settings, count, load.seed, engine.max_context)
    if settings.warmup_requests:
        warmup = build_requests(settings, settings.warmup_requests, load.seed + 7919, engine.max_context)
        issue_requests(engine, warmup, settings.concurrency)

    def progress(done: int) -> None:
        if on_progress is not None:
            on_progress(done / len(requests))

    if not load.find_max_qps:
        point = issue_requests(
            engine, requests, settings.concurrency, qps=load.qps, seed=load.seed, on_done=progress
        )
        if load.qps is None:
            point = _until_stable(engine, point, settings, load, measure)
        return reduce_records(point, settings, load, measure, remote=remote)
    if not settings.slo:
        raise UserError(
            "find_max_qps with the generate scenario searches against an slo: give generation.slo "
            "(e.g. --slo ttft_ms=200,tpot_ms=50)",
            field="generation.slo",
        )
    return _search(engine, requests, settings, load, measure, on_probe, remote)


def _search(
    engine: GenerateEngine,
    requests: list[GenerationRequest],
    settings: GenerationSettings,
    load: LoadSettings,
    measure: MeasureSettings,
    on_probe: Callable[[dict[str, Any]], None] | None,
    remote: bool,
) -> dict[str, Any]:
    """The highest Poisson rate at which no request fails and every SLO certificate passes."""
    started = time.perf_counter_ns()
    closed = issue_requests(
        engine, requests[: min(len(requests), 2 * settings.concurrency)], settings.concurrency
    )
    mean_s = max(closed.wall_ns / NS_PER_S / max(len(closed.records), 1), 1e-4)
    start_qps = load.qps if load.qps is not None else 0.5 * settings.concurrency / mean_s

    def probe(qps: float) -> _Probe:
        point = issue_requests(engine, requests, settings.concurrency, qps=qps, seed=load.seed)
        measurement = reduce_records(point, settings, load, measure, remote=remote)
        generation = measurement["generation"]
        failing = [m for m, c in (generation.get("certified") or {}).items() if not c["ok"]]
        failed = generation["failed_requests"]["count"]
        reason = (
            f"{failed} requests failed"
            if failed
            else (f"{', '.join(failing)} not certified" if failing else "")
        )
        result = _Probe(qps, not reason, reason or "certified", measurement)
        if on_probe is not None:
            on_probe(result.curve_point())
        return result

    # A probe sends every request at its rate: the slowest rate searched is the one whose probe
    # takes max_seconds (64 requests, 60 s: about 1 request/s); below it, no rate met the slo.
    floor = len(requests) / measure.max_seconds
    best, probes = find_max_qps(
        probe, max(start_qps, floor), resolution=load.resolution, cap_qps=1000.0, min_qps=floor
    )
    chosen = best if best is not None else probes[-1]
    measurement = chosen.measurement
    measurement.setdefault("load", {})["search"] = {
        "max_qps": best.qps if best is not None else None,
        "probes": [p.curve_point() for p in probes],
        "duration_s": (time.perf_counter_ns() - started) / NS_PER_S,
    }
    if best is None:
        lowest = min(p.qps for p in probes)
        measurement["validity"] = {
            "valid": False,
            "reasons": [
                f"no rate met the slo: every probe failed, down to {lowest:.3g} requests/s (slower probes "
                f"would take longer than max_seconds {measure.max_seconds:g})",
                *measurement["validity"]["reasons"],
            ],
        }
    return measurement
