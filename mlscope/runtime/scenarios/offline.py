"""The offline scenario: batches back to back from several threads (MLPerf LoadGen's Offline)."""

from __future__ import annotations

from typing import ClassVar

from mlscope.runtime.measure.loop import NS_PER_S, LoopResult, threaded_loop
from mlscope.runtime.measure.scenario_base import RunContext, Scenario
from mlscope.runtime.measure.stats import LatencySummary

__all__ = ["Offline"]


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
