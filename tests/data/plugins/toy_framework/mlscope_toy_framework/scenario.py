"""A scenario plugged into mlscope by entry point, for mlscope's tests: each query is two batches back
to back, so a query's latency is the pair's and its throughput counts both."""

from __future__ import annotations

from typing import Any, ClassVar

from mlscope.runtime.measure.loop import LoopResult, timed_loop
from mlscope.runtime.measure.scenario_base import RunContext, Scenario
from mlscope.runtime.measure.stats import LatencySummary


class Pairs(Scenario):
    """Two batches per query, one after the other."""

    NAME: ClassVar[str] = "toy_pairs"

    def _loop(self, run: RunContext) -> LoopResult:
        def pair(batch: Any) -> None:
            run.predict(batch)
            run.predict(batch)

        return timed_loop(pair, run.batches, run.settings, timer=run.timer, on_progress=run.on_progress)

    def _throughput(self, loop: LoopResult, summary: LatencySummary, batch_size: int) -> float:
        return 2 * batch_size / (summary.mean / 1000.0) if summary.mean > 0 else 0.0
