"""What every model-reference resolver is, and the errors they share.

A resolver owns one kind of reference: `matches` tells, cheaply and without importing a framework,
whether a reference has its form; `frameworks` lists where that reference can run; `resolve` makes its
manifest for one framework. The dispatcher (`mlscope.registry.resolvers`) asks each resolver's
`matches` in a fixed order and hands the reference to the first that says yes; a resolver never hands
it back.
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest
from mlscope.registry.model_options import ModelOptions
from mlscope.runtime.frameworks import FRAMEWORKS

__all__ = [
    "Resolver",
    "check_framework",
    "frameworks_with_source",
    "refuse_local",
    "unknown_model",
]


class Resolver(ABC):
    """One kind of model reference, resolved to manifests.

    Attributes:
        kind: the kind's name ("upload", "factory", "manifest", "catalogue", "directory", "onnx").
    """

    kind: ClassVar[str]

    @abstractmethod
    def matches(self, ref: str) -> bool:
        """Whether `ref` is of this kind (by its form, and for a path what is there)."""

    @abstractmethod
    def frameworks(self, ref: str) -> list[str]:
        """The sorted frameworks `ref` can run on.

        Raises:
            UserError: what `ref` names is not there or not readable.
        """

    @abstractmethod
    def resolve(self, ref: str, framework: str, options: ModelOptions) -> Manifest:
        """The manifest of `ref` for `framework`, the options applied.

        Raises:
            UserError: `ref` cannot run on `framework`, what it names is not there or not valid, or
                the options do not fit it.
        """


def frameworks_with_source(source: str) -> list[str]:
    """The sorted frameworks, available here, that build a model from a `source` of this kind."""
    return sorted(
        spec.name for spec in FRAMEWORKS.values() if source in spec.sources and not spec.unavailable
    )


def check_framework(name: str, framework: str, frameworks: Sequence[str]) -> None:
    """Raises UserError (field "framework") when `framework` is not among `frameworks`."""
    if framework not in frameworks:
        raise UserError(
            f"{name} cannot run on framework {framework!r}; it can on: {', '.join(frameworks)}",
            field="framework",
        )


def _exists(name: str) -> bool:
    """Whether a file or directory is called `name` here; False for a name no path can have (too
    long, a NUL byte)."""
    try:
        return Path(name).exists()
    except (OSError, ValueError):
        return False


def unknown_model(name: str, names: Sequence[str], refs: Sequence[str], *, local_files: bool) -> UserError:
    """The error for a name no manifest file and no catalogue entry has: close names suggested
    among the manifest files' `names` and the catalogue's `refs`; where local files are read, a hint
    for a file or directory of that name."""
    close = difflib.get_close_matches(name.lower(), [*names, *refs], n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    if local_files and _exists(name):
        hint += f"(for the file or directory {name}, write ./{name}) "
    known = ", ".join(names) or "none"
    more = f" and {len(refs)} catalogue architectures (`mlscope models` lists them)" if refs else ""
    return UserError(f"unknown model {name!r}; {hint}known models: {known}{more}", field="model")


def refuse_local(name: str, kind: str) -> UserError:
    """The error for a reference to this machine's files where they are not read: `kind` is
    "factory", "path" or "weights" (a checkpoint)."""
    if kind == "factory":
        return UserError(
            f"{name}: Python factories are not accepted here (no code travels over the wire); upload the "
            "exported ONNX file instead (mlscope submit ./model.onnx), or install the module on the "
            "workers and name its factory in a manifest (MLSCOPE_MANIFESTS)",
            field="model",
        )
    what = "a checkpoint path (--weights)" if kind == "weights" else f"{name}"
    return UserError(
        f"{what}: a path on your machine means nothing here; upload an ONNX file (mlscope submit "
        "./model.onnx, or POST /api/v1/models) and name it by the sha256:<hex> reference it returns",
        field="model_options.weights" if kind == "weights" else "model",
    )
