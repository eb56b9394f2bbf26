"""Scenarios: the registry, throughput definitions, and the Measurement they return."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from mlscope.contract.errors import UserError
from mlscope.runtime.measure import (
    LatencySummary,
    LoopResult,
    MeasureSettings,
    Scenario,
)
from mlscope.runtime.scenarios import SCENARIOS, get_scenario
from mlscope.runtime.scenarios.offline import Offline
from mlscope.runtime.scenarios.single_stream import SingleStream
from tests.unit.test_measure_loop import CountingPredictor
from tests.unit.test_measure_loop import fast as loop_fast

MEASUREMENT_KEYS = {
    "load",
    "scenario",
    "batch_size",
    "latency_ms",
    "throughput",
    "validity",
    "latencies_ns",
    "duration_s",
    "stop_reason",
    "warmup_count",
    "environment",
    "settings",
}


class ConstantTimer:
    """A device timer that always reads the same duration."""

    def __init__(self, nanoseconds: int) -> None:
        self.nanoseconds = nanoseconds

    def time(self, predict: Callable[[Any], Any], batch: Any) -> int:
        predict(batch)
        return self.nanoseconds


def fast(**overrides: Any) -> MeasureSettings:
    """The loop tests' quick settings, with a short warm-up, 50 samples and a 1 s cap."""
    return loop_fast(**{"warmup_count": 2, "min_count": 50, "max_seconds": 1.0, **overrides})


def test_registry_names_match_the_scenarios() -> None:
    assert set(SCENARIOS) == {"single_stream", "offline", "server", "multi_stream", "generate"}
    assert all(name == cls.NAME for name, cls in SCENARIOS.items())


def test_get_scenario_returns_an_instance() -> None:
    assert isinstance(get_scenario("single_stream"), SingleStream)
    assert isinstance(get_scenario("offline"), Offline)


def test_unknown_scenario_names_itself_and_the_known_ones() -> None:
    with pytest.raises(UserError) as caught:
        get_scenario("serve")
    assert "'serve'" in caught.value.message
    assert "offline" in caught.value.message
    assert "single_stream" in caught.value.message
    assert caught.value.field == "scenario"


def test_scenario_is_abstract() -> None:
    class Incomplete(Scenario):
        NAME: ClassVar[str] = "incomplete"

        def _throughput(self, loop: LoopResult, summary: LatencySummary, batch_size: int) -> float:
            return 0.0

    with pytest.raises(TypeError):
        Scenario()
    # A scenario that names its throughput is whole; one without a loop says so when run.
    with pytest.raises(NotImplementedError, match="Incomplete"):
        Incomplete().run(lambda b: None, [0], 1, fast())


def test_single_stream_throughput_is_batch_size_over_mean_latency() -> None:
    # Given a device reading 2 ms per batch of 4 samples
    scenario = SingleStream()
    # When measured
    measurement = scenario.run(lambda b: None, [0], 4, fast(), timer=ConstantTimer(2_000_000))
    # Then latency is 2 ms and throughput 4 / 0.002 s = 2000 samples/s
    assert measurement.latency_ms.median == pytest.approx(2.0)
    assert measurement.latency_ms.median_ci == (2.0, 2.0)
    assert measurement.throughput == pytest.approx(2000.0)
    assert measurement.stop_reason == "stable"
    assert measurement.scenario == "single_stream"
    assert measurement.warmup_count == 2


def test_measurement_to_dict_has_the_fixed_keys_and_is_json() -> None:
    measurement = SingleStream().run(lambda b: None, [0, 1], 2, fast(), timer=ConstantTimer(1_000))
    as_dict = measurement.to_dict()
    assert set(as_dict) == MEASUREMENT_KEYS
    assert set(as_dict["validity"]) == {"valid", "reasons"}
    assert as_dict["latency_ms"]["count"] == len(as_dict["latencies_ns"])
    assert all(type(v) is int for v in as_dict["latencies_ns"])
    assert as_dict["settings"] == fast().to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict


def test_offline_with_two_threads_counts_every_sample() -> None:
    # Given a counting predictor, batches of 3 samples, and two threads
    predictor = CountingPredictor()
    # When the offline scenario runs
    measurement = Offline().run(predictor, [0, 1, 2], 3, fast(concurrency=2, min_count=200, max_seconds=0.5))
    # Then every call is either warm-up or a recorded batch, both threads issued batches,
    # and throughput is every timed sample over the timed phase's wall time
    count = measurement.latency_ms.count
    assert len(predictor.threads) == 2
    assert predictor.calls == measurement.warmup_count + count
    assert measurement.throughput == pytest.approx(count * 3 / measurement.duration_s)


def test_offline_with_one_thread_stays_in_the_calling_thread() -> None:
    predictor = CountingPredictor()
    Offline().run(predictor, [0], 1, fast(concurrency=1, stability=0.9))
    assert predictor.threads == {threading.get_ident()}


def test_offline_throughput_uses_wall_time_not_device_latencies() -> None:
    # Given a device claiming 1 s per batch while the host loop takes microseconds
    measurement = Offline().run(lambda b: None, [0], 8, fast(), timer=ConstantTimer(10**9))
    # Then throughput follows the wall clock, far above the 8 samples/s the latencies suggest
    assert measurement.throughput == pytest.approx(measurement.latency_ms.count * 8 / measurement.duration_s)
    assert measurement.throughput > 8.0


@pytest.mark.parametrize("batch_size", [0, -1, 2.0, True])
def test_batch_size_must_be_a_positive_integer(batch_size: Any) -> None:
    with pytest.raises(UserError) as caught:
        SingleStream().run(lambda b: None, [0], batch_size, fast())
    assert caught.value.field == "batch_size"


def test_progress_is_forwarded_to_the_caller() -> None:
    fractions: list[float] = []
    SingleStream().run(lambda b: None, [0], 1, fast(), timer=ConstantTimer(500), on_progress=fractions.append)
    assert fractions
    assert fractions[-1] == 1.0


def test_environment_and_validity_are_attached() -> None:
    measurement = SingleStream().run(lambda b: None, [0], 1, fast(), timer=ConstantTimer(1_000))
    assert "other_cpu_share" in measurement.environment
    assert isinstance(measurement.validity.valid, bool)
    assert measurement.settings == fast()
