"""Tracing in the predictor runtime: trace levels, W3C trace context, the span recorder, the profiled
passes every framework runs (`profiled`, `passes`, `layers`) and the HARDWARE sampler. Each
framework's own profiler converter lives in its sub-package of `mlscope.runtime.predictors`.

Imports no framework, no Celery, Flask or database code: it runs inside predictor processes and
containers. The OpenTelemetry SDK (export over OTLP) lives with the worker and the api.
"""

from mlscope.runtime.trace.spans import (
    LEVEL_RANK,
    Clock,
    TraceContext,
    Tracer,
    level_enabled,
    nest_by_containment,
    new_span_id,
    new_trace_id,
)

__all__ = [
    "LEVEL_RANK",
    "Clock",
    "TraceContext",
    "Tracer",
    "level_enabled",
    "nest_by_containment",
    "new_span_id",
    "new_trace_id",
]
