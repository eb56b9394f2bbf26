"""The scenarios a load generator drives, after MLPerf LoadGen: server (Poisson arrivals at a target
QPS) and multi_stream (N samples every interval).

Owns `LoadScenario` (what both share: check the rate, warm up, one run of the generator, its
outcome), `Server` and `MultiStream`, which say only when queries are due and what bound their
percentile is held to. One run of the generator is `load_run`'s, the max-QPS search `search`'s.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

from mlscope.contract.errors import UserError
from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure.generator import Schedule
from mlscope.runtime.measure.load_run import check_rate, outcome_of, run_under_load
from mlscope.runtime.measure.loop import NS_PER_S, LoopResult, _warm_up
from mlscope.runtime.measure.scenario_base import Outcome, RunContext, Scenario
from mlscope.runtime.measure.search import search_max_qps
from mlscope.runtime.measure.stats import LatencySummary

__all__ = ["LoadScenario", "MultiStream", "Server"]


class LoadScenario(Scenario):
    """A scenario whose queries a load generator issues on a schedule; throughput is the samples
    completed per second."""

    def _outcome(self, run: RunContext) -> Outcome:
        schedule = self._schedule(run.load, len(run.batches))
        if schedule is not None:
            check_rate(schedule.rate, schedule.samples_per_query)
        warmup_count = _warm_up(run.predict, run.batches, run.settings, run.timer)
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
        )
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


class Server(LoadScenario):
    """Queries arrive as a Poisson process at `load.qps` (seeded), issued by a generator thread to
    `load.max_in_flight` model threads; each latency runs from the query's scheduled arrival, so
    queueing counts. With `load.find_max_qps`, a search for the highest rate whose certified
    percentile meets `load.latency_bound_ms` (see search).
    """

    NAME: ClassVar[str] = "server"

    def _outcome(self, run: RunContext) -> Outcome:
        if not run.load.find_max_qps:
            return super()._outcome(run)
        return search_max_qps(
            run.predict,
            run.batches,
            run.batch_size,
            run.settings,
            run.load,
            timer=run.timer,
            on_probe=run.on_probe,
            record_starts=run.record_starts,
        )

    def _schedule(self, load: LoadSettings, inputs: int) -> Schedule:
        if load.qps is None:
            raise UserError("the server scenario needs a target rate: qps (e.g. --qps 20)", field="qps")
        return Schedule("poisson", load.qps, seed=load.seed)

    def _bound_ms(self, load: LoadSettings) -> float | None:
        return load.latency_bound_ms


class MultiStream(LoadScenario):
    """Every `load.interval_ms` a query of `load.samples_per_query` samples is issued at once; the
    query's latency is its slowest sample's, and a query slower than the interval overran it. The
    percentile (LoadGen's 99th) is certified against `load.latency_bound_ms`, or else the interval.

    With `load.back_to_back` (LoadGen >= 1.0's MultiStream), each query is issued when the previous
    one completed (closed_loop); there is no interval, and the percentile is estimated (LoadGen's
    early stopping) unless `load.latency_bound_ms` bounds it.
    """

    NAME: ClassVar[str] = "multi_stream"

    def _schedule(self, load: LoadSettings, inputs: int) -> Schedule | None:
        if inputs < load.samples_per_query:
            raise UserError(
                f"multi_stream's {load.samples_per_query} samples per query need as many distinct inputs, "
                f"but only {inputs} were prepared: raise options.input_pool or lower samples_per_query",
                field="samples_per_query",
            )
        if load.back_to_back:
            return None
        return Schedule("fixed", 1000.0 / load.interval_ms, samples_per_query=load.samples_per_query)

    def _bound_ms(self, load: LoadSettings) -> float | None:
        if load.back_to_back:
            return load.latency_bound_ms
        return load.latency_bound_ms or load.interval_ms
