"""Validity: whether a measurement's numbers can be trusted, and why not.

Owns `EnvironmentMonitor` (what the machine did during the run: other processes' CPU use, CPU
frequency, load average, sampled only at start and end so it costs nothing while timing) and
`judge`, which turns a summary, the loop's record and that environment into a verdict with
reasons a person can act on.

Verdict policy. These make a result invalid (valid=False), because the number itself is wrong
or unsupported: too few samples; a median that never stabilised; other processes using more
than `contention_limit` of the machine; CPU frequency falling more than THROTTLE_LIMIT (thermal
throttling). These are warnings, listed in `reasons` while valid stays True, because the number
is right but describes a noisy or changing system: a coefficient of variation above `cv_limit`;
a drift of the median between the first and last quarter of the run above DRIFT_LIMIT.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from time import monotonic
from typing import Any

import numpy as np
import psutil

from mlscope.contract.result import ValidityVerdict
from mlscope.runtime.measure.loop import STOP_MAX_SECONDS, LoopResult
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.measure.stats import LatencySummary, median_ci_relative_halfwidth

__all__ = ["DRIFT_LIMIT", "THROTTLE_LIMIT", "EnvironmentMonitor", "Validity", "judge"]

# A fall of the reported CPU frequency beyond this fraction is read as throttling; smaller
# changes are ordinary frequency scaling.
THROTTLE_LIMIT = 0.10
# Last-quarter median this far from the first-quarter one (either way) is reported as drift.
DRIFT_LIMIT = 0.05
# Fewer samples than this make quarter medians meaningless.
_DRIFT_MIN_COUNT = 8


@dataclass
class Validity:
    """The verdict on one measurement.

    Attributes:
        valid: False when any invalidating reason holds (see the module docstring).
        reasons: one sentence per finding, invalidating ones first; empty for a clean run.
    """

    valid: bool
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> ValidityVerdict:
        """Returns:
        {"valid": bool, "reasons": [str, ...]}, the `validity` object of the result shape.
        """
        return {"valid": self.valid, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class _Sample:
    monotonic_s: float
    # (system-wide busy seconds, this process's CPU seconds); None where either is unreadable.
    cpu_s: tuple[float, float] | None
    cpu_freq_mhz: float | None
    load_avg: list[float] | None


class EnvironmentMonitor:
    """Samples the machine at the start and the end of a run, never in between.

    `stop()` returns a dict with:
        duration_s: seconds between start() and stop().
        cpu_count: logical CPUs.
        other_cpu_share: CPU time used by other processes as a share of the machine's capacity
            (duration × cpu_count), in [0, 1]; None where CPU times cannot be read.
        own_cpu_share: the same for this process and all its threads.
        cpu_freq_start_mhz, cpu_freq_end_mhz: mean current CPU frequency; None where not
            reported (many VMs).
        load_avg_start, load_avg_end: 1, 5 and 15-minute load averages; None where unavailable.

    CPU times tick at 10 ms on Linux, so shares of runs shorter than about a second are coarse.
    """

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._start: _Sample | None = None

    def start(self) -> None:
        """Take the starting sample; calling it again restarts the monitor."""
        self._start = self._sample()

    def stop(self) -> dict[str, Any]:
        """Take the closing sample and compare it with the starting one.

        Returns:
            The environment dict described on the class.

        Raises:
            RuntimeError: start() was not called first.
        """
        if self._start is None:
            raise RuntimeError("EnvironmentMonitor.stop() called before start()")
        begin, end = self._start, self._sample()
        duration = max(end.monotonic_s - begin.monotonic_s, 1e-9)
        cpus = psutil.cpu_count(logical=True) or os.cpu_count() or 1
        capacity = duration * cpus
        other_share: float | None = None
        own_share: float | None = None
        if begin.cpu_s is not None and end.cpu_s is not None:
            busy = end.cpu_s[0] - begin.cpu_s[0]
            own = end.cpu_s[1] - begin.cpu_s[1]
            own_share = _clamp01(own / capacity)
            other_share = _clamp01((busy - own) / capacity)
        return {
            "duration_s": duration,
            "cpu_count": cpus,
            "other_cpu_share": other_share,
            "own_cpu_share": own_share,
            "cpu_freq_start_mhz": begin.cpu_freq_mhz,
            "cpu_freq_end_mhz": end.cpu_freq_mhz,
            "load_avg_start": begin.load_avg,
            "load_avg_end": end.load_avg,
        }

    def _sample(self) -> _Sample:
        return _Sample(
            monotonic_s=monotonic(),
            cpu_s=self._cpu_seconds(),
            cpu_freq_mhz=_cpu_freq_mhz(),
            load_avg=_load_avg(),
        )

    def _cpu_seconds(self) -> tuple[float, float] | None:
        try:
            own = self._process.cpu_times()
            system = psutil.cpu_times()
        except (psutil.Error, OSError):
            return None
        total = sum(system)
        # Linux counts guest time inside user and nice already; iowait is idle waiting on a disk.
        total -= getattr(system, "guest", 0.0) + getattr(system, "guest_nice", 0.0)
        idle = system.idle + getattr(system, "iowait", 0.0)
        return float(total - idle), float(own.user + own.system)


def judge(
    summary: LatencySummary,
    loop: LoopResult,
    environment: dict[str, Any],
    settings: MeasureSettings,
    *,
    judge_stability: bool = True,
    invalid: Sequence[str] = (),
    warnings: Sequence[str] = (),
) -> Validity:
    """Decide whether a measurement is valid, and say why not.

    Args:
        summary: the latency summary of the run.
        loop: the timed loop's record (latencies in run order, stop reason).
        environment: `EnvironmentMonitor.stop()`'s dict; missing or None entries are not judged.
        settings: the limits (min_count, stability, confidence, max_seconds, cv_limit,
            contention_limit).
        judge_stability: whether a median that did not stabilise invalidates the run (a run under
            a load generator ends on its certificate instead, and queueing widens its spread).
        invalid: the scenario's own invalidating findings, listed first.
        warnings: the scenario's own warnings, listed last.

    Returns:
        The verdict; the policy is in the module docstring.
    """
    warnings = list(warnings)
    invalid = list(invalid)
    latencies = np.asarray(loop.latencies_ns)
    if summary.count < settings.min_count:
        invalid.append(f"too few samples: {summary.count} < min_count {settings.min_count}")
    if latencies.size and judge_stability:
        halfwidth = median_ci_relative_halfwidth(latencies, settings.confidence)
        if halfwidth > settings.stability:
            spread = f"median CI ±{halfwidth:.1%} > {settings.stability:.1%}"
            if loop.stop_reason == STOP_MAX_SECONDS:
                invalid.append(
                    f"did not stabilise within max_seconds {settings.max_seconds:g}: {spread} "
                    "(measure longer with max_seconds, or accept a wider interval with stability)"
                )
            else:
                invalid.append(f"unstable: {spread}")
    other = environment.get("other_cpu_share")
    if other is not None and other > settings.contention_limit:
        invalid.append(
            f"other processes used {other:.0%} of the CPUs during the run "
            f"(contention_limit {settings.contention_limit:.0%})"
        )
    freq_start, freq_end = environment.get("cpu_freq_start_mhz"), environment.get("cpu_freq_end_mhz")
    if freq_start and freq_end is not None:
        fall = (freq_start - freq_end) / freq_start
        if fall > THROTTLE_LIMIT:
            invalid.append(f"CPU frequency fell {fall:.0%} during the run (thermal throttling?)")
    own_warnings: list[str] = []
    if summary.cv > settings.cv_limit:
        own_warnings.append(f"variable: CV {summary.cv:.2f} > {settings.cv_limit:.2f}")
    drift = _drift(latencies)
    if drift is not None and abs(drift) > DRIFT_LIMIT:
        direction = "above" if drift > 0 else "below"
        own_warnings.append(f"drift: last-quarter median {abs(drift):.0%} {direction} first-quarter")
    return Validity(valid=not invalid, reasons=invalid + own_warnings + warnings)


def _drift(latencies: np.ndarray) -> float | None:
    if latencies.size < _DRIFT_MIN_COUNT:
        return None
    quarter = latencies.size // 4
    first = float(np.median(latencies[:quarter]))
    last = float(np.median(latencies[-quarter:]))
    return (last - first) / first if first > 0 else None


def _cpu_freq_mhz() -> float | None:
    try:
        freq = psutil.cpu_freq()
    except (psutil.Error, OSError, NotImplementedError):
        return None
    return float(freq.current) if freq is not None and freq.current else None


def _load_avg() -> list[float] | None:
    try:
        return [float(v) for v in psutil.getloadavg()]
    except (psutil.Error, OSError, AttributeError):
        return None


def _clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))
