"""Runners: where a predictor runs. One module per runner, found by name in `RUNNERS`, the registry of
the `mlscope.runners` entry-point group (mlscope's own are `BUILTIN_RUNNERS`; a third party's is an
entry point naming a `Runner` class).

Each runner's module is imported when it is first named (`RUNNERS[name]`, or `DockerRunner` and the
others as attributes of this package): `mlscope run` on the process runner imports no Docker code."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mlscope.contract.errors import UserError
from mlscope.contract.plugins import Registry, UnknownPlugin
from mlscope.contract.settings import Settings
from mlscope.runtime.frameworks import FRAMEWORKS
from mlscope.workers.runners.base import Runner, RunOutcome

if TYPE_CHECKING:
    from mlscope.workers.runners.docker import DockerRunner
    from mlscope.workers.runners.inline import InlineRunner
    from mlscope.workers.runners.process import ProcessRunner

__all__ = [
    "BUILTIN_RUNNERS",
    "RUNNERS",
    "DockerRunner",
    "InlineRunner",
    "ProcessRunner",
    "RunOutcome",
    "Runner",
    "frameworks_for",
    "get_runner",
]

# mlscope's own runners (pyproject.toml's `mlscope.runners` entry points): name → "module:class".
BUILTIN_RUNNERS: dict[str, str] = {
    "inline": "mlscope.workers.runners.inline:InlineRunner",
    "process": "mlscope.workers.runners.process:ProcessRunner",
    "docker": "mlscope.workers.runners.docker:DockerRunner",
}

# Every runner, by name.
RUNNERS: Registry[type[Runner]] = Registry("mlscope.runners", BUILTIN_RUNNERS)

_CLASSES = {path.rpartition(":")[2]: path for path in BUILTIN_RUNNERS.values()}


def __getattr__(name: str) -> Any:
    """`DockerRunner`, `InlineRunner` and `ProcessRunner`, their module imported on first use."""
    path = _CLASSES.get(name)
    if path is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def get_runner(name: str, settings: Settings | None = None) -> Runner:
    """A runner by name, configured from the settings.

    Raises:
        UserError: no runner of that name; the message lists the known ones.
    """
    try:
        cls = RUNNERS[name]
    except UnknownPlugin:
        raise UserError(
            f"unknown runner {name!r}; known runners: {', '.join(sorted(RUNNERS))}", field="runner"
        ) from None
    return cls.from_settings(settings)


def frameworks_for(runners: list[Runner]) -> dict[str, str]:
    """Every framework at least one of the runners can run, with the version the first one would use."""
    found: dict[str, str] = {}
    for runner in runners:
        for name, spec in FRAMEWORKS.items():
            if name in found or spec.unavailable is not None:
                continue
            version = runner.framework_version(spec)
            if version is not None:
                found[name] = version
    return found
