"""What the scenarios a load generator drives (server, multi_stream) share: `LoadScenario` checks
the rate, warms up, runs the generator once (`mlscope.runtime.measure.load_run`) and makes its
outcome; each scenario says only when its queries are due and what bound its percentile is held to.
"""

from __future__ import annotations

import time
from abc import abstractmethod

from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure.generator import Schedule
from mlscope.runtime.measure.load_run import check_rate, outcome_of, run_under_load
from mlscope.runtime.measure.loop import NS_PER_S, LoopResult, _warm_up
from mlscope.runtime.measure.parts import ship, start_instant_ns
from mlscope.runtime.measure.scenario_base import Outcome, RunContext, Scenario
from mlscope.runtime.measure.stats import LatencySummary

__all__ = ["LoadScenario"]


class LoadScenario(Scenario):
    """A scenario whose queries a load generator issues on a schedule; throughput is the samples
    completed per second."""

    def _outcome(self, run: RunContext) -> Outcome:
        schedule = self._schedule(run.load, len(run.batches))
        if schedule is not None:
            check_rate(schedule.rate, schedule.samples_per_query)
        warmup_count = _warm_up(run.predict, run.batches, run.settings, run.timer)
        shard = run.load.part
        start_at_ns = None if shard is None else start_instant_ns(shard)
        late_ns = 0 if start_at_ns is None else max(0, time.perf_counter_ns() - start_at_ns)
        record, result = run_under_load(
            run.predict,
            run.batches,
            run.batch_size,
            run.settings,
            run.load,
            self.NAME,
            schedule,
            self._bound_ms(run.load),
            timer=run.timer,
            on_progress=run.on_progress,
            start_at_ns=start_at_ns,
        )
        if shard is not None:
            # A part of a split load ships its record whole for the merge (runtime/measure/parts.py).
            result.section["part"] = ship(record, shard, late_ns / NS_PER_S)
        return outcome_of(record, result, warmup_count, run.record_starts)

    @abstractmethod
    def _schedule(self, load: LoadSettings, inputs: int) -> Schedule | None:
        """When queries are due; None to issue each when the previous one completed.

        Raises:
            UserError: the settings cannot make a schedule with `inputs` distinct inputs.
        """

    @abstractmethod
    def _bound_ms(self, load: LoadSettings) -> float | None:
        """The latency the percentile is certified against; None to estimate it instead."""

    def _throughput(self, loop: LoopResult, summary: LatencySummary, batch_size: int) -> float:
        return loop.latencies_ns.size * batch_size / (max(loop.wall_ns, 1) / NS_PER_S)
