"""The single_stream scenario: one query at a time, back to back (MLPerf LoadGen's SingleStream)."""

from __future__ import annotations

from typing import ClassVar

from mlscope.runtime.measure.loop import LoopResult, timed_loop
from mlscope.runtime.measure.scenario_base import RunContext, Scenario
from mlscope.runtime.measure.stats import LatencySummary

__all__ = ["SingleStream"]


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
