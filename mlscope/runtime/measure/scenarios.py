"""Scenarios after MLPerf LoadGen: how queries are issued, and what throughput means for each.

Owns the back-to-back scenarios `SingleStream` and `Offline`, and `SCENARIOS`, the registry of every
scenario by name (the `mlscope.scenarios` entry-point group: mlscope's own are `BUILTIN_SCENARIOS`, a
third party's is an entry point naming a `Scenario` class). The load generator's `Server` and
`MultiStream` live in `load_scenarios`; the template they all follow, and the `Measurement` they
return, in `scenario_base`.
"""

from __future__ import annotations

from typing import ClassVar

from mlscope.contract.errors import UserError
from mlscope.contract.plugins import Registry, UnknownPlugin
from mlscope.runtime.measure.load_scenarios import MultiStream, Server
from mlscope.runtime.measure.loop import NS_PER_S, LoopResult, threaded_loop, timed_loop
from mlscope.runtime.measure.scenario_base import Measurement, RunContext, Scenario
from mlscope.runtime.measure.stats import LatencySummary

__all__ = [
    "BUILTIN_SCENARIOS",
    "SCENARIOS",
    "Measurement",
    "MultiStream",
    "Offline",
    "Scenario",
    "Server",
    "SingleStream",
    "get_scenario",
]


class SingleStream(Scenario):
    """One query at a time, each issued when the previous one returns: latency-bound.

    Throughput is batch_size / mean latency: what one stream of back-to-back queries sustains
    (0.0 if the mean latency is zero, i.e. too fast for the clock).
    """

    NAME: ClassVar[str] = "single_stream"

    def _loop(self, run: RunContext) -> LoopResult:
        return timed_loop(
            run.predict,
            run.batches,
            run.settings,
            timer=run.timer,
            on_progress=run.on_progress,
            record_starts=run.record_starts,
        )

    def _throughput(self, loop: LoopResult, summary: LatencySummary, batch_size: int) -> float:
        return batch_size / (summary.mean / 1000.0) if summary.mean > 0 else 0.0


class Offline(Scenario):
    """Batches issued back to back from `settings.concurrency` threads: throughput-bound.

    Throughput is every sample completed in the timed phase over its wall time, so it includes
    whatever the harness and the threads' contention cost; the latencies are those of each batch.
    """

    NAME: ClassVar[str] = "offline"

    def _loop(self, run: RunContext) -> LoopResult:
        return threaded_loop(
            run.predict,
            run.batches,
            run.settings,
            run.settings.concurrency,
            timer=run.timer,
            on_progress=run.on_progress,
            record_starts=run.record_starts,
        )

    def _throughput(self, loop: LoopResult, summary: LatencySummary, batch_size: int) -> float:
        return loop.latencies_ns.size * batch_size / (max(loop.wall_ns, 1) / NS_PER_S)


# mlscope's own scenarios (pyproject.toml's `mlscope.scenarios` entry points): name → "module:class".
# The generate scenario is not one of them: it runs a generation engine (`mlscope.runtime.generate`).
BUILTIN_SCENARIOS: dict[str, str] = {
    "single_stream": "mlscope.runtime.measure.scenarios:SingleStream",
    "offline": "mlscope.runtime.measure.scenarios:Offline",
    "server": "mlscope.runtime.measure.load_scenarios:Server",
    "multi_stream": "mlscope.runtime.measure.load_scenarios:MultiStream",
}

# Every scenario, by name.
SCENARIOS: Registry[type[Scenario]] = Registry("mlscope.scenarios", BUILTIN_SCENARIOS)


def get_scenario(name: str) -> Scenario:
    """The scenario registered under `name`.

    Args:
        name: a key of SCENARIOS, e.g. "single_stream".

    Returns:
        A new instance of it.

    Raises:
        UserError: no scenario has that name; the message lists the known ones.
    """
    try:
        return SCENARIOS[name]()
    except (UnknownPlugin, TypeError):
        known = ", ".join(sorted(SCENARIOS))
        raise UserError(f"unknown scenario {name!r}: expected one of {known}", field="scenario") from None
