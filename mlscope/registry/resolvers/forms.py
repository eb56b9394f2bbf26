"""The forms of a model reference, told apart without looking anything up: an upload
(`sha256:<hex>`), a Python factory (`file.py:name`), a path (it contains a '/', starts with '.' or
'~', or ends with '.onnx'), else a name. The resolvers' `matches` are made of these.
"""

from __future__ import annotations

import re

__all__ = ["FACTORY_REF", "UPLOAD_REF", "is_factory_ref", "looks_like_path"]

UPLOAD_REF = re.compile(r"^sha256:([0-9a-f]{64})$")
FACTORY_REF = re.compile(r"^(?P<file>.+\.py):(?P<attr>[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)$")


def is_factory_ref(ref: str) -> bool:
    """Whether `ref` has the form of a Python factory, `path/to/file.py:name`."""
    return bool(FACTORY_REF.match(ref)) and not ref.lower().endswith(".onnx")


def looks_like_path(ref: str) -> bool:
    """Whether `ref` reads as a path rather than a name."""
    return "/" in ref or "\\" in ref or ref.startswith((".", "~")) or ref.lower().endswith(".onnx")
