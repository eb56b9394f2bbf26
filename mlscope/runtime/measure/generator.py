"""The open-loop load generator: queries issued on a schedule, whatever the model is doing.

Owns `issue` (the generator itself) and the `IssueRecord` it returns; when each query is due is a
`Schedule` (schedule.py).

The schedule is issued by a process of its own (`issuer_process`), not by a thread beside the model:
a thread in the model's process waits for the GIL whenever the model's Python code holds it, and for
a core whenever the model's threads fill them (docs/load.md, "The generator: a process of its
own"). The issuing process sleeps to each due time on the monotonic clock (the one perf_counter_ns
reads in every process), asks for a real-time priority where the system grants one, and hands each
sample's index to a pool of `max_in_flight` model threads through a pipe, a little before it is due;
it never runs the model. A model thread that takes a sample early holds it to its due time, so an
idle model starts it on time rather than after two wake-ups of idle CPUs. A query that finds every
model thread busy waits in the pipe, and that wait counts: its latency runs from its scheduled
arrival to its completion (no coordinated omission). Per sample the record keeps when it was due,
handed over, started and finished, so the run can check that the load was the load it promised.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import mmap
import os
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mlscope.runtime.measure import issuer_process as proto
from mlscope.runtime.measure.loop import NS_PER_S, Timer, start_threads
from mlscope.runtime.measure.schedule import Schedule

__all__ = ["MAX_SAMPLES", "IssueRecord", "Schedule", "issue"]

# At most this many samples are recorded in one run (five int64 arrays each: 80 MB); a schedule
# longer than that ends the run early, with stop reason "capacity".
MAX_SAMPLES = 2_000_000
# The first query is due this long after the issuing process is ready, so the model threads wait.
_LEAD_NS = proto.LEAD_NS
# A model thread holding a sample to its due time sleeps until this long before it, then yields in
# a loop: a sleep on an idle virtual CPU wakes up to this late.
_GATE_SPIN_NS = 200_000
# The issuing process's script: run by path, so it imports nothing of mlscope's.
_ISSUER = str(Path(proto.__file__).resolve())
# MLSCOPE_GENERATOR_PRIORITY=normal keeps the issuing process at the ordinary priority (to measure
# what the priority buys, or where a real-time thread is unwelcome).
_PRIORITY_ENV = "MLSCOPE_GENERATOR_PRIORITY"
_PRIORITY_NAMES = {
    proto.PRIORITY_NORMAL: "normal",
    proto.PRIORITY_NICE: "nice -10",
    proto.PRIORITY_REALTIME: "realtime",
}
_STOP_NAMES = {proto.STOP_MAX_SECONDS: "max_seconds", proto.STOP_CAPACITY: "capacity"}
# Queued samples the pipe to the model threads holds before the issuing process would block (1 MiB,
# the most an unprivileged process may ask for; a run this far behind is overloaded anyway).
_PIPE_BYTES = 1 << 20
_SAMPLE = struct.Struct("<q")

Decide = Callable[["IssueRecord", int], "str | None"]


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
        issuer_cpu_ns: CPU time the issuing process spent from its start to its end.
        issuer_priority: the scheduling priority the issuing process obtained ("realtime",
            "nice -10" or "normal").
        idle_start: for each sample a model thread held to its due time (the model was idle),
            how long after it was due the thread started it; −1 for the others.
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
    issuer_cpu_ns: int = 0
    issuer_priority: str = "normal"
    idle_start: npt.NDArray[np.int64] | None = None

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
            self.issuer_cpu_ns,
            self.issuer_priority,
            None if self.idle_start is None else self.idle_start[:count].copy(),
        )

    def fill_in_flight(self) -> None:
        """Set `in_flight`: for each sample, the samples sent before it and not yet completed when
        it was sent (from the recorded times; a sample never completed counts as in flight)."""
        count = self.issued
        ended = self.ended[:count]
        completions = np.sort(ended[ended > 0])
        seen_done = np.searchsorted(completions, self.sent[:count], side="right")
        self.in_flight[:count] = np.maximum(np.arange(count) - seen_done, 0)


class _ModelThreads:
    """The model's side: `count` threads reading sample indices from the issuing pipe and running
    them. An index of −1 ends a thread."""

    def __init__(
        self,
        count: int,
        predict: Callable[[Any], Any],
        batches: Sequence[Any],
        record: IssueRecord,
        timer: Timer | None,
        read_fd: int,
        start_ns: Callable[[], int],
    ) -> None:
        self.predict, self.batches, self.record, self.timer = predict, batches, record, timer
        self.read_fd, self.start_ns = read_fd, start_ns
        # When a thread that held a sample to its due time let it go (0: it found it already due).
        self.gated = np.zeros(record.scheduled.size, dtype=np.int64)
        # list.append is atomic under the GIL, so len(done) is a lock-free completion counter.
        self.done: list[None] = []
        self.cancel = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = start_threads(self._serve, "mlscope-model", count)

    def _serve(self) -> None:
        proto.precise_timers()
        clock, read, unpack, sleep = time.perf_counter_ns, os.read, _SAMPLE.unpack, time.sleep
        # sched_yield releases the GIL for a microsecond; time.sleep(0) costs tens of them here.
        yield_gil = getattr(os, "sched_yield", lambda: time.sleep(0))
        predict, batches, timer, fd = self.predict, self.batches, self.timer, self.read_fd
        pool = len(batches)
        due_at = self.record.scheduled.data
        started, ended, gated = self.record.started.data, self.record.ended.data, self.gated.data
        done, cancel = self.done, self.cancel
        start: int | None = None
        while True:
            # The issuing process writes whole 8-byte records, which a pipe never splits.
            (index,) = unpack(read(fd, 8))
            if index < 0:
                return
            if cancel.is_set() or self.errors:
                continue
            if start is None:
                start = self.start_ns()
            batch = batches[index % pool]
            due = start + due_at[index]
            begin = clock()
            if begin < due:
                # Handed over early: hold it to its due time, sleeping the bulk and yielding the
                # GIL in the last stretch (a sleep wakes late by up to the stretch on an idle CPU).
                if due - begin > _GATE_SPIN_NS:
                    sleep((due - begin - _GATE_SPIN_NS) / NS_PER_S)
                while clock() < due:
                    yield_gil()
                begin = clock()
                gated[index] = begin - start
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

    def stop(self, write_fd: int) -> None:
        for _ in self.threads:
            os.write(write_fd, _SAMPLE.pack(-1))
        for thread in self.threads:
            thread.join()


class _Issuer:
    """The issuing process and what it shares with this one: a mapped file holding the header, the
    due times and the send times, the pipe to the model threads, and its control channel."""

    def __init__(
        self, offsets: npt.NDArray[np.int64], per_query: int, max_ns: int, start_ns: int | None = None
    ) -> None:
        count = int(offsets.size)
        self._file = tempfile.TemporaryFile(prefix="mlscope-issue-")  # noqa: SIM115 (closed in close())
        size = (proto.HEADER_SLOTS + 2 * count) * 8
        self._file.truncate(size)
        self._map = mmap.mmap(self._file.fileno(), size)
        words: npt.NDArray[np.int64] = np.frombuffer(self._map, dtype=np.int64)
        self.header = words[: proto.HEADER_SLOTS]
        self.header[:] = 0
        self.header[proto.COUNT], self.header[proto.PER_QUERY], self.header[proto.MAX_NS] = (
            count,
            per_query,
            max_ns,
        )
        if start_ns is not None:
            self.header[proto.START_AT] = start_ns
        words[proto.HEADER_SLOTS : proto.HEADER_SLOTS + count] = offsets
        self.sent = words[proto.HEADER_SLOTS + count :]
        self.read_fd, self.write_fd = os.pipe()
        if hasattr(fcntl, "F_SETPIPE_SZ"):
            # Refused: the default 64 KiB still holds 8,192 queued samples.
            with contextlib.suppress(OSError):
                fcntl.fcntl(self.write_fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        shared_fd = self._file.fileno()
        command = [sys.executable, "-I", _ISSUER, str(shared_fd), str(self.write_fd)]
        if os.environ.get(_PRIORITY_ENV) == "normal":
            command.append("normal")
        self.process: subprocess.Popen[bytes] | None = None
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(shared_fd, self.write_fd),
        )

    def wait_ready(self) -> int:
        """Block until the issuing process has started its clock; returns its start (perf_counter_ns).

        Raises:
            RuntimeError: it exited first (its error output is in the message).
        """
        assert self.process is not None and self.process.stdout is not None
        if self.process.stdout.read(1) != b"r":
            self.process.wait()
            error = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
            raise RuntimeError(f"the load generator's issuing process failed to start: {error.strip()}")
        return self.start_ns()

    def start_ns(self) -> int:
        return int(self.header[proto.START])

    @property
    def issued(self) -> int:
        return int(self.header[proto.ISSUED])

    def wait_ended(self, timeout_s: float) -> bool:
        """Wait at most `timeout_s` for the issuing process to end by itself; True when it has."""
        assert self.process is not None and self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], max(timeout_s, 0.0))
        return bool(ready)

    def ask_stop(self) -> None:
        assert self.process is not None and self.process.stdin is not None
        try:
            self.process.stdin.write(b"s")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # it had already ended

    def wait_exit(self) -> None:
        assert self.process is not None
        self.process.wait()

    def finish(self, record: IssueRecord, gated: npt.NDArray[np.int64]) -> None:
        """Copy what the issuing process recorded (it has ended) into `record`.

        A sample's send time is when the generator made it the model's: the later of its hand-over
        and its due time. From then on it is in the model's process, whose threads start it at its
        due time or as soon as one is free (that wait, and a held sample's wake-up, are in its
        latency, not in the generator's lateness). `gated` gives, for each sample a thread held to
        its due time, when it let it go: its start delay on an idle model.
        """
        header = self.header
        record.issued = int(header[proto.ISSUED])
        record.issue_end_ns = int(header[proto.END])
        record.issuer_cpu_ns = int(header[proto.CPU_NS])
        record.issuer_priority = _PRIORITY_NAMES.get(int(header[proto.PRIORITY]), "normal")
        stop = int(header[proto.STOP])
        if stop in _STOP_NAMES:
            record.stop_reason = _STOP_NAMES[stop]
        handed = self.sent[: record.sent.size]
        record.sent = np.maximum(handed, record.scheduled)
        record.idle_start = np.where(gated > 0, gated - record.scheduled, -1)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process is not None:
            for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()
        os.close(self.read_fd)
        os.close(self.write_fd)
        del self.header, self.sent
        self._map.close()
        self._file.close()


def issue(
    predict: Callable[[Any], Any],
    batches: Sequence[Any],
    schedule: Schedule,
    *,
    max_in_flight: int,
    max_seconds: float,
    check_every_seconds: float,
    decide: Decide,
    drain_seconds: float | None,
    timer: Timer | None = None,
    queries: int | None = None,
    start_at_ns: int | None = None,
) -> IssueRecord:
    """Issue queries on `schedule` to `max_in_flight` model threads until `decide` stops it.

    Args:
        predict: the inference function; called from the model threads only.
        batches: inputs, sample i uses batches[i % len(batches)].
        schedule: when each query is due.
        max_in_flight: model threads: samples run at once.
        max_seconds: issuing ends here whatever `decide` says.
        check_every_seconds: how often `decide` is consulted.
        decide: called with the record so far and the elapsed ns; returns a stop reason or None.
        drain_seconds: after issuing ends, how long to wait for the samples still queued; those
            not begun by then are cancelled and stay unfinished (ended == 0). None waits for all.
        timer: a device timer; the model threads call `timer.time` and take the host clock after.
        queries: issue exactly this many queries (then stop, reason "capacity"); by default as many
            as `max_seconds` may hold.
        start_at_ns: when the schedule's time 0 falls (perf_counter_ns), for parts of one schedule
            issued by several generators at one instant; by default a moment after the issuing
            process is ready. A time already past is kept: the queries already due go at once,
            each as late as it is.

    Returns:
        The record, trimmed to the samples issued.

    Raises:
        RuntimeError: the issuing process could not start.
        Exception: the first exception `predict` or `timer` raised, after the threads are stopped.
    """
    per_query = schedule.samples_per_query
    if queries is None:
        capacity = min(
            MAX_SAMPLES, per_query * (math.ceil(schedule.rate * max(max_seconds, 0.0) * 1.25) + 64)
        )
        capacity -= capacity % per_query
        queries = capacity // per_query
    capacity = queries * per_query
    offsets = np.repeat(schedule.offsets_ns(queries) + _LEAD_NS, per_query)
    # A year stands for "no limit" (max_seconds may be infinite when `queries` bounds the run).
    max_ns = int(min(max_seconds, 365 * 86400.0) * NS_PER_S) + _LEAD_NS
    empty = np.zeros(capacity, dtype=np.int64)
    record = IssueRecord(0, per_query, offsets, empty, empty.copy(), empty.copy(), empty.copy())
    issuer = _Issuer(offsets, per_query, max_ns, None if start_at_ns is None else start_at_ns - _LEAD_NS)
    try:
        model = _ModelThreads(
            # The issuing process sets its start before it hands anything over.
            max_in_flight,
            predict,
            batches,
            record,
            timer,
            issuer.read_fd,
            issuer.start_ns,
        )
        try:
            record.start_ns = issuer.wait_ready()
            _control(record, model, issuer, max_ns, check_every_seconds, decide)
            issuer.wait_exit()
            record.issued = issuer.issued
            _drain(record, model, drain_seconds)
        finally:
            model.cancel.set()
            model.stop(issuer.write_fd)
        issuer.finish(record, model.gated)
    finally:
        issuer.close()
    if model.errors:
        raise model.errors[0]
    record.fill_in_flight()
    return record.trimmed()


def _control(
    record: IssueRecord,
    model: _ModelThreads,
    issuer: _Issuer,
    max_ns: int,
    check_every_seconds: float,
    decide: Decide,
) -> None:
    """Consult `decide` every `check_every_seconds` while the issuing process runs; tell it to stop
    when `decide`, an error or the wall clock says so."""
    clock, start = time.perf_counter_ns, record.start_ns
    check_ns = int(check_every_seconds * NS_PER_S)
    next_check = _LEAD_NS + check_ns
    while not issuer.wait_ended((next_check - (clock() - start)) / NS_PER_S):
        elapsed = clock() - start
        if elapsed < next_check:
            continue
        next_check = elapsed + check_ns
        record.issued = issuer.issued
        # A generator behind its schedule still stops on the wall clock.
        reason = (
            "error"
            if model.errors
            else "max_seconds"
            if elapsed > max_ns
            else decide(record, elapsed - _LEAD_NS)
        )
        if reason is not None:
            record.stop_reason = reason
            issuer.ask_stop()
            return


def _drain(record: IssueRecord, model: _ModelThreads, drain_seconds: float | None) -> None:
    """Wait for the samples still queued, at most `drain_seconds` (None: all of them); then cancel
    what is left."""
    deadline = None if drain_seconds is None else time.perf_counter_ns() + int(drain_seconds * NS_PER_S)
    while len(model.done) < record.issued and not model.errors:
        if deadline is not None and time.perf_counter_ns() >= deadline:
            break
        time.sleep(0.001)
    model.cancel.set()
