"""The timed loop: an unrecorded warm-up, then timed iterations until the stopping rule ends them.

Owns the hot loop every scenario runs, the `Timer` protocol through which a device-timed
predictor (CUDA events) replaces the host clock, and the stopping rule (minimum count and
duration, then a stable median, or a maximum duration). `timed_loop` issues batches from the
calling thread; `threaded_loop` from several threads at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import cycle, islice
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.measure.stats import median_ci_relative_halfwidth

__all__ = [
    "STOP_MAX_SECONDS",
    "STOP_STABLE",
    "LoopResult",
    "Timer",
    "start_threads",
    "threaded_loop",
    "timed_loop",
]

STOP_STABLE = "stable"
STOP_MAX_SECONDS = "max_seconds"

NS_PER_S = 1_000_000_000
_INITIAL_CAPACITY = 1024
# A chunk of iterations runs between two reads of the stop condition; a quarter of the check
# interval keeps a check point at most ~25% late, and the cap bounds one jump in buffer size.
_CHUNKS_PER_CHECK = 4
_MAX_CHUNK = 1 << 20


@runtime_checkable
class Timer(Protocol):
    """Times one inference on a device whose work the host clock cannot see (e.g. CUDA events)."""

    def time(self, predict: Callable[[Any], Any], batch: Any) -> int:
        """Run `predict(batch)` once and time it on the device.

        Args:
            predict: the predictor's inference function.
            batch: its input.

        Returns:
            The inference's duration in nanoseconds, with the device synchronised.
        """
        ...


@dataclass(frozen=True)
class LoopResult:
    """What the timed loop saw.

    Attributes:
        latencies_ns: one latency per timed iteration, in nanoseconds, in the order they ran
            (across threads: ordered by chunk of iterations).
        wall_ns: wall-clock duration of the timed phase (warm-up excluded).
        stop_reason: STOP_STABLE or STOP_MAX_SECONDS.
        warmup_count: untimed warm-up iterations run before it (across all threads).
        starts_ns: when each timed iteration started (`time.perf_counter_ns()`), in the order of
            latencies_ns; recorded only when asked for (MODEL-level tracing), else None.
    """

    latencies_ns: npt.NDArray[np.int64]
    wall_ns: int
    stop_reason: str
    warmup_count: int
    starts_ns: npt.NDArray[np.int64] | None = None


def timed_loop(
    predict: Callable[[Any], Any],
    batches: Sequence[Any],
    settings: MeasureSettings,
    *,
    timer: Timer | None = None,
    on_progress: Callable[[float], None] | None = None,
    record_starts: bool = False,
) -> LoopResult:
    """Warm up, then time `predict` on the batches in rotation until the stopping rule holds.

    Args:
        predict: the inference function; its return value is ignored.
        batches: inputs, used in rotation (the timed phase starts again at the first).
        settings: warm-up, stopping rule and check interval.
        timer: times each call on a device instead of with the host's monotonic clock.
        on_progress: called at check points, and once at the end with 1.0, with the progress
            towards both minimums (the lesser of the count and duration fractions), in [0, 1].
        record_starts: also record when each iteration started (one more store per iteration).

    Returns:
        The recorded latencies, the timed phase's wall time and why it stopped.

    Raises:
        ValueError: `batches` is empty.
        Exception: whatever `predict` or `timer` raises, unchanged.
    """
    if len(batches) == 0:
        raise ValueError("timed_loop needs at least one batch")
    clock = time.perf_counter_ns
    warmup_count = _warm_up(predict, batches, settings, timer)
    recorder = _Recorder(predict, batches, timer, record_starts)
    rule = _StoppingRule(settings, on_progress)
    chunk = 1
    start = clock()
    while True:
        chunk_start = clock()
        recorder.run(chunk)
        now = clock()
        elapsed = now - start
        if rule.due(elapsed, recorder.count):
            stop_reason = rule.check(recorder.recorded(), elapsed)
            if stop_reason is not None:
                break
        chunk = _next_chunk(chunk, now - chunk_start, rule.max_ns - elapsed, rule.check_ns)
    wall_ns = now - start
    rule.finish()
    starts = recorder.recorded_starts()
    return LoopResult(
        recorder.recorded().copy(),
        wall_ns,
        stop_reason,
        warmup_count,
        None if starts is None else starts.copy(),
    )


def threaded_loop(
    predict: Callable[[Any], Any],
    batches: Sequence[Any],
    settings: MeasureSettings,
    threads: int,
    *,
    timer: Timer | None = None,
    on_progress: Callable[[float], None] | None = None,
    record_starts: bool = False,
) -> LoopResult:
    """`timed_loop` with `threads` threads issuing batches at once, for throughput.

    Each thread warms up on its own (warmup_count and warmup_seconds apply per thread), then all
    start the timed phase together. This thread evaluates the stopping rule on the latencies of
    all threads at each check point; on stop, each thread finishes its current chunk of
    iterations, and the wall time runs until the last one has.

    Args:
        predict: the inference function; it must be safe to call from several threads.
        batches: inputs, used in rotation by every thread.
        settings: as for `timed_loop`.
        threads: how many threads issue batches; 1 is `timed_loop`.
        timer: as for `timed_loop`; shared by every thread, so it must be safe to call from
            several at once (one holding a single pair of CUDA events is not).
        on_progress: as for `timed_loop`.
        record_starts: as for `timed_loop`.

    Returns:
        Every thread's latencies (ordered by when each chunk of iterations ended), the wall
        time from the common start to the last thread's end, why it stopped, and the warm-up
        iterations of all threads.

    Raises:
        ValueError: `batches` is empty or `threads` < 1.
        Exception: the first exception raised by `predict` or `timer` in any thread.
    """
    if threads < 1:
        raise ValueError(f"threaded_loop needs threads ≥ 1, got {threads}")
    if threads == 1:
        return timed_loop(
            predict, batches, settings, timer=timer, on_progress=on_progress, record_starts=record_starts
        )
    if len(batches) == 0:
        raise ValueError("threaded_loop needs at least one batch")
    clock = time.perf_counter_ns
    stop, failed = threading.Event(), threading.Event()
    barrier = threading.Barrier(threads + 1)
    workers = [
        _Worker(predict, batches, settings, timer, stop, failed, barrier, record_starts)
        for _ in range(threads)
    ]
    for worker in workers:
        worker.thread.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        _join_and_raise(workers, stop)
        raise
    start = clock()
    rule = _StoppingRule(settings, on_progress)
    stop_reason = STOP_MAX_SECONDS
    while not failed.wait(rule.wait_ns(clock() - start) / NS_PER_S):
        elapsed = clock() - start
        if not rule.due(elapsed):
            continue
        reason = rule.check(np.concatenate([worker.published() for worker in workers]), elapsed)
        if reason is not None:
            stop_reason = reason
            break
    _join_and_raise(workers, stop)
    rule.finish()
    chunks = sorted(
        ((end, worker.recorder, first, last) for worker in workers for end, first, last in worker.chunks),
        key=lambda chunk: chunk[0],
    )
    ordered = np.concatenate([recorder.array[first:last] for _, recorder, first, last in chunks])
    starts = None
    if record_starts:
        starts = np.concatenate([recorder.starts[first:last] for _, recorder, first, last in chunks])
    return LoopResult(
        latencies_ns=ordered,
        wall_ns=max(worker.finished_ns for worker in workers) - start,
        stop_reason=stop_reason,
        warmup_count=sum(worker.warmup_count for worker in workers),
        starts_ns=starts,
    )


class _Recorder:
    """The latency buffer and the hot loop that fills it, one chunk of iterations at a time."""

    def __init__(
        self,
        predict: Callable[[Any], Any],
        batches: Sequence[Any],
        timer: Timer | None,
        record_starts: bool = False,
    ) -> None:
        self.predict = predict
        self.batches: Iterator[Any] = cycle(batches)
        self.timer = timer
        self.record_starts = record_starts
        self.array: npt.NDArray[np.int64] = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)
        self.starts: npt.NDArray[np.int64] = np.zeros(
            _INITIAL_CAPACITY if record_starts else 0, dtype=np.int64
        )
        # Writing a Python int through a memoryview skips numpy's scalar conversion: ~25 ns less
        # per iteration than `array[i] = v`.
        self.view = self.array.data
        self.starts_view = self.starts.data
        self.count = 0

    def run(self, iterations: int) -> None:
        end = self.count + iterations
        if end > self.array.size:
            capacity = self.array.size
            while capacity < end:
                capacity *= 2
            grown = np.zeros(capacity, dtype=np.int64)
            grown[: self.count] = self.array[: self.count]
            self.array, self.view = grown, grown.data
            if self.record_starts:
                grown_starts = np.zeros(capacity, dtype=np.int64)
                grown_starts[: self.count] = self.starts[: self.count]
                self.starts, self.starts_view = grown_starts, grown_starts.data
        if self.record_starts:
            time_one = None if self.timer is None else self.timer.time
            _run_recording_starts(
                time_one, self.predict, self.batches, self.view, self.starts_view, self.count, iterations
            )
        elif self.timer is None:
            _run_host_clock(self.predict, self.batches, self.view, self.count, iterations)
        else:
            _run_device_timer(self.timer.time, self.predict, self.batches, self.view, self.count, iterations)
        self.count = end

    def recorded(self) -> npt.NDArray[np.int64]:
        return self.array[: self.count]

    def recorded_starts(self) -> npt.NDArray[np.int64] | None:
        return self.starts[: self.count] if self.record_starts else None


def _run_host_clock(
    predict: Callable[[Any], Any], batches: Iterator[Any], out: memoryview, first: int, iterations: int
) -> None:
    # The hot loop: only the clock, predict and one store per iteration, every name a local.
    clock = time.perf_counter_ns
    for index, batch in enumerate(islice(batches, iterations), first):
        started = clock()
        predict(batch)
        out[index] = clock() - started


def _run_recording_starts(
    time_one: Callable[[Callable[[Any], Any], Any], int] | None,
    predict: Callable[[Any], Any],
    batches: Iterator[Any],
    out: memoryview,
    starts: memoryview,
    first: int,
    iterations: int,
) -> None:
    # The MODEL-level loop: one more store per iteration, so each inference can become a span.
    clock = time.perf_counter_ns
    if time_one is None:
        for index, batch in enumerate(islice(batches, iterations), first):
            started = clock()
            predict(batch)
            out[index] = clock() - started
            starts[index] = started
    else:
        for index, batch in enumerate(islice(batches, iterations), first):
            starts[index] = clock()
            out[index] = int(time_one(predict, batch))


def _run_device_timer(
    time_one: Callable[[Callable[[Any], Any], Any], int],
    predict: Callable[[Any], Any],
    batches: Iterator[Any],
    out: memoryview,
    first: int,
    iterations: int,
) -> None:
    for index, batch in enumerate(islice(batches, iterations), first):
        out[index] = int(time_one(predict, batch))


def _warm_up(
    predict: Callable[[Any], Any], batches: Sequence[Any], settings: MeasureSettings, timer: Timer | None
) -> int:
    """Run untimed iterations until warmup_count is met and either warmup_seconds has passed or the
    latency has settled (`_Settled`), or until max_seconds.

    Through the timer when there is one, so device queues and timing events are warm too.
    """
    clock = time.perf_counter_ns
    min_ns = int(settings.warmup_seconds * NS_PER_S)
    max_ns = int(settings.max_seconds * NS_PER_S)
    settled = _Settled(settings) if settings.warmup_settle > 0 and min_ns > 0 else None
    done = 0
    start = clock()
    for batch in cycle(batches):
        now = clock()
        elapsed = now - start
        if elapsed >= max_ns or (
            done >= settings.warmup_count and (elapsed >= min_ns or (settled is not None and settled.now()))
        ):
            break
        if timer is None:
            predict(batch)
            if settled is not None:
                settled.add(clock() - now)
        else:
            latency = timer.time(predict, batch)
            if settled is not None:
                settled.add(int(latency))
        done += 1
    return done


class _Settled:
    """Whether a warm-up's latency has settled: the medians of its last three windows of
    max(warmup_count, 5) iterations lie within warmup_settle of each other (the largest at most
    1 + warmup_settle times the smallest). Three windows, not two, so one window that happens to
    match its neighbour while the latency still drifts does not end the warm-up."""

    _WINDOWS = 3
    _MIN_WINDOW = 5

    def __init__(self, settings: MeasureSettings) -> None:
        self.window = max(settings.warmup_count, self._MIN_WINDOW)
        self.limit = 1.0 + settings.warmup_settle
        self.latencies: list[int] = []
        self.medians: list[float] = []

    def add(self, latency_ns: int) -> None:
        self.latencies.append(latency_ns)
        if len(self.latencies) == self.window:
            self.medians = [*self.medians[1 - self._WINDOWS :], float(np.median(self.latencies))]
            self.latencies.clear()

    def now(self) -> bool:
        medians = self.medians
        return len(medians) == self._WINDOWS and max(medians) <= self.limit * max(min(medians), 1.0)


class _StoppingRule:
    """When the timed phase ends, for both loops: at check points (every check_every_seconds, and
    at max_seconds) it reports progress and stops once both minimums are met and the median is
    stable, or at max_seconds whatever else holds. Never consulted inside a timed region."""

    def __init__(self, settings: MeasureSettings, on_progress: Callable[[float], None] | None) -> None:
        self.settings, self.on_progress = settings, on_progress
        self.check_ns = int(settings.check_every_seconds * NS_PER_S)
        self.max_ns = int(settings.max_seconds * NS_PER_S)
        self.next_check = self.check_ns
        self.checked_at_minimums = False
        self.checked_count = 0

    def due(self, elapsed_ns: int, count: int = 0) -> bool:
        """Whether `elapsed_ns` into the timed phase, `count` iterations done, is a check point: every
        check interval, the first time both minimums are met, and after that each time the count has
        doubled since the last check (a short measurement that is stable at once, or soon after,
        does not wait for the interval to end; the doubling keeps the checks to a handful)."""
        if elapsed_ns >= self.max_ns or elapsed_ns >= self.next_check:
            return True
        minimums = count >= self.settings.min_count and elapsed_ns >= self.settings.min_seconds * NS_PER_S
        if not minimums:
            return False
        return not self.checked_at_minimums or count >= 2 * self.checked_count

    def wait_ns(self, elapsed_ns: int) -> int:
        """How long until the next check point."""
        return max(0, min(self.next_check, self.max_ns) - elapsed_ns)

    def check(self, latencies: npt.NDArray[np.int64], elapsed_ns: int) -> str | None:
        """At a check point: report progress; why the loop stops (STOP_STABLE, STOP_MAX_SECONDS),
        or None to go on."""
        settings = self.settings
        self.next_check = elapsed_ns + self.check_ns
        self.checked_count = latencies.size
        met = latencies.size >= settings.min_count and elapsed_ns >= settings.min_seconds * NS_PER_S
        self.checked_at_minimums = self.checked_at_minimums or met
        if self.on_progress is not None:
            self.on_progress(_progress(latencies.size, elapsed_ns, settings))
        if (
            latencies.size >= settings.min_count
            and elapsed_ns >= settings.min_seconds * NS_PER_S
            and median_ci_relative_halfwidth(latencies, settings.confidence) <= settings.stability
        ):
            return STOP_STABLE
        return STOP_MAX_SECONDS if elapsed_ns >= self.max_ns else None

    def finish(self) -> None:
        if self.on_progress is not None:
            self.on_progress(1.0)


def _progress(count: int, elapsed_ns: int, settings: MeasureSettings) -> float:
    by_count = count / settings.min_count
    by_time = elapsed_ns / (settings.min_seconds * NS_PER_S) if settings.min_seconds > 0 else 1.0
    return max(0.0, min(1.0, by_count, by_time))


def _next_chunk(chunk: int, chunk_ns: int, remaining_ns: int, check_ns: int) -> int:
    """Iterations for the next chunk: about a quarter of a check interval's worth.

    Never past the time left before max_seconds, and at most double the last chunk, so one
    fast outlier cannot commit the loop to a long run of slow iterations.
    """
    per_iteration = max(chunk_ns, 1) / chunk
    target_ns = min(check_ns / _CHUNKS_PER_CHECK, max(remaining_ns, 0))
    return max(1, min(int(target_ns / per_iteration), 2 * chunk, _MAX_CHUNK))


class _Worker:
    """One thread of `threaded_loop`: warm-up, then chunks of timed iterations until told to stop."""

    def __init__(
        self,
        predict: Callable[[Any], Any],
        batches: Sequence[Any],
        settings: MeasureSettings,
        timer: Timer | None,
        stop: threading.Event,
        failed: threading.Event,
        barrier: threading.Barrier,
        record_starts: bool = False,
    ) -> None:
        self.predict, self.batches, self.settings, self.timer = predict, batches, settings, timer
        self.stop, self.failed, self.barrier = stop, failed, barrier
        self.recorder = _Recorder(predict, batches, timer, record_starts)
        self.chunks: list[tuple[int, int, int]] = []
        self.warmup_count = 0
        self.finished_ns = 0
        self.error: BaseException | None = None
        # Read by the coordinating thread; one attribute so array and count are never mismatched.
        self._published: npt.NDArray[np.int64] = self.recorder.recorded()
        self.thread = threading.Thread(target=self._run, name="mlscope-offline", daemon=True)

    def published(self) -> npt.NDArray[np.int64]:
        return self._published

    def _run(self) -> None:
        clock = time.perf_counter_ns
        try:
            self.warmup_count = _warm_up(self.predict, self.batches, self.settings, self.timer)
            self.barrier.wait()
            check_ns = int(self.settings.check_every_seconds * NS_PER_S)
            max_ns = int(self.settings.max_seconds * NS_PER_S)
            chunk = 1
            start = clock()
            # At least one chunk, as in timed_loop, so even a zero max_seconds records something.
            while True:
                first = self.recorder.count
                chunk_start = clock()
                self.recorder.run(chunk)
                now = clock()
                self.chunks.append((now, first, self.recorder.count))
                self._published = self.recorder.recorded()
                if self.stop.is_set():
                    break
                chunk = _next_chunk(chunk, now - chunk_start, max_ns - (now - start), check_ns)
            self.finished_ns = clock()
        except BaseException as exc:
            self.error = exc
            self.finished_ns = clock()
            self.failed.set()
            # Releases the other threads and the coordinator if this one failed during warm-up.
            self.barrier.abort()


def _join_and_raise(workers: list[_Worker], stop: threading.Event) -> None:
    stop.set()
    for worker in workers:
        worker.thread.join()
    errors = [worker.error for worker in workers if worker.error is not None]
    # A thread that failed aborts the start barrier, which raises BrokenBarrierError in the others:
    # the failure itself is the error worth reporting.
    if errors:
        raise min(errors, key=lambda error: isinstance(error, threading.BrokenBarrierError))


def start_threads(target: Callable[[], None], name: str, count: int) -> list[threading.Thread]:
    """`count` daemon threads running `target`, named `name-0`, `name-1`, ..., started."""
    threads = [threading.Thread(target=target, name=f"{name}-{index}", daemon=True) for index in range(count)]
    for thread in threads:
        thread.start()
    return threads
