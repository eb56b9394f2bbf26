"""The traced parts of an evaluation beyond its phases: MODEL spans from the measured pass, and the
passes that run after it, one per deeper level (FRAMEWORK layers, LIBRARY operators and kernels,
HARDWARE metrics), so that no latency figure ever comes from a profiled inference.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.measure.scenario_base import Measurement
from mlscope.runtime.predictors.base import Predictor
from mlscope.runtime.predictors.capabilities import TracesPasses
from mlscope.runtime.trace.hardware import HardwareSampler, summarize_samples
from mlscope.runtime.trace.profiled import ProfiledPass, pass_attributes
from mlscope.runtime.trace.spans import Tracer

__all__ = ["PROFILED_LEVELS", "add_model_spans", "run_traced_passes"]

# The levels a framework's profiler serves, in the order their passes run.
PROFILED_LEVELS = ("FRAMEWORK", "LIBRARY")


def add_model_spans(
    tracer: Tracer, measurement: Measurement, *, parent_id: str, max_spans: int
) -> dict[str, Any]:
    """One MODEL span "inference" per timed inference of a measurement, from the start times and
    latencies the timed loop recorded (no work on the timed path beyond one store per iteration).

    A run longer than `max_spans` inferences keeps every k-th one.

    Returns:
        Attributes for the measurement's span: how many inference spans were kept, and k.
    """
    starts, latencies = measurement.starts_ns, measurement.latencies_ns
    if not tracer.enabled("MODEL") or starts is None:
        return {}
    count = int(latencies.size)
    every = max(1, math.ceil(count / max_spans))
    from_perf = tracer.clock.from_perf
    base = {"pass": "MODEL", "scenario": measurement.scenario, "batch_size": measurement.batch_size}
    for index in range(0, count, every):
        start = from_perf(int(starts[index]))
        tracer.add(
            "inference",
            "MODEL",
            start,
            start + int(latencies[index]),
            parent_id=parent_id,
            attributes={**base, "iteration": index},
        )
    return {"inference_spans": len(range(0, count, every)), "inference_spans_every": every}


def run_traced_passes(
    predictor: Predictor,
    batches: Callable[[int], Any],
    batch_sizes: Sequence[int],
    tracer: Tracer,
    settings: MeasureSettings,
    gpu_indices: Sequence[int] = (),
) -> None:
    """Run the passes the tracer's level asks for, after the measured pass, each as an APPLICATION
    span "profile <LEVEL>" with attributes {"pass", "batch_size"}.

    Args:
        predictor: the loaded predictor.
        batches: makes one prepared batch of the given size.
        batch_sizes: every batch size is profiled.
        tracer: where the spans go.
        settings: trace_warmup, trace_iterations, hardware_seconds, hardware_interval_s.
        gpu_indices: the GPUs the predictor runs on, sampled in the HARDWARE pass.
    """
    for level in PROFILED_LEVELS:
        if not tracer.enabled(level):
            continue
        for batch_size in batch_sizes:
            batch = batches(batch_size)
            with tracer.span(f"profile {level}", **pass_attributes(level, batch_size)) as attributes:
                assert attributes is not None
                profiled = ProfiledPass(
                    level,
                    tracer,
                    parent_id=tracer.current_id,
                    batch_size=batch_size,
                    iterations=settings.trace_iterations,
                    warmup=settings.trace_warmup,
                )
                supported = isinstance(predictor, TracesPasses) and predictor.trace_pass(profiled, batch)
                attributes["supported"] = supported
                if not supported:
                    why = predictor.NO_PROFILER.get(level)
                    note = f"{predictor.NAME} has no {level} profiler in mlscope"
                    attributes["note"] = f"{note}: {why}" if why else note
    if not tracer.enabled("HARDWARE"):
        return
    for batch_size in batch_sizes:
        batch = batches(batch_size)
        common = pass_attributes("HARDWARE", batch_size)
        with tracer.span("profile HARDWARE", **common) as attributes:
            assert attributes is not None
            first = len(tracer.spans)
            inferences = 0
            with HardwareSampler(
                tracer,
                parent_id=tracer.current_id,
                interval_s=settings.hardware_interval_s,
                gpu_indices=gpu_indices,
                attributes=common,
            ):
                deadline = time.perf_counter() + settings.hardware_seconds
                while time.perf_counter() < deadline:
                    predictor.predict(batch)
                    inferences += 1
            attributes["inferences"] = inferences
            samples = [span for span in tracer.spans[first:] if span["level"] == "HARDWARE"]
            attributes["hardware"] = summarize_samples(samples)
