"""The timed loop: warm-up kept out of the record, batch rotation, and the stopping rule.

Latencies come from a scripted fake Timer, so the stop rules are exercised on known data; the
only real-time bounds used are ones the loop guarantees (it never stops before min_seconds and
never before max_seconds when unstable), never upper bounds on elapsed time.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest

from mlscope.runtime.measure import (
    STOP_MAX_SECONDS,
    STOP_STABLE,
    MeasureSettings,
    Timer,
    threaded_loop,
    timed_loop,
)


class ScriptedTimer:
    """A device timer whose readings are scripted: calls predict, returns the next value."""

    def __init__(self, values: Iterable[int]) -> None:
        self._values = iter(values)
        self._lock = threading.Lock()
        self.calls = 0

    def time(self, predict: Callable[[Any], Any], batch: Any) -> int:
        predict(batch)
        with self._lock:
            self.calls += 1
            return next(self._values)


def fast(**overrides: Any) -> MeasureSettings:
    """Settings for tests: no warm-up, no minimum duration, frequent checks, a generous cap."""
    base: dict[str, Any] = {
        "warmup_count": 0,
        "warmup_seconds": 0.0,
        "min_count": 30,
        "min_seconds": 0.0,
        "max_seconds": 30.0,
        "check_every_seconds": 0.001,
        "bootstrap_resamples": 200,
    }
    return MeasureSettings(**{**base, **overrides})


def noop(batch: Any) -> None:
    return None


def test_scripted_timer_is_a_timer() -> None:
    assert isinstance(ScriptedTimer([]), Timer)


def test_constant_latencies_stop_as_stable_once_min_count_is_met() -> None:
    # Given a device reporting 1000 ns every time
    timer = ScriptedTimer(itertools.repeat(1000))
    # When the loop runs with min_count 50
    result = timed_loop(noop, [0], fast(min_count=50), timer=timer)
    # Then it stops as stable, with at least 50 samples, every one of them the scripted value
    assert result.stop_reason == STOP_STABLE
    assert result.latencies_ns.size >= 50
    assert result.latencies_ns.dtype == np.int64
    assert set(result.latencies_ns.tolist()) == {1000}


def test_a_stable_loop_stops_when_its_minimums_are_met_not_at_the_next_check_interval() -> None:
    # Given a device reporting 1000 ns every time, and a check interval of a minute
    timer = ScriptedTimer(itertools.repeat(1000))
    settings = fast(min_count=10, check_every_seconds=60.0, max_seconds=120.0)
    # When the loop runs
    result = timed_loop(noop, [0], settings, timer=timer)
    # Then it stops as stable soon after its 10th sample (its chunks double from one: 1+2+4+8), long
    # before the interval's first check
    assert result.stop_reason == STOP_STABLE
    assert 10 <= result.latencies_ns.size <= 15
    assert result.wall_ns < 60 * 10**9


def test_a_loop_not_stable_at_its_minimums_goes_on_to_the_check_intervals() -> None:
    # Given a bimodal device whose median is never stable, minimums met at once, checks every 20 ms
    timer = ScriptedTimer(itertools.cycle([1000, 3000]))
    settings = fast(min_count=10, check_every_seconds=0.02, max_seconds=0.1)
    # When the loop runs, it is neither stopped by the check at its minimums nor stuck: max_seconds ends it
    result = timed_loop(noop, [0], settings, timer=timer)
    assert result.stop_reason == STOP_MAX_SECONDS
    assert result.wall_ns >= 100_000_000


def test_unstable_latencies_run_until_max_seconds() -> None:
    # Given a bimodal device, 1000 and 3000 ns in turn: the median's interval always spans both
    timer = ScriptedTimer(itertools.cycle([1000, 3000]))
    # When the loop runs with a 50 ms cap
    result = timed_loop(noop, [0], fast(max_seconds=0.05), timer=timer)
    # Then it ends at max_seconds, not before it
    assert result.stop_reason == STOP_MAX_SECONDS
    assert result.wall_ns >= 50_000_000


def test_max_seconds_before_min_count_leaves_too_few_samples() -> None:
    # Given a zero-second cap and min_count 30
    timer = ScriptedTimer(itertools.repeat(1000))
    # When the loop runs
    result = timed_loop(noop, [0], fast(max_seconds=0.0, warmup_count=10), timer=timer)
    # Then it stops at max_seconds after the one iteration always run, and the warm-up was cut too
    assert result.stop_reason == STOP_MAX_SECONDS
    assert result.latencies_ns.size == 1
    assert result.warmup_count == 0


def test_min_seconds_is_honoured_even_when_stable() -> None:
    timer = ScriptedTimer(itertools.repeat(1000))
    result = timed_loop(noop, [0], fast(min_seconds=0.03, max_seconds=30.0), timer=timer)
    assert result.stop_reason == STOP_STABLE
    assert result.wall_ns >= 30_000_000


def test_warm_up_iterations_are_never_recorded() -> None:
    # Given a device whose first 7 readings are huge, then 1000 ns
    timer = ScriptedTimer(itertools.chain([10**9] * 7, itertools.repeat(1000)))
    # When the loop warms up for exactly 7 iterations
    result = timed_loop(noop, [0], fast(warmup_count=7), timer=timer)
    # Then the warm-up count is 7, none of its readings were kept, and every call is accounted for
    assert result.warmup_count == 7
    assert 10**9 not in result.latencies_ns
    assert set(result.latencies_ns.tolist()) == {1000}
    assert timer.calls == 7 + result.latencies_ns.size


def test_warm_up_lasts_warmup_seconds_when_it_may_not_settle_early() -> None:
    # Given a predictor that notes when each call starts, and a constant device latency
    stamps: list[int] = []
    timer = ScriptedTimer(itertools.repeat(1000))
    # When the warm-up may not end on a settled latency (warmup_settle=0) and lasts 20 ms
    settings = fast(warmup_count=0, warmup_seconds=0.02, warmup_settle=0, min_count=5)
    result = timed_loop(lambda batch: stamps.append(time.perf_counter_ns()), [0], settings, timer=timer)
    # Then the first timed call came at least 20 ms after the first warm-up call (less the few
    # microseconds between the warm-up's clock start and that call)
    assert result.warmup_count >= 1
    assert stamps[result.warmup_count] - stamps[0] >= 19_000_000


def test_warm_up_ends_once_three_windows_agree() -> None:
    # Given a device whose first 10 readings are 5x the rest, and a warm-up of 10 iterations that
    # could last 30 s
    timer = ScriptedTimer(itertools.chain([5000] * 10, itertools.repeat(1000)))
    settings = fast(warmup_count=10, warmup_seconds=30.0, min_count=5)
    # When the loop runs
    result = timed_loop(noop, [0], settings, timer=timer)
    # Then the warm-up ended after four windows of 10: the first three disagree (5000, 1000,
    # 1000), the last three agree
    assert result.warmup_count == 40
    assert set(result.latencies_ns.tolist()) == {1000}


def test_a_drifting_latency_keeps_the_warm_up_going() -> None:
    # Given a device whose latency falls by 0.3% per iteration for 600 iterations, then holds:
    # windows of 10 that differ by 3% (above warmup_settle's 2%) until the fall ends
    def reading(i: int) -> int:
        return int(10**9 * 0.997 ** min(i, 600))

    timer = ScriptedTimer(reading(i) for i in itertools.count())
    settings = fast(warmup_count=10, warmup_seconds=30.0, min_count=5, stability=0.5)
    # When the loop runs
    result = timed_loop(noop, [0], settings, timer=timer)
    # Then the warm-up lasted until the latency held (not the 30 iterations a flat one takes, and
    # not the 30 s of warmup_seconds)
    assert 600 <= result.warmup_count <= 640


def test_the_stop_rule_checks_again_when_the_count_doubles() -> None:
    # Given a device unstable for its first 15 timed readings (1000 and 3000 in turn), then
    # constant, and a check interval longer than the test may take
    timer = ScriptedTimer(
        itertools.chain(itertools.islice(itertools.cycle([1000, 3000]), 15), itertools.repeat(1000))
    )
    settings = fast(min_count=10, check_every_seconds=30.0, max_seconds=60.0)
    # When the loop runs
    result = timed_loop(noop, [0], settings, timer=timer)
    # Then it is unstable at the minimums (15 readings) and stable at the next doubling (31), and
    # stops there rather than at the 30 s check
    assert result.stop_reason == STOP_STABLE
    assert 15 < result.latencies_ns.size <= 63


def test_batches_are_used_in_rotation_and_timing_starts_at_the_first() -> None:
    # Given three batches and a predictor that records what it receives
    seen: list[str] = []
    batches = ["a", "b", "c"]
    # When the loop runs 4 warm-up iterations, then the timed ones
    result = timed_loop(seen.append, batches, fast(warmup_count=4, min_count=10, stability=0.5))
    # Then warm-up cycled a, b, c, a and the timed phase cycled again from a
    count = result.latencies_ns.size
    assert seen[:4] == ["a", "b", "c", "a"]
    assert seen[4:] == [batches[i % 3] for i in range(count)]


def test_host_clock_records_one_non_negative_latency_per_call() -> None:
    calls: list[int] = []
    result = timed_loop(calls.append, [1, 2], fast(warmup_count=3, min_count=20, stability=0.9))
    assert len(calls) == result.warmup_count + result.latencies_ns.size
    assert result.latencies_ns.size >= 20
    assert (result.latencies_ns >= 0).all()


def test_buffer_growth_keeps_every_latency_in_order() -> None:
    # Given readings 1, 2, 3, ... and a minimum far above the initial buffer
    timer = ScriptedTimer(itertools.count(1))
    # When the loop runs
    result = timed_loop(noop, [0], fast(min_count=5000, stability=0.5), timer=timer)
    # Then every reading is present once, in order
    count = result.latencies_ns.size
    assert count >= 5000
    assert np.array_equal(result.latencies_ns, np.arange(1, count + 1))


def test_progress_is_reported_between_zero_and_one_and_ends_at_one() -> None:
    fractions: list[float] = []
    timer = ScriptedTimer(itertools.repeat(1000))
    timed_loop(noop, [0], fast(min_count=2000), timer=timer, on_progress=fractions.append)
    assert len(fractions) >= 2
    assert all(0.0 <= f <= 1.0 for f in fractions)
    assert fractions == sorted(fractions)
    assert fractions[-1] == 1.0


def test_empty_batches_are_refused() -> None:
    with pytest.raises(ValueError, match="batch"):
        timed_loop(noop, [], fast())


def test_predictor_errors_propagate_unchanged() -> None:
    def broken(batch: Any) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        timed_loop(broken, [0], fast())


class CountingPredictor:
    """Counts calls and the threads they come from, safely across threads."""

    def __init__(self) -> None:
        self.calls = 0
        self.threads: set[int] = set()
        self._lock = threading.Lock()

    def __call__(self, batch: Any) -> None:
        with self._lock:
            self.calls += 1
            self.threads.add(threading.get_ident())


def test_threaded_loop_counts_every_call_from_every_thread() -> None:
    # Given a counting predictor and two threads, each warming up 5 times
    predictor = CountingPredictor()
    # When the loop runs
    result = threaded_loop(predictor, [0, 1], fast(warmup_count=5, min_count=200, max_seconds=0.5), 2)
    # Then both threads called it, and every timed call has one latency
    assert len(predictor.threads) == 2
    assert result.warmup_count == 10
    assert predictor.calls == result.warmup_count + result.latencies_ns.size
    assert result.latencies_ns.size >= 1


def test_threaded_loop_with_scripted_timer_stops_as_stable() -> None:
    timer = ScriptedTimer(itertools.repeat(2000))
    result = threaded_loop(noop, [0], fast(min_count=100), 3, timer=timer)
    assert result.stop_reason == STOP_STABLE
    assert result.latencies_ns.size >= 100
    assert set(result.latencies_ns.tolist()) == {2000}
    assert timer.calls == result.latencies_ns.size


def test_threaded_loop_with_one_thread_runs_in_the_calling_thread() -> None:
    predictor = CountingPredictor()
    threaded_loop(predictor, [0], fast(min_count=10, stability=0.9), 1)
    assert predictor.threads == {threading.get_ident()}


@pytest.mark.parametrize("warmup_count", [0, 3])
def test_threaded_loop_raises_a_thread_s_error(warmup_count: int) -> None:
    # Given a predictor that fails on its first call (in warm-up, or in the timed phase)
    def broken(batch: Any) -> None:
        raise RuntimeError("thread boom")

    # When / Then the error reaches the caller, whichever phase it happened in
    with pytest.raises(RuntimeError, match="thread boom"):
        threaded_loop(broken, [0], fast(warmup_count=warmup_count), 2)


def test_threaded_loop_with_a_zero_cap_still_records_every_thread_s_first_chunk() -> None:
    timer = ScriptedTimer(itertools.repeat(1000))
    result = threaded_loop(noop, [0], fast(max_seconds=0.0), 2, timer=timer)
    assert result.stop_reason == STOP_MAX_SECONDS
    assert result.latencies_ns.size >= 2
    assert timer.calls == result.latencies_ns.size


def test_threaded_loop_refuses_zero_threads() -> None:
    with pytest.raises(ValueError, match="threads"):
        threaded_loop(noop, [0], fast(), 0)
