"""The open-loop load generator: queries issued on a schedule, whatever the model is doing.

Owns `Schedule` (when each query is due: Poisson arrivals for the server scenario, a fixed
interval for multi_stream), `issue` (the generator itself) and the `IssueRecord` it returns.

The calling thread is the generator: it waits for each query's scheduled time and hands the query
to a pool of `max_in_flight` model threads through a queue; it never runs the model. A query that
finds every model thread busy waits in the queue, and that wait counts: its latency runs from its
scheduled arrival to its completion (no coordinated omission). What the generator itself did is
recorded beside it — when each query was actually sent, and how many were outstanding then — so
the run can check that the load was the load it promised.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mlscope.runtime.measure.loop import NS_PER_S, Timer

__all__ = ["MAX_SAMPLES", "IssueRecord", "Schedule", "issue"]

# At most this many samples are recorded in one run (five int64 arrays each: 80 MB); a schedule
# longer than that ends the run early, with stop reason "capacity".
MAX_SAMPLES = 2_000_000
# The generator sleeps until this long before a query is due, then yields the GIL in a tight loop
# until it is: time.sleep overshoots by ~60 µs on Linux.
_SPIN_NS = 200_000
# The first query is due this long after the generator starts, so the model threads are waiting.
_LEAD_NS = 2_000_000

Decide = Callable[["IssueRecord", int], "str | None"]


@dataclass(frozen=True)
class Schedule:
    """When queries are due: `offsets_ns(count)` gives the first `count` due times, in ns from the
    start, nondecreasing; each query is `samples_per_query` samples due at the same time.

    Attributes:
        kind: "poisson" (exponential gaps, mean 1/rate, seeded) or "fixed" (one every 1/rate).
        rate: queries per second.
        samples_per_query: samples issued together as one query.
        seed: the Poisson schedule's seed.
    """

    kind: str
    rate: float
    samples_per_query: int = 1
    seed: int = 0

    def offsets_ns(self, count: int) -> npt.NDArray[np.int64]:
        """The due times of the first `count` queries, in ns after the start."""
        mean_gap_ns = NS_PER_S / self.rate
        if self.kind == "poisson":
            gaps = np.random.default_rng(self.seed).exponential(mean_gap_ns, size=count)
            # The first query is due at once, so a run's arrival rate is count / last due time.
            gaps[0] = 0.0
            return np.cumsum(gaps).astype(np.int64)
        return (np.arange(count, dtype=np.float64) * mean_gap_ns).astype(np.int64)


@dataclass
class IssueRecord:
    """What the generator and the model threads recorded, one entry per sample, times in ns
    relative to the generator's start (perf_counter_ns() − start_ns).

    Attributes:
        start_ns: the perf_counter_ns() value the relative times count from.
        samples_per_query: samples per query (sample i belongs to query i // samples_per_query).
        scheduled: when each sample was due.
        sent: when the generator handed it to the model threads.
        started: when a model thread began it (0 for a sample never begun).
        ended: when it completed (0 for a sample that never completed: unfinished).
        in_flight: samples sent and not yet completed when this one was sent.
        issued: how many samples were sent.
        stop_reason: why issuing ended: "certified", "failed", "max_seconds", "stable", "capacity".
        issue_end_ns: when issuing ended.
    """

    start_ns: int
    samples_per_query: int
    scheduled: npt.NDArray[np.int64]
    sent: npt.NDArray[np.int64]
    started: npt.NDArray[np.int64]
    ended: npt.NDArray[np.int64]
    in_flight: npt.NDArray[np.int64]
    issued: int = 0
    stop_reason: str = "max_seconds"
    issue_end_ns: int = 0

    def trimmed(self) -> IssueRecord:
        """The record cut to the samples issued, whole queries only."""
        count = self.issued - self.issued % self.samples_per_query
        return IssueRecord(
            self.start_ns,
            self.samples_per_query,
            self.scheduled[:count].copy(),
            self.sent[:count].copy(),
            self.started[:count].copy(),
            self.ended[:count].copy(),
            self.in_flight[:count].copy(),
            count,
            self.stop_reason,
            self.issue_end_ns,
        )


class _ModelThreads:
    """The model's side: `count` threads taking sample indices from a queue and running them."""

    def __init__(
        self,
        count: int,
        predict: Callable[[Any], Any],
        batches: Sequence[Any],
        record: IssueRecord,
        timer: Timer | None,
    ) -> None:
        self.queue: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self.predict, self.batches, self.record, self.timer = predict, batches, record, timer
        # list.append is atomic under the GIL, so len(done) is a lock-free completion counter.
        self.done: list[None] = []
        self.cancel = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._serve, name=f"mlscope-model-{index}", daemon=True)
            for index in range(count)
        ]
        for thread in self.threads:
            thread.start()

    def _serve(self) -> None:
        clock, get = time.perf_counter_ns, self.queue.get
        predict, batches, timer = self.predict, self.batches, self.timer
        pool = len(batches)
        start = self.record.start_ns
        started, ended = self.record.started.data, self.record.ended.data
        done, cancel = self.done, self.cancel
        while True:
            index = get()
            if index is None:
                return
            if cancel.is_set() or self.errors:
                continue
            batch = batches[index % pool]
            begin = clock()
            try:
                if timer is None:
                    predict(batch)
                else:
                    # The device timer synchronises; the host clock after it is the completion.
                    timer.time(predict, batch)
            except BaseException as exc:
                self.errors.append(exc)
                continue
            end = clock()
            started[index] = begin - start
            ended[index] = max(end - start, 1)
            done.append(None)

    def stop(self) -> None:
        for _ in self.threads:
            self.queue.put(None)
        for thread in self.threads:
            thread.join()


def issue(
    predict: Callable[[Any], Any],
    batches: Sequence[Any],
    schedule: Schedule,
    *,
    max_in_flight: int,
    max_seconds: float,
    check_every_seconds: float,
    decide: Decide,
    drain_seconds: float,
    timer: Timer | None = None,
) -> IssueRecord:
    """Issue queries on `schedule` to `max_in_flight` model threads until `decide` stops it.

    Args:
        predict: the inference function; called from the model threads only.
        batches: inputs, sample i uses batches[i % len(batches)].
        schedule: when each query is due.
        max_in_flight: model threads: samples run at once.
        max_seconds: issuing ends here whatever `decide` says.
        check_every_seconds: how often `decide` is consulted (from the generator, between sends).
        decide: called with the record so far and the elapsed ns; returns a stop reason or None.
        drain_seconds: after issuing ends, how long to wait for the samples still queued; those
            not begun by then are cancelled and stay unfinished (ended == 0).
        timer: a device timer; the model threads call `timer.time` and take the host clock after.

    Returns:
        The record, trimmed to the samples issued.

    Raises:
        Exception: the first exception `predict` or `timer` raised, after the threads are stopped.
    """
    per_query = schedule.samples_per_query
    capacity = min(MAX_SAMPLES, per_query * (math.ceil(schedule.rate * max(max_seconds, 0.0) * 1.25) + 64))
    capacity -= capacity % per_query
    queries = capacity // per_query
    offsets = np.repeat(schedule.offsets_ns(queries) + _LEAD_NS, per_query)
    record = IssueRecord(
        start_ns=0,
        samples_per_query=per_query,
        scheduled=offsets,
        sent=np.zeros(capacity, dtype=np.int64),
        started=np.zeros(capacity, dtype=np.int64),
        ended=np.zeros(capacity, dtype=np.int64),
        in_flight=np.zeros(capacity, dtype=np.int64),
    )
    record.start_ns = time.perf_counter_ns()
    model = _ModelThreads(max_in_flight, predict, batches, record, timer)
    try:
        _send(record, model, offsets, max_seconds, check_every_seconds, decide)
        _drain(record, model, drain_seconds)
    finally:
        model.cancel.set()
        model.stop()
    if model.errors:
        raise model.errors[0]
    return record.trimmed()


def _send(
    record: IssueRecord,
    model: _ModelThreads,
    offsets: npt.NDArray[np.int64],
    max_seconds: float,
    check_every_seconds: float,
    decide: Decide,
) -> None:
    clock, sleep, put = time.perf_counter_ns, time.sleep, model.queue.put
    done, errors = model.done, model.errors
    start = record.start_ns
    sent, in_flight = record.sent.data, record.in_flight.data
    check_ns = int(check_every_seconds * NS_PER_S)
    max_ns = int(max_seconds * NS_PER_S) + _LEAD_NS
    next_check = check_ns + _LEAD_NS
    due_times = offsets.tolist()
    index = 0
    for index, due in enumerate(due_times):
        if due > max_ns:
            record.stop_reason = "max_seconds"
            break
        target = start + due
        wait = target - clock()
        if wait > _SPIN_NS:
            sleep((wait - _SPIN_NS) / NS_PER_S)
        while clock() < target:
            sleep(0)
        now = clock()
        sent[index] = now - start
        in_flight[index] = index - len(done)
        put(index)
        if now - start >= next_check:
            record.issued = index + 1
            next_check = now - start + check_ns
            # A generator behind its schedule still stops on the wall clock.
            wall_over = now - start > max_ns
            reason = (
                "error" if errors else "max_seconds" if wall_over else decide(record, now - start - _LEAD_NS)
            )
            if reason is not None:
                record.stop_reason = reason
                index += 1
                break
    else:
        record.stop_reason = "capacity"
        index = len(due_times)
    record.issued = index
    record.issue_end_ns = clock() - start


def _drain(record: IssueRecord, model: _ModelThreads, drain_seconds: float) -> None:
    """Wait for the samples still queued, at most `drain_seconds`; then cancel what is left."""
    deadline = time.perf_counter_ns() + int(drain_seconds * NS_PER_S)
    while len(model.done) < record.issued and not model.errors:
        if time.perf_counter_ns() >= deadline:
            break
        time.sleep(0.001)
    model.cancel.set()
