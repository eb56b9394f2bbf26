"""The forms of a model reference, told apart without looking anything up: an upload
(`sha256:<hex>`), a Python factory (`file.py:name`), a path (it contains a '/', starts with '.' or
'~', or ends with '.onnx'), else a name. The resolvers' `matches` are made of these.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = [
    "FACTORY_REF",
    "UPLOAD_REF",
    "absolute_reference",
    "is_factory_ref",
    "looks_like_path",
    "reference_path",
]

UPLOAD_REF = re.compile(r"^sha256:([0-9a-f]{64})$")
FACTORY_REF = re.compile(r"^(?P<file>.+\.py):(?P<attr>[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)$")


def is_factory_ref(ref: str) -> bool:
    """Whether `ref` has the form of a Python factory, `path/to/file.py:name`."""
    return bool(FACTORY_REF.match(ref)) and not ref.lower().endswith(".onnx")


def looks_like_path(ref: str) -> bool:
    """Whether `ref` reads as a path rather than a name."""
    return "/" in ref or "\\" in ref or ref.startswith((".", "~")) or ref.lower().endswith(".onnx")


def reference_path(ref: str) -> Path | None:
    """The path of this machine a reference reads: a path's, or a factory's file; None for a name or
    an upload. Whether anything is there is not looked at."""
    if UPLOAD_REF.match(ref):
        return None
    factory = _factory_parts(ref)
    if factory is not None:
        return Path(factory[0]).expanduser()
    return Path(ref).expanduser() if looks_like_path(ref) else None


def _factory_parts(ref: str) -> tuple[str, str] | None:
    """A factory reference's (file, attribute); None for any other reference."""
    match = FACTORY_REF.match(ref)
    if match is None or not is_factory_ref(ref):
        return None
    return match.group("file"), match.group("attr")


def absolute_reference(ref: str) -> str:
    """`ref` naming the same file from any directory: a relative path to an existing file or
    directory (or a factory's file) made absolute; anything else as it is. What a run records, so
    that a rerun from elsewhere finds the model."""
    path = reference_path(ref)
    if path is None or path.is_absolute() or not path.exists():
        return ref
    absolute = os.path.abspath(path)
    factory = _factory_parts(ref)
    return absolute if factory is None else f"{absolute}:{factory[1]}"
