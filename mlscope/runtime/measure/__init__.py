"""Measurement: warm-up, the timed loop and its stopping rule, latency statistics, the validity
verdict, and the scenario template that combines them (the scenarios are
`mlscope.runtime.scenarios`).

Part of the predictor runtime: imports only the standard library, numpy and psutil, so it runs
inside slim predictor containers. The names below are imported from their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Each name's module, imported on first use (PEP 562): a process that only admits requests (the CLI,
# the API) reads MeasureSettings or a submodule without importing numpy and the loop.
_HOMES = {
    "STOP_MAX_SECONDS": "loop",
    "STOP_STABLE": "loop",
    "LoopResult": "loop",
    "Timer": "loop",
    "threaded_loop": "loop",
    "timed_loop": "loop",
    "Measurement": "scenario_base",
    "Scenario": "scenario_base",
    "MeasureSettings": "settings",
    "LatencySummary": "stats",
    "median_ci_relative_halfwidth": "stats",
    "order_statistic_median_ci": "stats",
    "summarize": "stats",
    "EnvironmentMonitor": "validity",
    "Validity": "validity",
    "judge": "validity",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


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
