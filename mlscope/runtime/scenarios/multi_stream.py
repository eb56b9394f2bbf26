"""The multi_stream scenario: N samples every interval, or back to back (MLPerf LoadGen's
MultiStream)."""

from __future__ import annotations

from typing import ClassVar

from mlscope.contract.errors import UserError
from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure.generator import Schedule
from mlscope.runtime.scenarios.loaded import LoadScenario

__all__ = ["MultiStream"]


class MultiStream(LoadScenario):
    """Every `load.interval_ms` a query of `load.samples_per_query` samples is issued at once; the
    query's latency is its slowest sample's, and a query slower than the interval overran it. The
    percentile (LoadGen's 99th) is certified against `load.latency_bound_ms`, or else the interval.

    With `load.back_to_back` (LoadGen >= 1.0's MultiStream), each query is issued when the previous
    one completed (closed_loop); there is no interval, and the percentile is estimated (LoadGen's
    early stopping) unless `load.latency_bound_ms` bounds it.
    """

    NAME: ClassVar[str] = "multi_stream"

    def inputs_needed(self, load: LoadSettings) -> int:
        return load.samples_per_query

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
