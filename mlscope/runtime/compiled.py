"""A compiled model's extra figures (`options.compile`, docs/frameworks.md): its compile timed apart
from its first inference and its measurements, and the graphs compiled while a point was measured.

    load ─▶ compile (batch size 1) = cold_start.compile_ms ─▶ first inference ─▶ ...
    each later batch size: compile = its measurements' compile_ms ─▶ warm-up ─▶ timed loop
                           graphs compiled during warm-up and timed loop = recompiles

A compile inside the timed loop would be timed as an inference: the model is compiled for each batch
size before it is measured, and a point that compiled anyway says so among its validity reasons.
"""

from __future__ import annotations

import time
from typing import Any

from mlscope.contract.result import ColdStart, ResultMeasurement
from mlscope.runtime.predictors import Predictor
from mlscope.runtime.trace.spans import Tracer

__all__ = ["cold_start_figures", "compile_timed", "note_recompiles"]


def compile_timed(predictor: Predictor, batch: Any, tracer: Tracer, batch_size: int) -> float | None:
    """Compile the loaded model for `batch` (`Predictor.compile`), in a `compile` span: its wall time
    in milliseconds, or None when the predictor compiles nothing."""
    if predictor.compilations() is None:
        return None
    start = time.perf_counter_ns()
    with tracer.span("compile", batch_size=batch_size):
        compiled = predictor.compile(batch)
    return round((time.perf_counter_ns() - start) / 1e6, 3) if compiled else None


def cold_start_figures(predictor: Predictor, compile_ms: float | None) -> ColdStart:
    """The cold start's compile figures: `compile_ms` and `compile_cached`, or nothing for a model
    that was not compiled."""
    if compile_ms is None:
        return {}
    return {"compile_ms": compile_ms, "compile_cached": bool(predictor.compile_cached())}


def note_recompiles(measurement: ResultMeasurement, predictor: Predictor, before: int | None) -> None:
    """Record on `measurement` the graphs compiled since `before` (`Predictor.compilations` when the
    point began), and say so among its validity reasons when there were any."""
    after = predictor.compilations()
    if before is None or after is None:
        return
    recompiles = after - before
    measurement["recompiles"] = recompiles
    if recompiles:
        measurement["validity"]["reasons"].append(
            f"recompiled {recompiles} time{'s' if recompiles > 1 else ''} while measured (warm-up or timed "
            "loop): a compile in the timed loop is in the latencies"
        )
