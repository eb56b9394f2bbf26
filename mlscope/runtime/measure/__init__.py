"""Measurement: warm-up, the timed loop and its stopping rule, latency statistics, the validity
verdict, and the scenarios (single_stream, offline) that combine them.

Part of the predictor runtime: imports only the standard library, numpy and psutil, so it runs
inside slim predictor containers.
"""

from mlscope.runtime.measure.loop import (
    STOP_MAX_SECONDS,
    STOP_STABLE,
    LoopResult,
    Timer,
    threaded_loop,
    timed_loop,
)
from mlscope.runtime.measure.scenarios import (
    SCENARIOS,
    Measurement,
    Offline,
    Scenario,
    SingleStream,
    get_scenario,
)
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.measure.stats import (
    LatencySummary,
    median_ci_relative_halfwidth,
    order_statistic_median_ci,
    summarize,
)
from mlscope.runtime.measure.validity import EnvironmentMonitor, Validity, judge

__all__ = [
    "SCENARIOS",
    "STOP_MAX_SECONDS",
    "STOP_STABLE",
    "EnvironmentMonitor",
    "LatencySummary",
    "LoopResult",
    "MeasureSettings",
    "Measurement",
    "Offline",
    "Scenario",
    "SingleStream",
    "Timer",
    "Validity",
    "get_scenario",
    "judge",
    "median_ci_relative_halfwidth",
    "order_statistic_median_ci",
    "summarize",
    "threaded_loop",
    "timed_loop",
]
