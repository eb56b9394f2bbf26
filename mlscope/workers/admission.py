"""Admission: the one way a request becomes a job. The CLI (`mlscope run`), the HTTP API (a single
submission or each job of a batch) and a farm worker taking a job off its queue all call `admit`;
nothing else validates a request, resolves its model or builds the stored record and the predictor's
job from it.

    request document ─ parse_request ─▶ EvaluationRequest ─ framework, manifest, measure settings
        (+ here: the runner's framework version, the device) ─▶ Admission ─▶ record() / job()
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.job import Job
from mlscope.contract.manifest import Manifest
from mlscope.contract.request import EvaluationRequest, parse_request
from mlscope.contract.settings import Settings
from mlscope.registry.models import ModelRegistry
from mlscope.registry.references import ModelOptions
from mlscope.runtime.frameworks import check_available, check_runnable, get_framework
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.system import gpu_facts
from mlscope.workers.runners import get_runner

__all__ = ["Admission", "admit", "check_measure"]


@dataclass(frozen=True)
class Admission:
    """A request that passed every check, with what it resolved to.

    Attributes:
        request: the validated request.
        manifest: the manifest its model and framework resolved to.
        framework_version: the version that will run it, where that is known (admitted here);
            None when admitted by a farm's api, which cannot know the worker's machine.
    """

    request: EvaluationRequest
    manifest: Manifest
    framework_version: str | None = None

    def record(self) -> dict[str, Any]:
        """The fields of the evaluation as first stored (`Store.create_evaluation`'s arguments)."""
        manifest, request = self.manifest, self.request
        return {
            "model": {"name": manifest.name, "version": manifest.version, "manifest_sha256": manifest.sha256},
            "manifest": manifest.to_dict(),
            "framework": {"name": request.framework, "version": self.framework_version},
            "runner": request.runner,
            "device": request.device,
            "request": request.to_dict(),
            "trace_level": request.trace_level,
        }

    def job(self, evaluation_id: str, *, cache_dir: str, traceparent: str = "") -> Job:
        """What the predictor process is told to do for the stored evaluation `evaluation_id`."""
        return Job.from_request(
            self.request,
            evaluation_id=evaluation_id,
            manifest=self.manifest.to_dict(),
            origin=self.manifest.origin,
            cache_dir=cache_dir,
            traceparent=traceparent,
        )


def admit(
    request: EvaluationRequest | Mapping[str, Any],
    models: ModelRegistry,
    *,
    here: Settings | None = None,
) -> Admission:
    """Check a request completely, before anything is stored.

    Args:
        request: a validated request, or a request document (validated here with the contract's
            schema: HTTP bodies and CLI options arrive as documents).
        models: where the model name resolves to a manifest.
        here: this machine's settings when the evaluation will run here (the CLI, a worker taking
            a job): the requested runner must then be able to run the framework at the manifest's
            version, and the device must exist. None for a farm's api, which cannot know the
            worker's machine; the worker admits the job again when it takes it.

    Returns:
        The admission: request, manifest and (here) the framework version that will run it.

    Raises:
        UserError: naming the field: an invalid document (`batch_sizes.0`, ...), an unknown or
            unrunnable framework (`framework`), an unknown model or one without a manifest for the
            framework (`model`, with suggestions), a bad measurement setting (`measure.<name>`),
            and here: a framework the runner cannot run (not installed, no environment or image,
            the wrong version), an unknown runner, a device this machine lacks (`device`).
    """
    if not isinstance(request, EvaluationRequest):
        request = parse_request(dict(request))
    framework = check_runnable(get_framework(request.framework))
    manifest = models.get(request.model, request.framework, ModelOptions.from_dict(request.model_options))
    _check_fixed_batch(manifest, request.batch_sizes)
    check_measure(request.measure)
    if here is None:
        return Admission(request, manifest)
    runner = get_runner(request.runner, here)
    version = check_available(
        framework,
        manifest.framework.version,
        manifest.source.kind,
        version=runner.framework_version(framework),
        where=runner.where(framework),
    )
    _check_device(request.device)
    return Admission(request, manifest, version)


def _check_fixed_batch(manifest: Manifest, batch_sizes: tuple[int, ...]) -> None:
    """A graph exported with a fixed batch axis runs at that batch size only."""
    fixed = manifest.attributes.get("fixed_batch_size")
    if isinstance(fixed, int) and set(batch_sizes) != {fixed}:
        raise UserError(
            f"{manifest.name}: the graph's batch axis is fixed at {fixed}; measure it with --batch-sizes "
            f"{fixed} (or export it with a dynamic batch axis)",
            field="batch_sizes",
        )


def check_measure(measure: Mapping[str, Any]) -> MeasureSettings:
    """The measurement settings a request names, checked by the predictor runtime's own rules.

    Raises:
        UserError: an unknown setting or a value out of range, naming `measure.<name>`.
    """
    try:
        return MeasureSettings.from_dict(dict(measure))
    except UserError as exc:
        raise UserError(exc.message, field=f"measure.{exc.field}" if exc.field else "measure") from None


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
