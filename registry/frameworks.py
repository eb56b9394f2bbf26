"""Frameworks mlscope can evaluate on: one registration each, found by name.

A registration names the framework's predictor by import path, so this module (and everything
that lists frameworks: the CLI, the API) never imports a framework. Third-party predictors
register through the `mlscope.frameworks` entry-point group with a `FrameworkSpec`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from dataclasses import dataclass

from mlscope.errors import UserError

__all__ = [
    "FRAMEWORKS",
    "FrameworkSpec",
    "check_available",
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
    """

    name: str
    display: str
    import_name: str
    distributions: tuple[str, ...]
    predictor: str
    sources: frozenset[str]
    install_hint: str


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
        predictor="mlscope.workers.predictors.pytorch:PyTorchPredictor",
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
        predictor="mlscope.workers.predictors.onnxruntime:OnnxRuntimePredictor",
        # Graphs from PyTorch sources are exported to ONNX on first use (that needs torch too).
        sources=frozenset({"onnx", "torchvision", "transformers", "python"}),
        install_hint="pip install 'mlscope[onnxruntime]'",
    )
)


def _load_plugins() -> None:
    for entry in importlib.metadata.entry_points(group="mlscope.frameworks"):
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


def installed_version(spec: FrameworkSpec) -> str | None:
    """The installed version of the framework, read from package metadata (no import), or None.

    Read once per process: a long-lived worker asks for every job, and packages installed or removed
    under a running process are not what it imported anyway.
    """
    return _installed_version(spec.import_name, tuple(spec.distributions))


@functools.lru_cache(maxsize=64)
def _installed_version(import_name: str, distributions: tuple[str, ...]) -> str | None:
    if importlib.util.find_spec(import_name) is None:
        return None
    for distribution in distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def check_available(spec: FrameworkSpec, constraint: str = "*", source_kind: str | None = None) -> str:
    """Check that the framework can run here and satisfies a manifest's version constraint.

    Args:
        spec: the framework.
        constraint: a semver constraint from a manifest (`>=2.0`, `^1.16`, `*`).
        source_kind: the manifest's source kind, checked against what the framework can run.

    Returns:
        The installed version.

    Raises:
        UserError: not installed (with what to install), the wrong version, or a source it cannot run.
    """
    if source_kind is not None and source_kind not in spec.sources:
        kinds = ", ".join(sorted(spec.sources))
        raise UserError(
            f"{spec.display} cannot run a model whose source is {source_kind!r}; it runs: {kinds}",
            field="framework",
        )
    version = installed_version(spec)
    if version is None:
        raise UserError(
            f"framework {spec.name!r} is not installed here ({spec.install_hint})", field="framework"
        )
    if constraint not in ("", "*") and version != "unknown":
        from mlscope.registry.manifest import FrameworkRequirement

        if not FrameworkRequirement(spec.name, constraint).allows(version):
            raise UserError(
                f"the manifest needs {spec.name} {constraint}, but {version} is installed here",
                field="framework.version",
            )
    return version
