"""The scenario template every scenario follows, and the `Measurement` it returns.

Owns `Scenario` (a template method: monitor the machine, issue the queries, summarise, certify the
scenario's percentile, judge; and the hooks by which a scenario says what else it needs of a job),
`RunContext` (what one run of a scenario is given: every scenario's hooks take it whole, not its
parts one keyword each), `Measurement` (one entry of a result's `measurements`) and `JobRun` (what a
scenario that runs a whole job itself returns). The scenarios themselves live in
`mlscope.runtime.scenarios`, one module each.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from mlscope.contract.errors import UserError
from mlscope.contract.load import LoadSettings
from mlscope.contract.result import ColdStart, Energy, ResultMeasurement
from mlscope.contract.result import ResultMeasurement as MeasurementShape
from mlscope.runtime.energy import EnergyMeter, energy_section
from mlscope.runtime.measure.certify import estimate_percentile, min_queries
from mlscope.runtime.measure.load_report import certificate_reason
from mlscope.runtime.measure.loop import NS_PER_S, LoopResult, Timer
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.measure.stats import LatencySummary, summarize
from mlscope.runtime.measure.validity import EnvironmentMonitor, Validity, judge

if TYPE_CHECKING:
    from mlscope.contract.events import Emit
    from mlscope.contract.job import Job
    from mlscope.runtime.frameworks import FrameworkSpec
    from mlscope.runtime.predictors.base import Predictor
    from mlscope.runtime.trace.spans import Tracer

__all__ = [
    "JobRun",
    "Measurement",
    "OnProbe",
    "Outcome",
    "RunContext",
    "Scenario",
    "WholeJob",
    "measurement_of",
]

OnProbe = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Measurement:
    """One scenario run at one batch size.

    Attributes:
        scenario: the scenario's NAME.
        batch_size: samples per batch.
        latency_ms: statistics of the per-query latencies.
        throughput: samples per second, as the scenario defines it.
        validity: the verdict with its reasons.
        latencies_ns: every recorded latency, in run order.
        duration_s: wall time of the timed phase.
        stop_reason: why the timed loop ended ("stable", "max_seconds", "certified", ...).
        warmup_count: untimed iterations before it.
        environment: `EnvironmentMonitor.stop()`'s dict for the run.
        settings: the settings it ran with.
        starts_ns: when each latency's query started (perf_counter_ns; under load, when it was
            due), when recorded.
        load: the `load` section: the certified percentile, and for a load generator's runs what
            it issued and how well (see load_report).
        energy: the `energy` section (runtime.energy), None when no meter was given.
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
    load: dict[str, Any] | None = None
    energy: Energy | None = None

    def to_dict(self) -> MeasurementShape:
        """Returns:
        The measurement as JSON-serialisable data, keys as in the result shape plus the raw
        latencies, duration, stop reason, warm-up count, environment and settings.
        """
        data: MeasurementShape = {
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
        if self.load is not None:
            data["load"] = self.load
        if self.energy is not None:
            data["energy"] = self.energy
        return data


@dataclass(frozen=True)
class RunContext:
    """What one run of a scenario is given (the arguments of `Scenario.run`, which makes it).

    Attributes:
        predict: the inference function; its return value is ignored.
        batches: inputs of `batch_size` samples each, used in rotation.
        batch_size: samples per batch, for throughput.
        settings: warm-up, stopping rule, statistics and validity limits.
        load: how a load generator issues queries, and the percentile to certify.
        timer: device timer replacing the host clock (e.g. CUDA events on a GPU).
        on_progress: called with the fraction of the minimum measurement done, in [0, 1].
        record_starts: also record when each inference started (for MODEL-level spans).
        on_probe: called with each probe of a max-QPS search.
    """

    predict: Callable[[Any], Any]
    batches: Sequence[Any]
    batch_size: int
    settings: MeasureSettings
    load: LoadSettings
    timer: Timer | None = None
    on_progress: Callable[[float], None] | None = None
    record_starts: bool = False
    on_probe: OnProbe | None = None


@dataclass
class Outcome:
    """What a scenario's queries produced, before the template summarises and judges it.

    Attributes:
        loop: the latencies and timing of the run.
        load: the measurement's `load` section.
        throughput: samples per second, None for the scenario's `_throughput`.
        invalid, warnings: the scenario's own findings, beside the template's.
        judge_stability: whether an unstable median invalidates the run (not under a load
            generator, whose runs end on a certificate instead).
    """

    loop: LoopResult
    load: dict[str, Any]
    throughput: float | None = None
    invalid: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    judge_stability: bool = True


@dataclass(frozen=True)
class WholeJob:
    """What a scenario that runs the whole job itself is given (`Scenario.run_job`).

    Attributes:
        predictor: the job's predictor, its model fetched, not loaded.
        job: the predictor job (its `load`, `generation` and other sections).
        settings: the job's measurement settings.
        enter: announces a phase (a failure names the phase).
        emit: sends an event to whoever runs the job (progress, probes, measurements).
        tracer: the job's tracer.
    """

    predictor: Predictor
    job: Job
    settings: MeasureSettings
    enter: Callable[..., None]
    emit: Emit
    tracer: Tracer


@dataclass
class JobRun:
    """What a scenario that runs the whole job itself (`Scenario.RUNS_JOB`) adds to the result.

    Attributes:
        framework: the result's `framework` section (what ran: the engine's description).
        cold_start: the job's cold-start phases after import and fetch (load, first inference).
        measurements: the result's measurements, each announced already as a `measurement` event.
    """

    framework: dict[str, Any]
    cold_start: ColdStart
    measurements: list[ResultMeasurement]


class Scenario(ABC):
    """How queries are issued to a predictor; `run` is the same for every scenario.

    Subclasses supply `_outcome` (issue the queries) and, unless the outcome carries one, the
    definition of throughput. The template certifies the scenario's percentile by LoadGen's early
    stopping rule for back-to-back scenarios, and runs their loop until it can.

    A scenario also says what else it asks of a job, so that nothing above it names a scenario:
    `runs_on` (which frameworks can serve it), `inputs_needed` (distinct inputs per query),
    `phase_detail` (what its measure phase announces). One whose queries are not `predict` on
    prepared batches (the generate scenario's requests to a generation engine) sets `RUNS_JOB` and
    implements `run_job`, which replaces the predictor's load, first inference and measure phases.
    """

    NAME: ClassVar[str]
    # True: `run_job` runs the whole job after the fetch phase; `run` does not apply.
    RUNS_JOB: ClassVar[bool] = False
    # What a framework needs to serve this scenario, for the refusal when none installed does.
    NEEDS: ClassVar[str] = ""

    def runs_on(self, framework: FrameworkSpec) -> bool:
        """Whether a framework's predictor can serve this scenario, read from its registration
        without importing it (a run that names no framework uses those that can).

        Args:
            framework: the framework's registration.
        """
        return True

    def inputs_needed(self, load: LoadSettings) -> int:
        """How many distinct inputs one query needs (the job prepares at least that many)."""
        return 1

    def phase_detail(self, load: LoadSettings) -> dict[str, Any]:
        """What the measure phase announces besides the scenario and batch size (e.g. a target rate)."""
        return {}

    def run_job(self, whole: WholeJob) -> JobRun:
        """Run the whole job after the fetch phase (a scenario with `RUNS_JOB` only)."""
        raise NotImplementedError(f"the {self.NAME} scenario issues queries to predict; it runs no job")

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
        load: LoadSettings | None = None,
        on_probe: OnProbe | None = None,
        energy: EnergyMeter | None = None,
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
            load: how a load generator issues queries, and the percentile to certify.
            on_probe: called with each probe of a max-QPS search.
            energy: the counter read before and after the queries (warm-up included: the window the
                environment monitor samples), for the measurement's `energy` section.

        Returns:
            The measurement, with statistics, throughput, load section and validity verdict.

        Raises:
            UserError: batch_size is not a positive integer, or the load cannot be issued.
            ValueError: `batches` is empty.
            Exception: whatever `predict` or `timer` raises, unchanged.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UserError(
                f"batch_size={batch_size!r} is invalid: expected an integer ≥ 1", field="batch_size"
            )
        load = load or LoadSettings()
        monitor = EnvironmentMonitor()
        monitor.start()
        energy_before = energy.read() if energy is not None else ()
        outcome = self._outcome(
            RunContext(
                predict, batches, batch_size, settings, load, timer, on_progress, record_starts, on_probe
            )
        )
        energy_after = energy.read() if energy is not None else ()
        environment = monitor.stop()
        measurement = measurement_of(self.NAME, outcome, batch_size, settings, environment, self._throughput)
        if energy is None:
            return measurement
        return replace(measurement, energy=_energy(energy, energy_before, energy_after, outcome, batch_size))

    def _outcome(self, run: RunContext) -> Outcome:
        """Back-to-back scenarios: the loop runs at least as many queries as LoadGen's early
        stopping needs to estimate the scenario's percentile, and the estimate is certified."""
        percentile = run.load.percentile_for(self.NAME)
        needed = min_queries(percentile / 100, run.load.confidence)
        loop = self._loop(
            replace(run, settings=replace(run.settings, min_count=max(run.settings.min_count, needed)))
        )
        certificate = estimate_percentile(loop.latencies_ns, percentile, run.load.confidence)
        reason = certificate_reason(certificate)
        return Outcome(loop, {"certified": certificate.to_dict()}, invalid=[reason] if reason else [])

    def _loop(self, run: RunContext) -> LoopResult:
        """Issue the queries back to back and record their latencies (back-to-back scenarios).

        Args:
            run: the run's inputs; its settings' min_count already covers the certificate.

        Returns:
            The timed loop's record.
        """
        raise NotImplementedError(f"{type(self).__name__} issues its queries in _outcome")

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


def measurement_of(
    scenario: str,
    outcome: Outcome,
    batch_size: int,
    settings: MeasureSettings,
    environment: dict[str, Any],
    throughput_of: Callable[[LoopResult, LatencySummary, int], float] | None = None,
) -> Measurement:
    """The measurement an outcome makes: its latencies summarised and judged in `environment`;
    its throughput the outcome's own, else `throughput_of`'s (a merge of a split load's parts
    makes one from their merged outcome, as a scenario's run does from its own)."""
    loop = outcome.loop
    summary = summarize(loop.latencies_ns, settings)
    validity = judge(
        summary,
        loop,
        environment,
        settings,
        judge_stability=outcome.judge_stability,
        invalid=outcome.invalid,
        warnings=outcome.warnings,
    )
    throughput = outcome.throughput
    if throughput is None:
        assert throughput_of is not None, "an outcome without a throughput needs its scenario's"
        throughput = throughput_of(loop, summary, batch_size)
    return Measurement(
        scenario=scenario,
        batch_size=batch_size,
        latency_ms=summary,
        throughput=throughput,
        validity=validity,
        latencies_ns=loop.latencies_ns,
        duration_s=loop.wall_ns / NS_PER_S,
        stop_reason=loop.stop_reason,
        warmup_count=loop.warmup_count,
        environment=environment,
        settings=settings,
        starts_ns=loop.starts_ns,
        load=outcome.load,
    )


def _energy(
    meter: EnergyMeter, before: tuple[int, ...], after: tuple[int, ...], outcome: Outcome, batch_size: int
) -> Energy:
    """The measurement's energy section: the counters' difference over every sample issued in the
    window, warm-up included (an inference is one sample)."""
    if "search" in outcome.load:
        # Its window holds every probe of the search, each at another rate: no one rate's figure.
        return {"unavailable": "a max-QPS search runs many rates; energy is measured at a fixed rate"}
    loop = outcome.loop
    # A multi_stream latency is one query of several samples.
    per_query = int(outcome.load.get("samples_per_query") or 1)
    samples = (int(loop.latencies_ns.size) + loop.warmup_count) * per_query * batch_size
    return energy_section(meter.joules_between(before, after), samples, meter.SOURCE)
