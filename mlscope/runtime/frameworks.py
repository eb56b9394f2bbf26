"""Frameworks mlscope can evaluate on: one registration each, found by name.

Each built-in framework is one sub-package of `mlscope.runtime.predictors` whose `__init__` holds its
registration (`FRAMEWORK = FrameworkSpec(...)`) and imports no framework; its predictor, profiler
converters and hooks sit beside it and are named by import path. `FRAMEWORKS` is the registry of the
`mlscope.frameworks` entry-point group (`mlscope.contract.plugins`): the built-in ones are the table
`BUILTIN_FRAMEWORKS` (also pyproject.toml's entry points), a third party's are entry points naming a
`FrameworkSpec`. Nothing is scanned or registered at import: a registration is imported when it is
first looked up, so this module (and everything that lists frameworks: the CLI, the API) never
imports a framework.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlscope.contract.errors import UserError
from mlscope.contract.plugins import Registry, UnknownPlugin, load_object

if TYPE_CHECKING:
    from mlscope.contract.manifest import Manifest
    from mlscope.contract.options import PredictorOptions
    from mlscope.runtime.predictors.base import Predictor

__all__ = [
    "FRAMEWORKS",
    "FrameworkSpec",
    "check_available",
    "check_runnable",
    "get_framework",
    "in_framework_order",
    "installed_version",
    "load_object",
    "load_predictor_class",
]


@dataclass(frozen=True)
class FrameworkSpec:
    """What mlscope knows of a framework without importing it.

    Attributes:
        name: the name used in manifests, requests and queue names.
        display: the name people know it by.
        import_name: the module whose presence means it is installed.
        distributions: pip distributions that carry it, in order of preference.
        predictor: `module:Class` of its Predictor.
        sources: the manifest source kinds it can run.
        install_hint: what to install when it is missing.
        unavailable: why it cannot run anywhere mlscope is installed from (known, listed, and
            refused with this reason); None for a framework that can run.
        order: where it stands among the built-in frameworks, lower first (plugins follow them).
        image_by_default: `mlscope image build` without names builds its image (one that builds
            from PyPI in reasonable time and space).
        host_prefetch: `module:function` making on the host what its predictor cannot make in a
            container (no network, maybe no exporter), called by the docker runner through
            `prefetch_on_host`; None: nothing to make.
        system_distributions: libraries whose installed versions every captured system records
            (they change the figures), besides numpy.
        generates: its predictor runs the generate scenario (`Predictor.generation_engine`); a
            generate run that names no framework uses those.
        bricks: `module:function` running a brick job (`options.brick`: one-node graphs timed by the
            brick method, `mlscope bricks` on a farm), called by the predictor runtime as
            `function(job, enter)` (`enter(phase, **detail)` reports a phase) and returning the
            job's result; None: it measures no bricks.
        brick_devices: `module:function(device)` saying why `mlscope bricks` cannot measure its bricks
            on a device other than the CPU (None when it can); None: its bricks run on the CPU only.
        options: the framework-specific request options it takes (contract.options.FRAMEWORK_OPTIONS,
            e.g. `compile`); a request setting another one is refused at admission.
        option_refusal: `module:function(options, device)` saying in one line why a request's
            framework options (a mapping, as the request sets them) cannot run on `device` ("cpu",
            "cuda:0"), its first words `options.<name>:` (None when they can); None: every value each option
            of `options` takes is run. Imports no framework: admission calls it.
        needs_gpu: it runs on an NVIDIA GPU only: refused on a machine without one (before asking
            whether it is installed) and on the CPU device.
        by_default: it runs a model when the request names no framework (`mlscope run MODEL`
            without -f) and it has the model's manifest; False for one that runs only when named, so
            that installing it does not change what an existing command measures.
        model_refusal: `module:function(manifest)` saying in one line why it cannot run a manifest's
            model (None when it can), read at admission; None: it runs every model of its sources.
        model_types: catalogue architectures (the entries' `name`, e.g. "llama", "resnet18") of its
            sources' libraries it runs although the generated catalogue does not list it for them: a
            framework that runs a few architectures of a source, not the source (llama.cpp's GGUF
            writer, JAX's Flax definitions); its manifests of them are the catalogue's, with
            `model_version` as the framework's version constraint.
        model_version: the version constraint of those manifests.
        generates_only: it runs the generate scenario and no other (a request for another is
            refused at admission).
        admit: `module:function(manifest, options, cache_dir)` run when a request for it is admitted
            on the machine that will run it (not by a farm's api): it makes into the cache what its
            predictor loads (a conversion), so that what cannot be made is refused before anything
            is stored, raising UserError naming the field; None: nothing to make.
    """

    name: str
    display: str
    import_name: str
    distributions: tuple[str, ...]
    predictor: str
    sources: frozenset[str]
    install_hint: str
    unavailable: str | None = None
    order: int = 1000
    image_by_default: bool = False
    host_prefetch: str | None = None
    system_distributions: tuple[str, ...] = ()
    generates: bool = False
    bricks: str | None = None
    brick_devices: str | None = None
    options: frozenset[str] = frozenset()
    option_refusal: str | None = None
    needs_gpu: bool = False
    by_default: bool = True
    model_refusal: str | None = None
    model_types: frozenset[str] = frozenset()
    model_version: str = ">=0"
    generates_only: bool = False
    admit: str | None = None

    def prefetch_on_host(
        self, manifest: Manifest, options: PredictorOptions, cache_dir: Path, *, timeout_s: float
    ) -> tuple[Path, ...]:
        """Make on the host what a container running this framework's predictor cannot, into
        `cache_dir` (which the container mounts).

        Returns:
            Host files the manifest names that the container must see (mounted read-only).

        Raises:
            PredictorError: a file is missing or making one failed.
            subprocess.TimeoutExpired: making it took longer than `timeout_s`.
        """
        if self.host_prefetch is None:
            return ()
        return tuple(load_object(self.host_prefetch)(manifest, options, cache_dir, timeout_s=timeout_s))


# mlscope's own frameworks (pyproject.toml's `mlscope.frameworks` entry points): name → registration.
BUILTIN_FRAMEWORKS: dict[str, str] = {
    "pytorch": "mlscope.runtime.predictors.pytorch:FRAMEWORK",
    "onnxruntime": "mlscope.runtime.predictors.onnxruntime:FRAMEWORK",
    "openvino": "mlscope.runtime.predictors.openvino:FRAMEWORK",
    "jax": "mlscope.runtime.predictors.jax:FRAMEWORK",
    "litert": "mlscope.runtime.predictors.litert:FRAMEWORK",
    "tensorflow": "mlscope.runtime.predictors.tensorflow:FRAMEWORK",
    "mxnet": "mlscope.runtime.predictors.mxnet:FRAMEWORK",
    "caffe2": "mlscope.runtime.predictors.caffe2:FRAMEWORK",
    "endpoint": "mlscope.runtime.predictors.endpoint:FRAMEWORK",
    "tensorrt": "mlscope.runtime.predictors.tensorrt:FRAMEWORK",
    "llamacpp": "mlscope.runtime.predictors.llamacpp:FRAMEWORK",
}

# Every framework, built-in and plugged in, in their `order` (then by name).
FRAMEWORKS: Registry[FrameworkSpec] = Registry(
    "mlscope.frameworks",
    BUILTIN_FRAMEWORKS,
    kind=FrameworkSpec,
    sort_key=lambda name, spec: (spec.order, name),
)


def get_framework(name: str) -> FrameworkSpec:
    """The registration of framework `name`.

    Raises:
        UserError: no framework of that name is registered; the message lists the known ones.
    """
    try:
        return FRAMEWORKS[name]
    except UnknownPlugin:
        known = ", ".join(sorted(FRAMEWORKS))
        raise UserError(f"unknown framework {name!r}; known frameworks: {known}", field="framework") from None


def in_framework_order(names: Iterable[str]) -> list[str]:
    """Registered framework names sorted as the frameworks are (`FrameworkSpec.order`, then name):
    the built-ins first, PyTorch first among them.

    Raises:
        UserError: a name is not a registered framework.
    """
    return sorted(names, key=lambda name: (get_framework(name).order, name))


def load_predictor_class(framework: str) -> type[Predictor]:
    """Import the predictor of a registered framework (and so the framework itself, and no other)."""
    from mlscope.runtime.predictors.base import Predictor

    path = get_framework(framework).predictor
    cls = load_object(path)
    if not (isinstance(cls, type) and issubclass(cls, Predictor)):
        raise TypeError(f"{path} is not a Predictor")
    return cls


def check_runnable(spec: FrameworkSpec) -> FrameworkSpec:
    """The framework, if it can run somewhere.

    Raises:
        UserError: it is known but cannot run anywhere, naming the reason.
    """
    if spec.unavailable is not None:
        raise UserError(f"framework {spec.name!r} cannot run: {spec.unavailable}", field="framework")
    return spec


def installed_version(spec: FrameworkSpec) -> str | None:
    """The installed version of the framework, read from package metadata (no import), or None.

    Read once per process: a long-lived worker asks for every job, and packages installed or removed
    under a running process are not what it imported anyway.
    """
    return _installed_version(spec.import_name, tuple(spec.distributions))


@functools.lru_cache(maxsize=64)
def _installed_version(import_name: str, distributions: tuple[str, ...]) -> str | None:
    try:
        if importlib.util.find_spec(import_name) is None:
            return None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return None
    for distribution in distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


_INSTALLED = object()


def check_available(
    spec: FrameworkSpec,
    constraint: str = "*",
    source_kind: str | None = None,
    *,
    version: object = _INSTALLED,
    where: str = "here",
) -> str:
    """Check that the framework can run and satisfies a manifest's version constraint.

    Args:
        spec: the framework.
        constraint: a semver constraint from a manifest (`>=2.0`, `^1.16`, `*`).
        source_kind: the manifest's source kind, checked against what the framework can run.
        version: the version that would run (None: none would); default: the one installed in this
            Python. A runner passes what it would run: a framework environment's, an image's.
        where: where that is, for messages ("here", "in image mlscope-predictor-mxnet:0.1.0").

    Returns:
        The version that would run.

    Raises:
        UserError: unavailable everywhere (with the reason), not installed (with what to install),
            the wrong version, or a source it cannot run.
    """
    check_runnable(spec)
    if source_kind is not None and source_kind not in spec.sources:
        kinds = ", ".join(sorted(spec.sources))
        raise UserError(
            f"{spec.display} cannot run a model whose source is {source_kind!r}; it runs: {kinds}",
            field="framework",
        )
    found = installed_version(spec) if version is _INSTALLED else version
    if found is None:
        raise UserError(
            f"framework {spec.name!r} is not installed {where} ({spec.install_hint})", field="framework"
        )
    found = str(found)
    if constraint not in ("", "*") and found != "unknown":
        from mlscope.contract.manifest import FrameworkRequirement

        if not FrameworkRequirement(spec.name, constraint).allows(found):
            raise UserError(
                f"the manifest needs {spec.name} {constraint}, but {found} is installed {where}",
                field="framework.version",
            )
    return found
