"""A job's warm start (TrIMS): after the cold load and first inference, the model's weights go into
the machine's model store (unless an earlier evaluation put them there), the cold model is released,
and the model is loaded again from the store's mapping and run once. The warm model is the one the
evaluation then measures, so N predictor processes evaluating one model share one copy of its weights.

Its figures join the result's `cold_start` under `warm_*` keys, present only when measured:

    warm_load_ms             the store opened, the weights mapped, the model built around them
    warm_first_inference_ms  the warm model's first inference
    warm_source              "store" (another evaluation had published it) | "published" (this one did)
    warm_shared_mb           the entry's size in the store (weights; ONNX Runtime's pre-packed ones
                             too), shared by every process mapping it
    warm_read_mb             bytes this process read with read() while loading warm (Linux's
                             /proc/self/io rchar): how a warm start shows it read no weights file
    warm_publish_ms          finding the entry, or writing it when this evaluation published it
    warm_unavailable         why no warm start was measured (a framework without one, a full store)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlscope.contract.job import Job
from mlscope.contract.result import ColdStart
from mlscope.runtime.predictors.base import Predictor, PredictorError
from mlscope.runtime.predictors.capabilities import WarmStarts
from mlscope.runtime.trace.spans import Tracer

__all__ = ["read_chars", "warm_start"]

_MB = 2**20


def _ms(start_ns: int) -> float:
    return round((time.perf_counter_ns() - start_ns) / 1e6, 3)


def read_chars() -> int | None:
    """Bytes this process has read through read() and its kin (page faults on a mapping are not
    counted): Linux's /proc/self/io `rchar`; None where the system does not say."""
    try:
        with open("/proc/self/io") as io:
            for line in io:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def warm_start(
    cold: Predictor,
    fresh: Callable[[], Predictor],
    job: Job,
    first_batch: Callable[[Predictor], Any],
    enter: Callable[..., None],
    tracer: Tracer,
) -> tuple[Predictor, ColdStart]:
    """Measure the warm start of the loaded predictor `cold`, when the job has a model store.

    Args:
        cold: the predictor after its cold load and first inference.
        fresh: a new, unloaded predictor of the same model, framework, device and options.
        job: the job (its `model_store`: {"directory", "budget_mb"}; empty: no warm start).
        first_batch: a prepared first batch for a loaded predictor.
        enter: announces a phase (the job's phase tracker).
        tracer: the job's tracer.

    Returns:
        The predictor to measure (the warm one; `cold` when no warm start was measured, `cold` then
        still loaded) and the `cold_start` keys to add.

    Raises:
        UserError: the model is larger than the store's whole budget (field model_store_mb).
        PredictorError: the warm model could not be built from the store's entry.
    """
    if not job.model_store or not job.scenarios:  # nothing measured: no model worth sharing
        return cold, {}
    # Here, not at the top: every predictor job imports this module, few have a store, and the store
    # needs fcntl (POSIX only).
    from mlscope.runtime.model_store import ModelStore, ModelStoreBusy, entry_key

    variant = cold.warm_variant() if isinstance(cold, WarmStarts) else None
    if variant is None or not isinstance(cold, WarmStarts):
        return cold, {"warm_unavailable": f"{cold.NAME} has no warm start"}
    store = ModelStore(Path(job.model_store["directory"]), int(job.model_store["budget_mb"]) * _MB)
    manifest = cold.manifest
    key = entry_key(job.framework, manifest.sha256, cold.options.seed, variant, manifest.name)
    enter("publish")
    start = time.perf_counter_ns()
    with tracer.span("publish", entry=key):
        held = store.open(key)
        if held is None:
            description = {"model": manifest.name, "framework": job.framework, "variant": variant}
            try:
                held = store.publish(key, cold.weights_to_store(), description)
            except ModelStoreBusy as busy:
                return cold, {"warm_unavailable": str(busy)}
    publish_ms = _ms(start)
    figures: ColdStart = {
        "warm_source": "published" if held.published else "store",
        "warm_shared_mb": round(held.size_bytes / _MB, 3),
        "warm_publish_ms": publish_ms,
    }
    cold.close()  # the cold model's memory goes before the warm one is built

    warm = fresh()
    try:
        enter("warm_load")
        before = read_chars()
        start = time.perf_counter_ns()
        try:
            with tracer.span("warm_load", entry=key):
                mapped = store.open(key)
                if mapped is None:  # `held` keeps it referenced: only a removal by hand gets here
                    raise PredictorError(f"model store entry {key} vanished while referenced")
                try:
                    if not isinstance(warm, WarmStarts):  # the same class as `cold`, which has it
                        raise PredictorError(f"{warm.NAME} has no warm start")
                    warm.load_mapped(mapped)
                except BaseException:
                    mapped.close()
                    raise
            figures["warm_load_ms"] = _ms(start)
        finally:
            held.close()
        after = read_chars()
        if before is not None and after is not None:
            figures["warm_read_mb"] = round((after - before) / _MB, 3)

        enter("warm_first_inference")
        batch = first_batch(warm)
        start = time.perf_counter_ns()
        with tracer.span("warm_first_inference"):
            warm.predict(batch)
        figures["warm_first_inference_ms"] = _ms(start)
    except BaseException:
        warm.close()
        raise
    return warm, figures
