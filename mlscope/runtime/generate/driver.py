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

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlscope.contract.errors import UserError
from mlscope.contract.generation import GenerationSettings, draw_lengths
from mlscope.contract.load import LoadSettings
from mlscope.contract.trace import check_fits
from mlscope.runtime.generate.parts import run_part
from mlscope.runtime.generate.records import GenerateEngine, GenerationRequest, RequestRecord
from mlscope.runtime.generate.reduce import MIN_REQUESTS, NS_PER_MS, Point, per_request, reduce_records
from mlscope.runtime.generate.sweep import run_sweep
from mlscope.runtime.measure.certify import min_queries
from mlscope.runtime.measure.generator import IssueRecord, Schedule, issue
from mlscope.runtime.measure.loop import NS_PER_S
from mlscope.runtime.measure.search import find_max_qps
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.measure.stats import median_ci_relative_halfwidth
from mlscope.runtime.measure.validity import EnvironmentMonitor

__all__ = ["Point", "build_requests", "issue_requests", "reduce_records", "run_generate"]

# When this many requests have been sent and every one failed, the rest are not sent (they are left
# out of the point, which says how many failed of how many sent).
_GIVE_UP_AFTER = 8


# Seed offsets of the prompt pieces that are not a request's own text, so none coincides with one:
# an earlier turn's answer, a shared prefix, a trace's shared block.
_ANSWER_SEED = 1 << 20
_PREFIX_SEED = 2 << 20
_BLOCK_SEED = 3 << 20


def build_requests(
    settings: GenerationSettings, count: int, seed: int, max_context: int | None, *, first: int = 0
) -> list[GenerationRequest]:
    """`count` requests with the settings' lengths drawn from `seed`, indices from `first`: a
    shared prefix before each prompt, the turns of conversations (`settings.turns` consecutive
    indices each), or with a trace its lines (count and first then ignored).

    Raises:
        UserError: a request's prompt and output do not fit the model's context (field
            generation.prompt_tokens, or the trace's line), naming the first that does not.
    """
    if settings.trace is not None:
        return _trace_requests(settings.trace, seed, max_context)
    if settings.pooling:
        return _pooling_requests(settings, count, seed, max_context, first)
    prompts, outputs = settings.lengths(count + first, seed)
    requests = [_request(settings, i, prompts, outputs, seed) for i in range(first, first + count)]
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


def _request(
    settings: GenerationSettings, index: int, prompts: list[int], outputs: list[int], seed: int
) -> GenerationRequest:
    """Request `index`: its shared prefix (its conversation's), the turns before it in its
    conversation (each turn's user text and an answer of the length that turn asked for), then its
    own user text."""
    parts: list[tuple[str, int, int, int]] = []
    if settings.shared_prefix_tokens:
        group = index // settings.turns % settings.prefix_groups  # one prefix per conversation
        parts.append(("user", settings.shared_prefix_tokens, seed + _PREFIX_SEED, group))
    turn = None
    if settings.turns > 1:
        turn = index % settings.turns + 1
        for earlier in range(index - turn + 1, index):
            parts.append(("user", prompts[earlier], seed, earlier))
            parts.append(("assistant", outputs[earlier], seed + _ANSWER_SEED, earlier))
    parts.append(("user", prompts[index], seed, index))
    total = sum(part[1] for part in parts)
    return GenerationRequest(index, total, outputs[index], seed, tuple(parts) if len(parts) > 1 else (), turn)


def _trace_requests(trace: dict[str, Any], seed: int, max_context: int | None) -> list[GenerationRequest]:
    """One request per trace line: its prompt made of the line's shared blocks (one text per block
    id, whichever request it is in) and then text of its own, to the line's input length."""
    block = trace["block_tokens"]
    hash_ids = trace.get("hash_ids") or [[] for _ in trace["input_tokens"]]
    if max_context is not None:
        check_fits(trace, max_context)
    requests = []
    for index, (size, output, ids) in enumerate(
        zip(trace["input_tokens"], trace["output_tokens"], hash_ids, strict=True)
    ):
        parts = [
            ("user", min(block, size - position * block), seed + _BLOCK_SEED, block_id)
            for position, block_id in enumerate(ids)
        ]
        own = size - sum(part[1] for part in parts)
        if own > 0:
            parts.append(("user", own, seed, index))
        requests.append(GenerationRequest(index, size, output, seed, tuple(parts) if len(parts) > 1 else ()))
    return requests


def trace_schedule(trace: dict[str, Any], speed: float) -> Schedule:
    """The trace's arrivals as the generator's schedule, its gaps divided by `speed`.

    Raises:
        UserError: fewer than 2 distinct arrival times (no schedule to replay).
    """
    arrivals = [round(ms * NS_PER_MS / speed) for ms in trace["arrivals_ms"]]
    if len(arrivals) < 2 or arrivals[-1] == arrivals[0]:
        raise UserError(
            f"trace {trace['name']}: its requests all arrive at one time; a replay needs at least 2 "
            "arrival times",
            field="generation.trace",
        )
    return Schedule.replay(arrivals)


def _pooling_requests(
    settings: GenerationSettings, count: int, seed: int, max_context: int | None, first: int
) -> list[GenerationRequest]:
    """Requests of a pooling API: each `inputs_per_request` texts (rerank: a query first, then that
    many documents), every text of a length drawn from prompt_tokens in turn; no output.

    Raises:
        UserError: a text longer than the model's context (field generation.prompt_tokens).
    """
    texts = settings.inputs_per_request + (1 if settings.api == "rerank" else 0)
    lengths = draw_lengths(settings.prompt_tokens, (count + first) * texts, seed)
    requests = []
    for index in range(first, first + count):
        inputs = tuple(lengths[index * texts : (index + 1) * texts])
        if max_context is not None and max(inputs) > max_context:
            raise UserError(
                f"request {index}: an input of {max(inputs)} tokens exceeds the model's context of "
                f"{max_context} tokens: shorten generation.prompt_tokens",
                field="generation.prompt_tokens",
            )
        requests.append(GenerationRequest(index, sum(inputs), 0, seed, input_tokens=inputs))
    return requests


def issue_requests(
    engine: GenerateEngine,
    requests: list[GenerationRequest],
    concurrency: int,
    *,
    qps: float | None = None,
    seed: int = 0,
    on_done: Callable[[int], None] | None = None,
    schedule: Schedule | None = None,
    think_time_ms: float = 0.0,
    start_at_ns: int | None = None,
) -> Point:
    """Send `requests` closed-loop (qps and schedule None), as Poisson arrivals at `qps`, or on a
    `schedule` (a trace's, or a part's of a split one, whose time 0 is `start_at_ns`); their records
    in request order. Requests with a turn are conversations: a client sends each one's turns in
    order, `think_time_ms` after the last turn's end."""
    records: list[RequestRecord | None] = [None] * len(requests)
    done = [0]
    failed = [0]
    lock = threading.Lock()

    def run(position: int, due_ns: int | None) -> None:
        if failed[0] >= _GIVE_UP_AFTER and failed[0] == done[0]:
            return  # every request so far failed: the rest would too (a dead or refusing endpoint)
        record = engine.generate(requests[position])
        record.due_ns = due_ns
        record.turn = requests[position].turn
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
    issued: IssueRecord | None = None
    if qps is None and schedule is None:
        # A unit is one request, or one conversation's turns (consecutive, the first of turn 1).
        firsts = [i for i, r in enumerate(requests) if r.turn is None or r.turn == 1 or i == 0]
        units = [range(a, b) for a, b in zip(firsts, [*firsts[1:], len(requests)], strict=True)]
        cursor = iter(units)

        def client() -> None:
            while True:
                with lock:
                    unit = next(cursor, None)
                if unit is None:
                    return
                for position in unit:
                    if position != unit[0] and think_time_ms:
                        time.sleep(think_time_ms / 1000.0)
                    run(position, None)

        threads = [threading.Thread(target=client, daemon=True) for _ in range(min(concurrency, len(units)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        # The server scenario's generator: a process of its own sends each request's position when
        # it is due to `concurrency` slots (docs/load.md).
        issued = issue(
            lambda position: run(position, None),
            range(len(requests)),
            schedule if schedule is not None else Schedule("poisson", qps or 1.0, seed=seed),
            max_in_flight=concurrency,
            max_seconds=float("inf"),
            check_every_seconds=1.0,
            decide=lambda record, elapsed: None,
            drain_seconds=None,
            queries=len(requests),
            start_at_ns=start_at_ns,
        )
        for sent, due in zip(records, issued.scheduled.tolist(), strict=True):
            if sent is not None:
                sent.due_ns = issued.start_ns + int(due)
        started = issued.start_ns
        if schedule is not None:
            qps = schedule.rate
    wall_ns = time.perf_counter_ns() - started
    finished = [record for record in records if record is not None]
    return Point(finished, wall_ns, qps, monitor.stop(), issued)


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
    per = [per_request(r) for r in point.records if r.succeeded]
    tpots = [p["tpot_ms"] for p in per]
    values = [v for v in tpots if v is not None] or [p["e2e_ms"] or 0.0 for p in per]
    if len(values) < MIN_REQUESTS:
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
        # Whole conversations: a round starts at a first turn (sent counts whole ones).
        count = -(-count // settings.turns) * settings.turns
        more = build_requests(settings, count, load.seed, engine.max_context, first=sent)
        extra = issue_requests(engine, more, settings.concurrency, think_time_ms=settings.think_time_ms)
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
            "e2e_p50_ms": (generation.get("e2e_ms") or {}).get("median"),
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
    on_measure: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Warm up, then measure one point (closed loop, or at load.qps), or search the highest rate
    whose SLO certificates pass (load.find_max_qps). A closed loop sends `settings.requests` and then
    more, until the median TPOT is stable (`measure.stability`) or `measure.max_seconds` have passed,
    as the other scenarios' timed loops do; `remote` as for `reduce_records`; `on_measure` is called
    once the warm-up requests are done, as the measured ones begin (a server metrics sampler starts).

    With load.sweep, one such point per value, kept as one measurement (generate.sweep).

    Raises:
        UserError: a request does not fit the model's context; find_max_qps without an slo.
    """
    if load.sweep is not None:
        started = [False]

        def measure_point(here: GenerationSettings, at: LoadSettings) -> dict[str, Any]:
            first, started[0] = not started[0], True
            return run_generate(
                engine,
                here,
                at,
                measure,
                on_progress=on_progress,
                remote=remote,
                on_measure=on_measure if first else None,
            )

        return run_sweep(settings, load, measure_point)
    _check_open_loop(settings, load)
    count = requests_needed(settings, load)
    count = -(-count // settings.turns) * settings.turns  # whole conversations
    requests = build_requests(settings, count, load.seed, engine.max_context)
    if settings.warmup_requests:
        # A trace's warm-up requests are drawn ones (its lines are all measured).
        drawn = dataclasses.replace(settings, trace=None, trace_speed=1.0) if settings.trace else settings
        warmup = build_requests(drawn, settings.warmup_requests, load.seed + 7919, engine.max_context)
        issue_requests(engine, warmup, settings.concurrency, think_time_ms=settings.think_time_ms)
    if on_measure is not None:
        on_measure()

    def progress(done: int) -> None:
        if on_progress is not None:
            on_progress(done / len(requests))

    if settings.trace is not None:
        schedule = trace_schedule(settings.trace, settings.trace_speed)
        point = issue_requests(
            engine, requests, settings.concurrency, schedule=schedule, seed=load.seed, on_done=progress
        )
        return reduce_records(point, settings, load, measure, remote=remote)
    if load.part is not None:
        part = load.part
        return run_part(
            engine, requests, settings, load, measure, part, issue_requests, remote=remote, on_done=progress
        )
    if not load.find_max_qps:
        point = issue_requests(
            engine,
            requests,
            settings.concurrency,
            qps=load.qps,
            seed=load.seed,
            on_done=progress,
            think_time_ms=settings.think_time_ms,
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


def _check_open_loop(settings: GenerationSettings, load: LoadSettings) -> None:
    """A trace brings its own arrivals, and conversations run closed-loop: neither takes a rate.

    Raises:
        UserError: a trace or turns with load.qps or find_max_qps.
    """
    if load.qps is None and not load.find_max_qps:
        return
    flag = "load.qps" if load.qps is not None else "load.find_max_qps"
    if settings.trace is not None:
        raise UserError(
            f"a trace replays its own arrival times: drop {flag} (--trace-speed scales them)", field=flag
        )
    if settings.turns > 1:
        raise UserError(
            f"conversations (turns > 1) run closed-loop, `concurrency` at once: drop {flag}", field=flag
        )


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
