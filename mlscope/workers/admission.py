"""Admission: the one way a request becomes a job. The CLI (`mlscope run`), the HTTP API (a single
submission or each job of a batch) and a farm worker taking a job off its queue all call `admit`;
nothing else validates a request, resolves its model or builds the stored record and the predictor's
job from it.

    request document ─ parse_request ─▶ EvaluationRequest ─ framework, manifest, measure settings
        (+ here: the runner's framework version, the device) ─▶ Admission ─▶ record() / job()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.generation import ENDPOINT_FRAMEWORK, GenerationSettings
from mlscope.contract.job import Job
from mlscope.contract.load import LoadSettings
from mlscope.contract.manifest import Manifest
from mlscope.contract.options import (
    FRAMEWORK_OPTIONS,
    GENERATE_OPTIONS,
    MAX_INPUT_POOL,
    PredictorOptions,
    is_default_option,
    variant_options,
)
from mlscope.contract.request import EvaluationRequest, parse_request
from mlscope.contract.settings import Settings
from mlscope.registry.datasets import check_dataset_reference, resolve_dataset
from mlscope.registry.endpoints import endpoint_manifest
from mlscope.registry.models import ModelRegistry
from mlscope.registry.references import ModelOptions
from mlscope.runtime.data import DatasetRef
from mlscope.runtime.frameworks import (
    FRAMEWORKS,
    FrameworkSpec,
    check_available,
    check_runnable,
    get_framework,
    in_framework_order,
    installed_version,
    load_object,
)
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.system import gpu_facts
from mlscope.workers.runners import get_runner

__all__ = [
    "PARITY_SAMPLES",
    "Admission",
    "admit",
    "check_measure",
    "default_frameworks",
    "outputs_only",
    "variant_of",
]

# How many samples' outputs a parity check compares: enough for top-1 agreement to mean something
# (one flip in 64 is 1.6%), few enough that a classifier's outputs cross a pipe in a blink.
PARITY_SAMPLES = 64


@dataclass(frozen=True)
class Admission:
    """A request that passed every check, with what it resolved to.

    Attributes:
        request: the validated request.
        manifest: the manifest its model and framework resolved to.
        framework_version: the version that will run it, where that is known (admitted here);
            None when admitted by a farm's api, which cannot know the worker's machine.
        dataset: the request's dataset, materialised in this machine's cache (admitted here).
        parity_manifest: the manifest of the parity check's reference framework, when asked for.
    """

    request: EvaluationRequest
    manifest: Manifest
    framework_version: str | None = None
    dataset: DatasetRef | None = None
    parity_manifest: Manifest | None = None

    @property
    def parity_against(self) -> str | None:
        """The reference framework of the parity check, when one was asked for."""
        return None if self.parity_manifest is None else self.parity_manifest.framework.name

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

    def job(
        self,
        evaluation_id: str,
        *,
        cache_dir: str,
        traceparent: str = "",
        model_store: dict[str, Any] | None = None,
    ) -> Job:
        """What the predictor process is told to do for the stored evaluation `evaluation_id`
        (`model_store`: the settings' `model_store`, for a warm start; None: none)."""
        return Job.from_request(
            self.request,
            evaluation_id=evaluation_id,
            manifest=self.manifest.to_dict(),
            origin=self.manifest.origin,
            cache_dir=cache_dir,
            traceparent=traceparent,
            dataset=None if self.dataset is None else self.dataset.to_dict(),
            outputs_for=PARITY_SAMPLES if self.parity_manifest is not None else 0,
            model_store=model_store,
        )

    def parity_job(self, job: Job) -> Job:
        """The parity check's reference run: the same inputs (dataset or seed, batch sizes) on the
        reference framework, measuring nothing, returning the outputs `job` returns: the same
        framework without its own options when the check is of a variant (`compile`, an OpenVINO
        hint or precision)."""
        assert self.parity_manifest is not None
        # The reference runs the model as loaded: no framework-specific option (a compiled model's
        # reference is the same framework eager).
        options = {name: value for name, value in job.options.items() if name not in FRAMEWORK_OPTIONS}
        return dataclasses.replace(
            outputs_only(job, job.outputs_for),
            options=options,
            manifest=self.parity_manifest.to_dict(),
            origin=self.parity_manifest.origin,
            framework=self.parity_manifest.framework.name,
            trace_level="NO_TRACE",
            traceparent="",
        )


def outputs_only(job: Job, samples: int) -> Job:
    """`job` measuring nothing and returning its first `samples` samples' raw outputs: a dataset is
    read only that far (the accuracy of a few samples it also computes is not kept)."""
    dataset = dict(job.dataset)
    if dataset:
        limit = dataset.get("limit")
        dataset["limit"] = samples if limit is None else min(limit, samples)
    return dataclasses.replace(job, scenarios=(), outputs_for=samples, dataset=dataset)


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
            the wrong version), an unknown runner, a device this machine lacks (`device`); a
            generate request's trace over the model's context (`generation.trace`), and here an
            api its endpoint has no route for (`generation.api`).
    """
    if not isinstance(request, EvaluationRequest):
        request = parse_request(dict(request))
    framework = check_runnable(get_framework(request.framework))
    _check_gpu_framework(framework, request.device, here is not None)
    manifest = _manifest(request, models)
    _check_fixed_batch(manifest, request.batch_sizes)
    check_measure(request.measure)
    _check_multi_stream(request, None)
    _check_brick(request, framework, manifest)
    _check_framework_options(request, framework)
    _check_model(framework, manifest)
    _check_generates_only(request, framework)
    if request.dataset is not None:
        check_dataset_reference(
            request.dataset, local_files=models.local_files, uploads=models.dataset_uploads
        )
    parity_manifest = _parity_manifest(request, models) if request.check_parity else None
    if here is None:
        _check_generation(request, manifest, False)
        return Admission(request, manifest, parity_manifest=parity_manifest)
    runner = get_runner(request.runner, here)

    def available(spec: FrameworkSpec, manifest: Manifest) -> str:
        return check_available(
            spec,
            manifest.framework.version,
            manifest.source.kind,
            version=runner.framework_version(spec),
            where=runner.where(spec),
        )

    version = available(framework, manifest)
    if framework.admit is not None:
        load_object(framework.admit)(
            manifest, PredictorOptions.from_dict(dict(request.options)), here.cache_dir
        )
    if parity_manifest is not None:
        available(get_framework(parity_manifest.framework.name), parity_manifest)
    _check_device(request.device)
    dataset = None
    if request.dataset is not None:
        dataset = resolve_dataset(
            request.dataset,
            here.cache_dir,
            limit=request.limit,
            uploads=models.dataset_uploads,
            max_bytes=here.max_dataset_bytes,
        )
        # The dataset pass's module (numpy) only for a request that has a dataset.
        from mlscope.runtime.dataset_pass import check_takes_dataset

        check_takes_dataset(manifest, dataset)
        _check_multi_stream(request, dataset)
    _check_generation(request, manifest, True)
    return Admission(request, manifest, version, dataset, parity_manifest)


def _manifest(request: EvaluationRequest, models: ModelRegistry) -> Manifest:
    """The manifest the request's model resolves to: the registry's, or for an endpoint the one
    that names the served model (nothing of it is loaded here)."""
    if request.framework == ENDPOINT_FRAMEWORK:
        generation = GenerationSettings.from_dict(request.generation)
        assert generation.endpoint is not None  # the request schema requires it with this framework
        return endpoint_manifest(request.model, generation.endpoint, generation.endpoint_model)
    return models.get(request.model, request.framework, ModelOptions.from_dict(request.model_options))


def _parity_manifest(request: EvaluationRequest, models: ModelRegistry) -> Manifest:
    """The manifest the parity check compares against: `parity_against`'s, else the model's other
    framework that comes first in the frameworks' order (PyTorch: most graphs are written in it and
    exported from it); for a variant (`variant_of`), its own framework's unless another is named.

    Raises:
        UserError: the model has no other framework, or none named `parity_against` (field
            `parity_against`).
    """
    options = ModelOptions.from_dict(request.model_options)
    others = in_framework_order(
        name for name in models.frameworks_for(request.model) if name != request.framework
    )
    against = request.parity_against
    if variant_of(request) and against in (None, request.framework):
        # A variant (a compiled model) is checked against its framework as loaded.
        return models.get(request.model, request.framework, options)
    if against is None:
        if not others:
            raise UserError(
                f"{request.model} runs only on {request.framework} here: a parity check needs a second "
                "framework to compare with",
                field="check_parity",
            )
        against = others[0]
    elif against == request.framework:
        raise UserError(
            f"parity_against is {against}, the framework under test: name another ({', '.join(others)})",
            field="parity_against",
        )
    elif against not in others:
        raise UserError(
            f"{request.model} has no manifest for {against}; it has {', '.join(others) or 'no other'}",
            field="parity_against",
        )
    return models.get(request.model, against, options)


def _check_multi_stream(request: EvaluationRequest, dataset: DatasetRef | None) -> None:
    """A multi_stream query's samples are distinct inputs: the input pool (at most MAX_INPUT_POOL)
    and the dataset (as limited) must hold that many. Without `dataset` (not resolved yet), only the
    request's own limit is checked against it.

    Raises:
        UserError: naming `load.samples_per_query`.
    """
    if "multi_stream" not in request.scenarios:
        return
    wanted = LoadSettings.from_dict(request.load).samples_per_query
    head = f"multi_stream's {wanted} samples per query need {wanted} distinct inputs"
    if wanted > MAX_INPUT_POOL:
        raise UserError(
            f"{head}, but the input pool holds at most {MAX_INPUT_POOL}: lower samples_per_query to "
            f"≤ {MAX_INPUT_POOL}",
            field="load.samples_per_query",
        )
    pool = request.options.get("input_pool")
    if pool is not None and pool < wanted:
        raise UserError(
            f"{head}, but options.input_pool is {pool}: raise input_pool to ≥ {wanted} (max "
            f"{MAX_INPUT_POOL}) or lower samples_per_query",
            field="load.samples_per_query",
        )
    if request.dataset is None:
        return
    used = request.limit if dataset is None else dataset.used
    if used is not None and used < wanted:
        held = f"limit {used} samples" if dataset is None or used != dataset.count else f"{used} samples"
        raise UserError(
            f"{head}, but that is larger than the dataset {request.dataset} ({held}): lower "
            f"samples_per_query to ≤ {used} or evaluate more of the dataset",
            field="load.samples_per_query",
        )


def _check_brick(request: EvaluationRequest, framework: FrameworkSpec, manifest: Manifest) -> None:
    """A brick (options.brick) is a one-node ONNX graph measured by its framework's brick method:
    single_stream at one batch size, nothing else asked of it.

    Raises:
        UserError: naming the field that does not fit a brick.
    """
    if not request.options.get("brick"):
        return
    if framework.bricks is None:
        able = [spec.display for spec in FRAMEWORKS.values() if spec.bricks is not None]
        raise UserError(
            f"{framework.display} does not measure bricks; {' and '.join(able) or 'no framework'} can "
            "(or drop options.brick)",
            field="options.brick",
        )
    if manifest.source.kind != "onnx":
        raise UserError(
            f"a brick is a one-node ONNX graph (an uploaded .onnx file), but {request.model} is a "
            f"{manifest.source.kind} model: drop options.brick to measure it the ordinary way",
            field="model",
        )
    wrong = (
        ("scenarios", request.scenarios != ("single_stream",), "a brick is measured in single_stream only"),
        ("batch_sizes", len(request.batch_sizes) != 1, "a brick is measured at one batch size"),
        ("dataset", request.dataset is not None, "a brick measures no accuracy: drop the dataset"),
        ("check_parity", request.check_parity, "a brick's outputs are not compared: drop check_parity"),
    )
    for name, failed, why in wrong:
        if failed:
            raise UserError(f"options.brick: {why}", field=name)


def _check_framework_options(request: EvaluationRequest, framework: FrameworkSpec) -> None:
    """Options only some frameworks take (contract.options.FRAMEWORK_OPTIONS) are set only on those.

    Raises:
        UserError: naming `options.<name>` and the frameworks that take it.
    """
    for name in sorted(FRAMEWORK_OPTIONS & set(request.options)):
        if name in framework.options or is_default_option(name, request.options[name]):
            continue
        takers = [spec.display for spec in FRAMEWORKS.values() if name in spec.options]
        raise UserError(
            f"options.{name}: {framework.display} has no {name} option; "
            f"{_listed(takers) or 'no installed framework'} {'has' if len(takers) < 2 else 'have'} "
            "(or drop it)",
            field=f"options.{name}",
        )
    if framework.option_refusal is not None:
        # The framework's own word on values it cannot run (its first words name the option).
        refusal = load_object(framework.option_refusal)(request.options, request.device)
        if refusal:
            raise UserError(refusal, field=refusal.partition(":")[0])
    variant = variant_of(request)
    not_generated = sorted(set(variant) - GENERATE_OPTIONS)
    if not_generated and "generate" in request.scenarios:
        name = not_generated[0]
        raise UserError(
            f"options.{name}: the generate scenario runs the model through transformers' generate loop "
            "as loaded; drop the option or the scenario",
            field=f"options.{name}",
        )
    if variant.get("quantize") and "precision" in variant:
        raise UserError(
            f"options.precision: an int8-quantised model computes in int8 and fp32, not "
            f"{variant['precision']}; drop one of precision and quantize",
            field="options.precision",
        )


def _listed(names: list[str]) -> str:
    """The names as a phrase: `A`, `A and B`, `A, B and C`."""
    return " and ".join(filter(None, (", ".join(names[:-1]), names[-1] if names else "")))


def _check_model(framework: FrameworkSpec, manifest: Manifest) -> None:
    """A framework that runs only some models of a source kind (`FrameworkSpec.model_refusal`) runs
    one of those.

    Raises:
        UserError: its refusal, naming what it can run (field `model`).
    """
    if framework.model_refusal is not None:
        why = load_object(framework.model_refusal)(manifest)
        if why:
            raise UserError(why, field="model")


def _check_generates_only(request: EvaluationRequest, framework: FrameworkSpec) -> None:
    """A framework that runs only the generate scenario (`FrameworkSpec.generates_only`) is asked for it.

    Raises:
        UserError: naming `scenarios` and the scenario it runs.
    """
    if framework.generates_only and "generate" not in request.scenarios:
        raise UserError(
            f"scenarios: {framework.display} runs only the generate scenario; ask for it with "
            "--scenario generate",
            field="scenarios",
        )


def _check_generation(request: EvaluationRequest, manifest: Manifest, here: bool) -> None:
    """A generate request's trace fits the model's context and its endpoint serves its API, where
    that can be known before anything is stored (runtime/generate/preflight.py says where).

    Raises:
        UserError: naming generation.trace (the line) or generation.api (the server's answer).
    """
    if "generate" not in request.scenarios:
        return
    from mlscope.runtime.generate.preflight import check_generation

    settings = GenerationSettings.from_dict(request.generation)
    check_generation(settings, manifest, reach=here, seed=LoadSettings.from_dict(request.load).seed)


def variant_of(request: EvaluationRequest) -> dict[str, Any]:
    """The request's framework-specific options that change how its framework runs the model (a
    compile mode, a precision, a quantisation): what sets it apart from the same framework as loaded."""
    return variant_options(request.options)


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


def _check_gpu_framework(framework: FrameworkSpec, device: str, here: bool) -> None:
    """A framework that runs on an NVIDIA GPU only (FrameworkSpec.needs_gpu) is asked for on one: here,
    a machine without a GPU is named before anything else (the framework is not asked for on it,
    installed or not), then a CPU device anywhere.

    Raises:
        UserError: naming the missing GPU (`framework`) or the device (`device`).
    """
    if not framework.needs_gpu:
        return
    if here and not gpu_facts():
        raise UserError(
            f"{framework.display} runs on an NVIDIA GPU only, and this machine has none that NVML can see",
            field="framework",
        )
    if not device.startswith("cuda"):
        raise UserError(
            f"device {device}: {framework.display} runs on an NVIDIA GPU only; use --device cuda",
            field="device",
        )


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


def default_frameworks(registry: ModelRegistry, model: str) -> list[str]:
    """Every framework installed here that has a manifest for `model` and runs when none is named
    (FrameworkSpec.by_default), sorted by name; those that run only when named where no other can.

    Raises:
        UserError: an unknown model (with suggestions), or none of its frameworks is installed here.
    """
    names = registry.frameworks_for(model)
    installed = [name for name in names if installed_version(get_framework(name)) is not None]
    if not installed:
        raise UserError(
            f"model {model!r} has manifests for {', '.join(names)}, but none of them is installed here",
            field="model",
        )
    return [name for name in installed if get_framework(name).by_default] or installed
