"""Frameworks mlscope can evaluate on: one registration each, found by name.

A registration names the framework's predictor by import path, so this module (and everything
that lists frameworks: the CLI, the API) never imports a framework. Third-party predictors
register through the `mlscope.frameworks` entry-point group with a `FrameworkSpec`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass

from mlscope.contract.errors import UserError

__all__ = [
    "FRAMEWORKS",
    "FrameworkSpec",
    "check_available",
    "check_runnable",
    "get_framework",
    "installed_version",
    "register_framework",
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
    """

    name: str
    display: str
    import_name: str
    distributions: tuple[str, ...]
    predictor: str
    sources: frozenset[str]
    install_hint: str
    unavailable: str | None = None


FRAMEWORKS: dict[str, FrameworkSpec] = {}


def register_framework(spec: FrameworkSpec) -> FrameworkSpec:
    """Make a framework known by name; a later registration of the same name replaces it."""
    FRAMEWORKS[spec.name] = spec
    return spec


register_framework(
    FrameworkSpec(
        name="pytorch",
        display="PyTorch",
        import_name="torch",
        distributions=("torch",),
        predictor="mlscope.runtime.predictors.pytorch:PyTorchPredictor",
        sources=frozenset({"torchvision", "transformers", "python"}),
        install_hint="pip install 'mlscope[pytorch]'",
    )
)
register_framework(
    FrameworkSpec(
        name="onnxruntime",
        display="ONNX Runtime",
        import_name="onnxruntime",
        distributions=("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"),
        predictor="mlscope.runtime.predictors.onnxruntime:OnnxRuntimePredictor",
        # Graphs from PyTorch sources are exported to ONNX on first use (that needs torch too).
        sources=frozenset({"onnx", "torchvision", "transformers", "python"}),
        install_hint="pip install 'mlscope[onnxruntime]'",
    )
)


register_framework(
    FrameworkSpec(
        name="tensorflow",
        display="TensorFlow",
        import_name="tensorflow",
        distributions=("tensorflow-cpu", "tensorflow", "tensorflow-intel"),
        predictor="mlscope.runtime.predictors.tensorflow:TensorFlowPredictor",
        sources=frozenset({"keras_applications"}),
        install_hint="pip install 'mlscope[tensorflow]', "
        "or `mlscope image build tensorflow` for --runner docker",
    )
)
register_framework(
    FrameworkSpec(
        name="mxnet",
        display="MXNet",
        import_name="mxnet",
        distributions=("mxnet", "mxnet-mkl", "mxnet-cu112"),
        predictor="mlscope.runtime.predictors.mxnet:MXNetPredictor",
        sources=frozenset({"gluon"}),
        # MXNet 1.9 needs numpy < 1.24, which the rest of mlscope's stack does not accept.
        install_hint="`mlscope env create mxnet` (an environment of its own, for --runner process), or "
        "`mlscope image build mxnet` for --runner docker",
    )
)
register_framework(
    FrameworkSpec(
        name="caffe2",
        display="Caffe2 (through PyTorch)",
        import_name="caffe2",
        distributions=("torch",),
        predictor="mlscope.runtime.predictors.caffe2:Caffe2Predictor",
        # Caffe2 runs torchvision graphs exported to ONNX and converted to Caffe2 nets, on the CPU.
        sources=frozenset({"torchvision"}),
        # torch 1.10.2 is the last wheel with the Caffe2 extension, and it needs Python 3.9 (docs/caffe2.md).
        install_hint="`mlscope env create caffe2` (a Python 3.9 environment with torch 1.10.2, for "
        "--runner process), or `mlscope image build caffe2` for --runner docker",
    )
)


def _entry_points(group: str) -> Iterable[importlib.metadata.EntryPoint]:
    found = importlib.metadata.entry_points()
    if hasattr(found, "select"):
        return found.select(group=group)
    # Python 3.9 (the Caffe2 environment's) returns a dict of groups and takes no `group=`.
    return found.get(group, ())


def _load_plugins() -> None:
    for entry in _entry_points("mlscope.frameworks"):
        spec = entry.load()
        if isinstance(spec, FrameworkSpec):
            register_framework(spec)


_load_plugins()


def get_framework(name: str) -> FrameworkSpec:
    """The registration of framework `name`.

    Raises:
        UserError: no framework of that name is registered; the message lists the known ones.
    """
    try:
        return FRAMEWORKS[name]
    except KeyError:
        known = ", ".join(sorted(FRAMEWORKS))
        raise UserError(f"unknown framework {name!r}; known frameworks: {known}", field="framework") from None


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
