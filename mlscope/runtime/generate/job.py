"""A generate job in the predictor process: the engine loaded (the load phase), one request timed
(the first inference), then the measured requests (the measure phase).

The engine is the framework's (`Predictor.generation_engine`): a model generating in this process,
or the endpoint framework's HTTP client. Either way the figures come from `driver`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, cast

from mlscope.contract.events import Emit, ProbeEvent
from mlscope.contract.generation import GenerationSettings
from mlscope.contract.interactive import interactive_caps
from mlscope.contract.job import Job
from mlscope.contract.load import LoadSettings
from mlscope.contract.result import ColdStart, ResultMeasurement
from mlscope.runtime.generate.driver import run_generate
from mlscope.runtime.generate.preflight import check_served, first_request
from mlscope.runtime.generate.records import GenerateEngine, GenerationRequest, RequestRecord
from mlscope.runtime.generate.served import add_served
from mlscope.runtime.generate.server_metrics import MetricsSampler
from mlscope.runtime.measure.scenario_base import JobRun
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.predictors.base import Predictor, PredictorError
from mlscope.runtime.predictors.capabilities import Generates
from mlscope.runtime.trace.spans import Tracer

__all__ = ["run_generate_job"]


def run_generate_job(
    predictor: Predictor,
    job: Job,
    measure: MeasureSettings,
    enter: Callable[..., None],
    emit: Emit,
    tracer: Tracer,
) -> JobRun:
    """Load the engine, time a first request, measure.

    Args:
        enter: announces a phase (the job's phase tracker: a failure names the phase).
        emit: sends an event to whoever runs the job (progress, probes, the measurement).

    Raises:
        PredictorError: the engine cannot be made (a model that cannot generate, an endpoint that
            cannot be reached).
        UserError: a request does not fit the model's context; the endpoint does not serve the api.
    """
    settings = GenerationSettings.from_dict(job.generation)
    load = LoadSettings.from_dict(job.load)
    enter("load")
    start = time.perf_counter_ns()
    with tracer.span("load", generate=True):
        if not isinstance(predictor, Generates):
            raise PredictorError(
                f"{predictor.NAME} cannot run the generate scenario: it needs a framework that "
                "generates tokens in process (pytorch, for Hugging Face decoder and encoder-decoder "
                "models) or an endpoint (--endpoint URL)"
            )
        engine = predictor.generation_engine(settings)
    load_ms = round((time.perf_counter_ns() - start) / 1e6, 3)
    try:
        enter("first_inference")
        with tracer.span("first_inference", batch_size=1):
            first = engine.generate(first_request(settings, load.seed))
        check_served(first, settings)
        cold_start: ColdStart = {"load_ms": load_ms, "first_inference_ms": None}
        if first.succeeded:
            cold_start["first_inference_ms"] = round((first.end_ns - first.start_ns) / 1e6, 3)
        if first.succeeded and first.token_ns:
            cold_start["first_token_ms"] = round((first.token_ns[0] - first.start_ns) / 1e6, 3)
        elif not first.succeeded:
            # counted, not fatal: the measured requests say how often it happens
            cold_start["first_inference_error"] = first.error
        qps = {"qps": load.qps} if load.qps is not None else {}
        enter("measure", scenario="generate", batch_size=1, **qps)

        def progress(fraction: float) -> None:
            emit(
                {"event": "progress", "scenario": "generate", "batch_size": 1, "fraction": round(fraction, 3)}
            )

        def probe(point: dict[str, Any]) -> None:
            emit(cast(ProbeEvent, {"event": "probe", "scenario": "generate", "batch_size": 1, **point}))

        sampler, counted = _sampled(engine, settings)
        with tracer.span("predict", scenario="generate", batch_size=1):
            try:
                measurement = run_generate(
                    counted,
                    settings,
                    load,
                    measure,
                    on_progress=progress,
                    on_probe=probe,
                    remote=settings.endpoint is not None,
                    on_measure=sampler.start if sampler is not None else None,
                )
            finally:
                metrics = sampler.stop() if sampler is not None else None
        if metrics is not None:
            measurement["generation"]["server_metrics"] = metrics
        if settings.endpoint is not None:
            measurement["generation"]["endpoint"] = settings.endpoint
            measurement["generation"]["api"] = settings.api
        measurement["generation"]["via"] = "endpoint" if settings.endpoint is not None else "in_process"
        if settings.preset is not None:
            measurement["generation"]["preset"] = _preset_record(job, settings, load)
        if settings.compare_served:
            enter("serve")
            with tracer.span("serve"):
                add_served(measurement, engine, settings, load, measure, predictor.device)
        emit(
            {
                "event": "measurement",
                "scenario": "generate",
                "batch_size": 1,
                "latency_ms": measurement["latency_ms"],
                "throughput": measurement["throughput"],
                "validity": measurement["validity"],
                "load": measurement.get("load"),
                "generation": measurement["generation"],
            }
        )
        return JobRun(engine.describe(), cold_start, [cast(ResultMeasurement, measurement)])
    finally:
        engine.close()


class _Counted:
    """An engine whose requests in flight are counted (what a metrics sample is read beside)."""

    def __init__(self, engine: GenerateEngine) -> None:
        self.engine = engine
        self.max_context = engine.max_context
        self.in_flight = 0
        self._lock = threading.Lock()

    def generate(self, request: GenerationRequest) -> RequestRecord:
        with self._lock:
            self.in_flight += 1
        try:
            return self.engine.generate(request)
        finally:
            with self._lock:
                self.in_flight -= 1

    def describe(self) -> dict[str, Any]:
        return self.engine.describe()

    def close(self) -> None:
        self.engine.close()


def _sampled(
    engine: GenerateEngine, settings: GenerationSettings
) -> tuple[MetricsSampler | None, GenerateEngine]:
    """With settings.server_metrics, a sampler of the server's metrics and the engine counted for
    it; else no sampler and the engine as it is."""
    if settings.server_metrics is None:
        return None, engine
    counted = _Counted(engine)
    sampler = MetricsSampler(
        settings.server_metrics, settings.server_metrics_interval_s, lambda: counted.in_flight
    )
    return sampler, counted


def _preset_record(job: Job, settings: GenerationSettings, load: LoadSettings) -> dict[str, Any]:
    """What the measurement records of its preset: the name, the caps held and at which percentile,
    and where the caps came from (MLPerf's table under the benchmark's model name, or the slo)."""
    found = interactive_caps(str(job.manifest.get("name") or ""), settings.endpoint_model)
    from_table = found is not None and found[1] == settings.slo
    return {
        "name": settings.preset,
        "caps": dict(settings.slo or {}),
        "percentile": load.percentile_for("generate"),
        "caps_from": f"mlperf:{found[0]}" if from_table and found is not None else "slo",
    }
