"""The closed-loop issuer: multi_stream as MLPerf LoadGen >= 1.0 runs it, each query issued when the
previous one has completed (no interval, so no overruns and no lateness).

Owns `issue_back_to_back`, which returns the same `IssueRecord` the open-loop generator does (see
generator), so `load_report.report` reads both alike: a query's samples are scheduled and sent at
the moment it was issued, and its latency is its slowest sample's completion minus that moment.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mlscope.runtime.measure.generator import MAX_SAMPLES, IssueRecord
from mlscope.runtime.measure.loop import NS_PER_S, Timer, start_threads

__all__ = ["issue_back_to_back"]

# The record starts with room for this many queries and doubles when full (up to MAX_SAMPLES).
_FIRST_QUERIES = 1024
# While a query runs the issuer wakes at least this often to check the wall clock.
_WAIT_SECONDS = 0.1


class _Samples:
    """`count` model threads taking sample indices from a queue; each completion (or a failure, or a
    sample skipped once cancelled) releases `completed` once."""

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
        self.completed = threading.Semaphore(0)
        self.cancel = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = start_threads(self._serve, "mlscope-stream", count)

    def _serve(self) -> None:
        clock, get, release = time.perf_counter_ns, self.queue.get, self.completed.release
        predict, batches, timer, record = self.predict, self.batches, self.timer, self.record
        pool = len(batches)
        while True:
            index = get()
            if index is None:
                return
            if self.cancel.is_set() or self.errors:
                release()
                continue
            batch = batches[index % pool]
            begin = clock()
            try:
                if timer is None:
                    predict(batch)
                else:
                    timer.time(predict, batch)  # synchronises: the host clock after it is the completion
            except BaseException as exc:
                self.errors.append(exc)
                release()
                continue
            end = clock()
            # The record's arrays are replaced only between queries, when no sample is running.
            record.started[index] = begin - record.start_ns
            record.ended[index] = max(end - record.start_ns, 1)
            release()

    def stop(self) -> None:
        self.cancel.set()
        for _ in self.threads:
            self.queue.put(None)
        for thread in self.threads:
            thread.join()


def _grow(record: IssueRecord, samples: int) -> None:
    """Give every per-sample array of `record` room for `samples` samples, zero-filled."""
    for name in ("scheduled", "sent", "started", "ended", "in_flight"):
        old = getattr(record, name)
        new = np.zeros(samples, dtype=np.int64)
        new[: old.size] = old
        setattr(record, name, new)


def issue_back_to_back(
    predict: Callable[[Any], Any],
    batches: Sequence[Any],
    samples_per_query: int,
    *,
    max_in_flight: int,
    max_seconds: float,
    check_every_seconds: float,
    decide: Callable[[IssueRecord, int], str | None],
    timer: Timer | None = None,
) -> IssueRecord:
    """Issue queries of `samples_per_query` samples, each when the previous one completed, to
    `max_in_flight` model threads until `decide` stops it.

    Args:
        predict: the inference function; called from the model threads only.
        batches: inputs, sample i uses batches[i % len(batches)].
        samples_per_query: samples issued together as one query.
        max_in_flight: model threads: samples run at once.
        max_seconds: issuing ends here whatever `decide` says; a query still running then is
            cancelled (its samples not yet begun stay unfinished, ended == 0).
        check_every_seconds: how often `decide` is consulted (between queries).
        decide: called with the record so far (every query in it complete) and the elapsed ns;
            returns a stop reason or None.
        timer: a device timer; the model threads call `timer.time` and take the host clock after.

    Returns:
        The record, trimmed to the samples issued; scheduled == sent, the moment each query was
        issued.

    Raises:
        Exception: the first exception `predict` or `timer` raised, after the threads are stopped.
    """
    per_query = samples_per_query
    room = min(MAX_SAMPLES - MAX_SAMPLES % per_query, per_query * _FIRST_QUERIES)
    record = IssueRecord(
        start_ns=0,
        samples_per_query=per_query,
        scheduled=np.zeros(0, dtype=np.int64),
        sent=np.zeros(0, dtype=np.int64),
        started=np.zeros(0, dtype=np.int64),
        ended=np.zeros(0, dtype=np.int64),
        in_flight=np.zeros(0, dtype=np.int64),
    )
    _grow(record, room)
    clock = time.perf_counter_ns
    check_ns = int(check_every_seconds * NS_PER_S)
    max_ns = int(max_seconds * NS_PER_S)
    within_query = np.arange(per_query, dtype=np.int64)
    record.start_ns = clock()
    model = _Samples(max_in_flight, predict, batches, record, timer)
    start, put, acquire = record.start_ns, model.queue.put, model.completed.acquire
    try:
        next_check = check_ns
        first = 0
        while True:
            if first + per_query > record.scheduled.size:
                if record.scheduled.size + per_query > MAX_SAMPLES:
                    record.stop_reason = "capacity"
                    break
                _grow(record, min(2 * record.scheduled.size, MAX_SAMPLES - MAX_SAMPLES % per_query))
            now = clock() - start
            record.scheduled[first : first + per_query] = now
            record.sent[first : first + per_query] = now
            # As the open-loop generator counts it: samples sent and not completed, this query's own.
            record.in_flight[first : first + per_query] = within_query
            for index in range(first, first + per_query):
                put(index)
            completed = 0
            while completed < per_query:
                left_ns = max_ns - (clock() - start)
                if left_ns <= 0:
                    break
                if acquire(timeout=min(left_ns / NS_PER_S, _WAIT_SECONDS)):
                    completed += 1
            first += per_query
            record.issued = first
            now = clock() - start
            if model.errors:
                record.stop_reason = "error"
                break
            if completed < per_query or now >= max_ns:
                record.stop_reason = "max_seconds"
                break
            if now >= next_check:
                next_check = now + check_ns
                reason = decide(record, now)
                if reason is not None:
                    record.stop_reason = reason
                    break
        record.issue_end_ns = clock() - start
    finally:
        model.stop()
    if model.errors:
        raise model.errors[0]
    return record.trimmed()
