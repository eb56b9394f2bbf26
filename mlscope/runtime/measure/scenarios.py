"""Scenarios after MLPerf LoadGen: how queries are issued, and what throughput means for each.

Owns the `Scenario` base (a template method: monitor, loop, summarise, judge), its
implementations `SingleStream` and `Offline`, the `Measurement` they return (one entry of a
result's `measurements`), and the registry of scenarios by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from mlscope.contract.errors import UserError
from mlscope.runtime.measure.loop import NS_PER_S, LoopResult, Timer, threaded_loop, timed_loop
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.measure.stats import LatencySummary, summarize
from mlscope.runtime.measure.validity import EnvironmentMonitor, Validity, judge

__all__ = ["SCENARIOS", "Measurement", "Offline", "Scenario", "SingleStream", "get_scenario"]


@dataclass(frozen=True)
class Measurement:
    """One scenario run at one batch size.

    Attributes:
        scenario: the scenario's NAME.
        batch_size: samples per batch.
        latency_ms: statistics of the per-batch latencies.
        throughput: samples per second, as the scenario defines it.
        validity: the verdict with its reasons.
        latencies_ns: every recorded latency, in run order.
        duration_s: wall time of the timed phase.
        stop_reason: why the timed loop ended ("stable" or "max_seconds").
        warmup_count: untimed iterations before it.
        environment: `EnvironmentMonitor.stop()`'s dict for the run.
        settings: the settings it ran with.
        starts_ns: when each latency's iteration started (perf_counter_ns), when recorded.
    """

    scenario: str
    batch_size: int
    latency_ms: LatencySummary
    throughput: float
    validity: Validity
    latencies_ns: npt.NDArray[np.int64]
    duration_s: float
    stop_reason: str
    warmup_count: int
    environment: dict[str, Any]
    settings: MeasureSettings
    starts_ns: npt.NDArray[np.int64] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Returns:
        The measurement as JSON-serialisable data, keys as in the result shape plus the raw
        latencies, duration, stop reason, warm-up count, environment and settings.
        """
        return {
            "scenario": self.scenario,
            "batch_size": self.batch_size,
            "latency_ms": self.latency_ms.to_dict(),
            "throughput": self.throughput,
            "validity": self.validity.to_dict(),
            "latencies_ns": [int(v) for v in self.latencies_ns.tolist()],
            "duration_s": self.duration_s,
            "stop_reason": self.stop_reason,
            "warmup_count": self.warmup_count,
            "environment": dict(self.environment),
            "settings": self.settings.to_dict(),
        }


class Scenario(ABC):
    """How queries are issued to a predictor; `run` is the same for every scenario.

    Subclasses supply the loop that issues the queries and the definition of throughput.
    """

    NAME: ClassVar[str]

    def run(
        self,
        predict: Callable[[Any], Any],
        batches: Sequence[Any],
        batch_size: int,
        settings: MeasureSettings,
        *,
        timer: Timer | None = None,
        on_progress: Callable[[float], None] | None = None,
        record_starts: bool = False,
    ) -> Measurement:
        """Measure `predict` on `batches` under this scenario.

        Args:
            predict: the inference function; its return value is ignored.
            batches: inputs of `batch_size` samples each, used in rotation.
            batch_size: samples per batch, for throughput.
            settings: warm-up, stopping rule, statistics and validity limits.
            timer: device timer replacing the host clock (e.g. CUDA events on a GPU).
            on_progress: called with the fraction of the minimum measurement done, in [0, 1].
            record_starts: also record when each inference started (for MODEL-level spans).

        Returns:
            The measurement, with statistics, throughput and validity verdict.

        Raises:
            UserError: batch_size is not a positive integer.
            ValueError: `batches` is empty.
            Exception: whatever `predict` or `timer` raises, unchanged.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UserError(
                f"batch_size={batch_size!r} is invalid: expected an integer ≥ 1", field="batch_size"
            )
        monitor = EnvironmentMonitor()
        monitor.start()
        loop = self._loop(
            predict, batches, settings, timer=timer, on_progress=on_progress, record_starts=record_starts
        )
        environment = monitor.stop()
        summary = summarize(loop.latencies_ns, settings)
        return Measurement(
            scenario=self.NAME,
            batch_size=batch_size,
            latency_ms=summary,
            throughput=self._throughput(loop, summary, batch_size),
            validity=judge(summary, loop, environment, settings),
            latencies_ns=loop.latencies_ns,
            duration_s=loop.wall_ns / NS_PER_S,
            stop_reason=loop.stop_reason,
            warmup_count=loop.warmup_count,
            environment=environment,
            settings=settings,
            starts_ns=loop.starts_ns,
        )

    @abstractmethod
    def _loop(
        self,
        predict: Callable[[Any], Any],
        batches: Sequence[Any],
        settings: MeasureSettings,
        *,
        timer: Timer | None,
        on_progress: Callable[[float], None] | None,
        record_starts: bool = False,
    ) -> LoopResult:
        """Issue the queries and record their latencies.

        Args:
            predict, batches, settings, timer, on_progress, record_starts: as for `run`.

        Returns:
            The timed loop's record.
        """

    @abstractmethod
    def _throughput(self, loop: LoopResult, summary: LatencySummary, batch_size: int) -> float:
        """Samples per second under this scenario's definition.

        Args:
            loop: the timed loop's record.
            summary: its latency summary.
            batch_size: samples per batch.

        Returns:
            Throughput in samples per second, finite.
        """


class SingleStream(Scenario):
    """One query at a time, each issued when the previous one returns: latency-bound.

    Throughput is batch_size / mean latency: what one stream of back-to-back queries sustains
    (0.0 if the mean latency is zero, i.e. too fast for the clock).
    """

    NAME: ClassVar[str] = "single_stream"

    def _loop(
        self,
        predict: Callable[[Any], Any],
        batches: Sequence[Any],
        settings: MeasureSettings,
        *,
        timer: Timer | None,
        on_progress: Callable[[float], None] | None,
        record_starts: bool = False,
    ) -> LoopResult:
        return timed_loop(
            predict, batches, settings, timer=timer, on_progress=on_progress, record_starts=record_starts
        )

    def _throughput(self, loop: LoopResult, summary: LatencySummary, batch_size: int) -> float:
        return batch_size / (summary.mean / 1000.0) if summary.mean > 0 else 0.0


class Offline(Scenario):
    """Batches issued back to back from `settings.concurrency` threads: throughput-bound.

    Throughput is every sample completed in the timed phase over its wall time, so it includes
    whatever the harness and the threads' contention cost; the latencies are those of each batch.
    """

    NAME: ClassVar[str] = "offline"

    def _loop(
        self,
        predict: Callable[[Any], Any],
        batches: Sequence[Any],
        settings: MeasureSettings,
        *,
        timer: Timer | None,
        on_progress: Callable[[float], None] | None,
        record_starts: bool = False,
    ) -> LoopResult:
        return threaded_loop(
            predict,
            batches,
            settings,
            settings.concurrency,
            timer=timer,
            on_progress=on_progress,
            record_starts=record_starts,
        )

    def _throughput(self, loop: LoopResult, summary: LatencySummary, batch_size: int) -> float:
        return loop.latencies_ns.size * batch_size / (max(loop.wall_ns, 1) / NS_PER_S)


SCENARIOS: dict[str, type[Scenario]] = {cls.NAME: cls for cls in (SingleStream, Offline)}


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
    except (KeyError, TypeError):
        known = ", ".join(sorted(SCENARIOS))
        raise UserError(f"unknown scenario {name!r}: expected one of {known}", field="scenario") from None
