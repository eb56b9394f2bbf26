"""Measurement: warm-up, the timed loop and its stopping rule, latency statistics, the validity
verdict, and the scenario template that combines them (the scenarios are
`mlscope.runtime.scenarios`).

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
from mlscope.runtime.measure.scenario_base import Measurement, Scenario
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.measure.stats import (
    LatencySummary,
    median_ci_relative_halfwidth,
    order_statistic_median_ci,
    summarize,
)
from mlscope.runtime.measure.validity import EnvironmentMonitor, Validity, judge

__all__ = [
    "STOP_MAX_SECONDS",
    "STOP_STABLE",
    "EnvironmentMonitor",
    "LatencySummary",
    "LoopResult",
    "MeasureSettings",
    "Measurement",
    "Scenario",
    "Timer",
    "Validity",
    "judge",
    "median_ci_relative_halfwidth",
    "order_statistic_median_ci",
    "summarize",
    "threaded_loop",
    "timed_loop",
]
