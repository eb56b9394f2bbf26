"""The validity verdict on fake loops and environments, and the environment monitor's arithmetic."""

from __future__ import annotations

from collections import namedtuple
from typing import Any, NamedTuple

import numpy as np
import pytest

from mlscope.runtime.measure import (
    STOP_MAX_SECONDS,
    STOP_STABLE,
    EnvironmentMonitor,
    LoopResult,
    MeasureSettings,
    Validity,
    judge,
    summarize,
)
from mlscope.runtime.measure import validity as validity_module

SETTINGS = MeasureSettings(bootstrap_resamples=200)
QUIET = {"other_cpu_share": 0.05, "cpu_freq_start_mhz": 3000.0, "cpu_freq_end_mhz": 2950.0}


def verdict(
    latencies: Any, stop_reason: str = STOP_STABLE, environment: dict[str, Any] | None = None
) -> Validity:
    array = np.asarray(latencies, dtype=np.int64)
    loop = LoopResult(latencies_ns=array, wall_ns=int(array.sum()), stop_reason=stop_reason, warmup_count=0)
    return judge(summarize(array, SETTINGS), loop, QUIET if environment is None else environment, SETTINGS)


def steady(count: int = 400) -> list[int]:
    return [1_000_000 + (i % 5) for i in range(count)]


def test_a_steady_run_on_a_quiet_machine_is_valid_with_no_reasons() -> None:
    result = verdict(steady())
    assert result.valid is True
    assert result.reasons == []


def test_too_few_samples_make_the_result_invalid() -> None:
    result = verdict(steady(12), stop_reason=STOP_MAX_SECONDS)
    assert result.valid is False
    assert "too few samples: 12 < min_count 30" in result.reasons


def test_a_median_that_never_stabilised_makes_the_result_invalid() -> None:
    # Given a bimodal run cut off by max_seconds: the median interval spans both modes
    result = verdict([1_000_000, 3_000_000] * 200, stop_reason=STOP_MAX_SECONDS)
    # Then it is invalid, saying how wide the interval was against the limit
    assert result.valid is False
    unstable = [r for r in result.reasons if r.startswith("did not stabilise within max_seconds 60: ")]
    assert len(unstable) == 1
    assert "median CI ±50.0% > 2.0%" in unstable[0]
    # And what to do about it
    assert "max_seconds" in unstable[0].split(":", 1)[1] and "stability" in unstable[0]


def test_other_processes_above_the_contention_limit_make_it_invalid() -> None:
    result = verdict(steady(), environment={**QUIET, "other_cpu_share": 0.38})
    assert result.valid is False
    assert result.reasons == ["other processes used 38% of the CPUs during the run (contention_limit 25%)"]


def test_other_processes_below_the_limit_are_not_mentioned() -> None:
    result = verdict(steady(), environment={**QUIET, "other_cpu_share": 0.2})
    assert result.valid is True
    assert result.reasons == []


def test_a_falling_cpu_frequency_is_read_as_throttling() -> None:
    result = verdict(
        steady(), environment={**QUIET, "cpu_freq_start_mhz": 3000.0, "cpu_freq_end_mhz": 2580.0}
    )
    assert result.valid is False
    assert result.reasons == ["CPU frequency fell 14% during the run (thermal throttling?)"]


def test_a_missing_environment_is_not_judged() -> None:
    unknown = {"other_cpu_share": None, "cpu_freq_start_mhz": None, "cpu_freq_end_mhz": None}
    assert verdict(steady(), environment=unknown).valid is True
    assert verdict(steady(), environment={}).reasons == []


def test_high_variability_is_a_warning_that_leaves_the_result_valid() -> None:
    # Given a stable median with every tenth latency ten times slower
    latencies = [10_000_000 if i % 10 == 0 else 1_000_000 for i in range(400)]
    result = verdict(latencies)
    # Then only the variability warning is listed, and the result stays valid
    assert result.valid is True
    assert len(result.reasons) == 1
    assert result.reasons[0].startswith("variable: CV ")
    assert result.reasons[0].endswith("> 0.25")


@pytest.mark.parametrize(("start", "end", "word"), [(1000, 1100, "above"), (1100, 1000, "below")])
def test_drift_between_the_first_and_last_quarter_is_a_warning(start: int, end: int, word: str) -> None:
    # Given latencies creeping steadily from start to end µs over 10 000 iterations
    latencies = np.linspace(start * 1000, end * 1000, 10_000).astype(np.int64)
    # When judged
    result = verdict(latencies)
    # Then the run is still valid, with a drift warning naming the direction
    assert result.valid is True
    assert result.reasons == [f"drift: last-quarter median 7% {word} first-quarter"]


def test_invalidating_reasons_come_before_warnings() -> None:
    latencies = [10_000_000 if i % 10 == 0 else 1_000_000 for i in range(20)]
    result = verdict(latencies, stop_reason=STOP_MAX_SECONDS)
    assert result.reasons[0].startswith("too few samples")
    assert result.reasons[-1].startswith("variable")


def test_validity_to_dict() -> None:
    assert Validity(False, ["x"]).to_dict() == {"valid": False, "reasons": ["x"]}


class CpuTimes(NamedTuple):
    user: float = 0.0
    nice: float = 0.0
    system: float = 0.0
    idle: float = 0.0
    iowait: float = 0.0
    irq: float = 0.0
    softirq: float = 0.0
    steal: float = 0.0
    guest: float = 0.0
    guest_nice: float = 0.0


ProcessTimes = namedtuple("ProcessTimes", "user system")
Freq = namedtuple("Freq", "current min max")


class FakeProcess:
    def __init__(self, readings: list[ProcessTimes]) -> None:
        self._readings = iter(readings)

    def cpu_times(self) -> ProcessTimes:
        return next(self._readings)


def test_monitor_computes_the_share_of_other_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a 2-CPU machine over 5 s: 9 s of busy time in total (guest time counted once, inside
    # user), of which this process used 3 s; frequency 3000 → 2500 MHz
    system = iter(
        [
            CpuTimes(user=100, system=50, idle=1000, iowait=10, guest=5),
            CpuTimes(user=107, system=52, idle=1002, iowait=10, guest=6),
        ]
    )
    clock = iter([100.0, 105.0])
    freq = iter([Freq(3000.0, 800.0, 3500.0), Freq(2500.0, 800.0, 3500.0)])
    monkeypatch.setattr(validity_module.psutil, "cpu_times", lambda: next(system))
    monkeypatch.setattr(validity_module.psutil, "cpu_count", lambda logical=True: 2)
    monkeypatch.setattr(validity_module.psutil, "cpu_freq", lambda: next(freq))
    monkeypatch.setattr(validity_module.psutil, "getloadavg", lambda: (1.0, 0.5, 0.25))
    monkeypatch.setattr(validity_module, "monotonic", lambda: next(clock))
    monitor = EnvironmentMonitor()
    monitor._process = FakeProcess([ProcessTimes(10.0, 1.0), ProcessTimes(13.0, 1.0)])
    # When it samples start and end
    monitor.start()
    environment = monitor.stop()
    # Then other processes used (9 - 3) / (5 s × 2 CPUs) of the machine, and this one 3 / 10
    assert environment["duration_s"] == pytest.approx(5.0)
    assert environment["cpu_count"] == 2
    assert environment["other_cpu_share"] == pytest.approx(0.6)
    assert environment["own_cpu_share"] == pytest.approx(0.3)
    assert environment["cpu_freq_start_mhz"] == 3000.0
    assert environment["cpu_freq_end_mhz"] == 2500.0
    assert environment["load_avg_end"] == [1.0, 0.5, 0.25]


def test_monitor_reports_none_where_the_frequency_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validity_module.psutil, "cpu_freq", lambda: None)
    monitor = EnvironmentMonitor()
    monitor.start()
    environment = monitor.stop()
    assert environment["cpu_freq_start_mhz"] is None
    assert environment["cpu_freq_end_mhz"] is None


def test_monitor_on_this_machine_gives_shares_between_zero_and_one() -> None:
    monitor = EnvironmentMonitor()
    monitor.start()
    sum(i * i for i in range(200_000))
    environment = monitor.stop()
    assert environment["duration_s"] > 0
    assert environment["cpu_count"] >= 1
    for key in ("other_cpu_share", "own_cpu_share"):
        assert environment[key] is None or 0.0 <= environment[key] <= 1.0


def test_monitor_stop_before_start_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="start"):
        EnvironmentMonitor().stop()
