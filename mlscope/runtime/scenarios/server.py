"""The server scenario: Poisson arrivals at a target rate, or a search for the highest rate that
meets a latency bound (MLPerf LoadGen's Server)."""

from __future__ import annotations

from typing import Any, ClassVar

from mlscope.contract.errors import UserError
from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure.generator import Schedule
from mlscope.runtime.measure.scenario_base import Outcome, RunContext
from mlscope.runtime.measure.search import search_max_qps
from mlscope.runtime.scenarios.loaded import LoadScenario

__all__ = ["Server"]


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

    def phase_detail(self, load: LoadSettings) -> dict[str, Any]:
        return {"qps": load.qps} if load.qps is not None else {}

    def _schedule(self, load: LoadSettings, inputs: int) -> Schedule:
        if load.qps is None:
            raise UserError("the server scenario needs a target rate: qps (e.g. --qps 20)", field="qps")
        shard = load.part
        if shard is None:
            return Schedule("poisson", load.qps, seed=load.seed)
        return Schedule("poisson", load.qps, seed=load.seed, part=shard.index, parts=shard.count)

    def _bound_ms(self, load: LoadSettings) -> float | None:
        return load.latency_bound_ms
