"""Reading one span dict in the store's shape, as every analysis does: its attributes (none stored as
{}) and its duration in nanoseconds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["attributes_of", "duration_of"]


def attributes_of(span: Mapping[str, Any]) -> Mapping[str, Any]:
    """The span's attributes; {} when it has none."""
    return span.get("attributes") or {}


def duration_of(span: Mapping[str, Any]) -> int:
    """How long the span took, in nanoseconds."""
    return int(span["end_ns"]) - int(span["start_ns"])
