"""The evaluation pipeline: check the request, record it, run it, store what came back.

    request → manifest + framework check → store (queued → running) → runner → predictor
            + scenarios → store (succeeded | failed)

Everything that can be the user's mistake is checked before anything is stored, so a bad request
leaves the store as it was.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mlscope.broker.tracing import export_spans
from mlscope.contract.errors import UserError
from mlscope.contract.job import Job
from mlscope.contract.manifest import Manifest
from mlscope.contract.request import EvaluationRequest
from mlscope.contract.settings import Settings
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.frameworks import check_available, check_runnable, get_framework
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.system import gpu_facts, system_id
from mlscope.runtime.trace.spans import TraceContext, Tracer
from mlscope.store import Store
from mlscope.workers.runners import get_runner

__all__ = ["PreparedEvaluation", "evaluate", "keep_spans", "prepare"]

Emit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class PreparedEvaluation:
    """A request that passed every check: its manifest and the framework version that will run it."""

    request: EvaluationRequest
    manifest: Manifest
    framework_version: str


def _check_device(device: str) -> None:
    if device == "cpu":
        return
    gpus = gpu_facts()
    index = int(device.partition(":")[2] or 0)
    if not gpus:
        raise UserError(f"device {device}: this machine has no NVIDIA GPU that NVML can see", field="device")
    if index >= len(gpus):
        raise UserError(
            f"device {device}: this machine has {len(gpus)} GPU(s), cuda:0..cuda:{len(gpus) - 1}",
            field="device",
        )


def prepare(
    request: EvaluationRequest, registry: ModelRegistry, settings: Settings | None = None
) -> PreparedEvaluation:
    """Check that the request can run here, with the runner it asks for.

    Raises:
        UserError: unknown model or framework, a framework the runner cannot run here (not installed,
            no environment or image) or of the wrong version, a device this machine lacks, bad
            measurement settings, an unknown runner.
    """
    framework = check_runnable(get_framework(request.framework))
    manifest = registry.get(request.model, request.framework)
    runner = get_runner(request.runner, settings)
    version = check_available(
        framework,
        manifest.framework.version,
        manifest.source.kind,
        version=runner.framework_version(framework),
        where=runner.where(framework),
    )
    MeasureSettings.from_dict(request.measure)
    _check_device(request.device)
    return PreparedEvaluation(request, manifest, version)


def evaluate(
    prepared: PreparedEvaluation,
    *,
    store: Store,
    settings: Settings,
    emit: Emit = lambda event: None,
    evaluation_id: str | None = None,
    system_extra: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    tracer: Tracer | None = None,
) -> dict[str, Any]:
    """Run a prepared evaluation to its end and return the stored result.

    A job that fails is stored as failed with its error; only an interrupt (Ctrl-C) propagates,
    after the evaluation is marked cancelled.

    Args:
        evaluation_id: the id to store it under; an evaluation already recorded with this id (by the
            api, or by an earlier delivery of the same job) is continued, not duplicated.
        system_extra: facts added to the system description before it is stored (a farm worker adds
            its agent id and capabilities, which then count in the system's id).
        cancel: set it to end the running job (a farm worker does when the evaluation is cancelled).
        tracer: the caller's tracer, whose open span the predictor's spans hang under (a farm
            worker's task span); None starts a trace of its own at the request's trace_level,
            rooted in a span "run" of this process.
    """
    if tracer is not None:
        return _evaluate(prepared, store, settings, emit, evaluation_id, system_extra, cancel, tracer)
    tracer = Tracer(prepared.request.trace_level)
    with tracer.span("run", **{"mlscope.process": "cli"}):
        result = _evaluate(prepared, store, settings, emit, evaluation_id, system_extra, cancel, tracer)
    keep_spans(store, settings, result["id"], tracer.drain())
    return result


def keep_spans(store: Store, settings: Settings, evaluation_id: str, spans: list[dict[str, Any]]) -> None:
    """Store an evaluation's spans and, when MLSCOPE_OTLP_ENDPOINT is set, send them over OTLP."""
    if not spans:
        return
    store.save_spans(evaluation_id, spans)
    export_spans(settings, spans)


def _evaluate(
    prepared: PreparedEvaluation,
    store: Store,
    settings: Settings,
    emit: Emit,
    evaluation_id: str | None,
    system_extra: Mapping[str, Any] | None,
    cancel: threading.Event | None,
    tracer: Tracer,
) -> dict[str, Any]:
    request, manifest = prepared.request, prepared.manifest
    traced = tracer.enabled("APPLICATION")
    evaluation_id = store.create_evaluation(
        id=evaluation_id,
        model={"name": manifest.name, "version": manifest.version, "manifest_sha256": manifest.sha256},
        manifest=manifest.to_dict(),
        framework={"name": request.framework, "version": prepared.framework_version},
        runner=request.runner,
        device=request.device,
        request=request.to_dict(),
        trace_level=request.trace_level,
        trace_id=tracer.trace_id if traced else None,
    )
    emit({"event": "created", "id": evaluation_id})
    store.start_evaluation(evaluation_id)
    job = Job(
        evaluation_id=evaluation_id,
        manifest=manifest.to_dict(),
        origin=manifest.origin,
        framework=request.framework,
        device=request.device,
        batch_sizes=request.batch_sizes,
        scenarios=request.scenarios,
        measure=dict(request.measure),
        options=dict(request.options),
        cache_dir=str(settings.cache_dir),
        trace_level=request.trace_level,
        traceparent=TraceContext(tracer.trace_id, tracer.current_id).traceparent() if traced else "",
    )
    try:
        outcome = get_runner(request.runner, settings).run(
            job, emit, timeout_s=request.timeout_s, memory_limit_mb=request.memory_limit_mb, cancel=cancel
        )
    except KeyboardInterrupt:
        store.cancel_evaluation(evaluation_id)
        raise
    with tracer.span("store", status="succeeded" if outcome.result is not None else "failed"):
        if outcome.result is not None:
            result = outcome.result
            predictor_spans = result.get("trace", {}).get("spans", [])
            system = dict(result["system"])
            if system_extra:
                system.update(system_extra)
                system["id"] = system_id(system)
            store.finish_evaluation(
                evaluation_id,
                system=system,
                framework={"name": request.framework, **result["framework"]},
                cold_start=result["cold_start"],
                measurements=result["measurements"],
            )
        else:
            assert outcome.error is not None
            predictor_spans = outcome.spans
            store.fail_evaluation(evaluation_id, error=outcome.error)
    keep_spans(store, settings, evaluation_id, [*predictor_spans, *tracer.drain()])
    return store.get_evaluation(evaluation_id)
