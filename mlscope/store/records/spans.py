"""Spans: the record of one traced span, the checks a caller's spans pass before any is stored, their
public shape, and the rows of a layer breakdown (how spans are grouped, and the figures every backend
formats its integer totals into).
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.names import TRACE_LEVELS
from mlscope.store.records.values import INT64_MAX, INT64_MIN, check_object, check_text

__all__ = [
    "SPAN_GROUPINGS",
    "SPAN_LEVELS",
    "LayerTotal",
    "SpanRecord",
    "check_span",
    "check_spans",
    "check_trace_id",
    "layer_rows",
    "span_group_key",
    "span_to_dict",
]

# A span records work that happened, so NO_TRACE (the absence of tracing) is no span's level.
SPAN_LEVELS: tuple[str, ...] = TRACE_LEVELS[1:]
SPAN_GROUPINGS: tuple[str, ...] = ("name", "layer_type")
_SPAN_KEYS = ("trace_id", "span_id", "parent_id", "name", "level", "start_ns", "end_ns", "attributes")
_SPAN_KEY_SET = frozenset(_SPAN_KEYS)
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True)
class SpanRecord:
    """One span (an OpenTelemetry span, flattened) as every backend stores it."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    level: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]


def _check_hex_id(value: Any, pattern: re.Pattern[str], digits: int, field: str) -> str:
    # An all-zero id is OpenTelemetry's "invalid id", never a real trace or span.
    if type(value) is not str or not pattern.fullmatch(value) or not value.strip("0"):
        raise UserError(
            f"{field} must be {digits} lower-case hex digits, not all zero, not {value!r}", field=field
        )
    return value


def check_trace_id(value: Any, field: str) -> str:
    """A trace id: 32 lower-case hex digits, not all zero.

    Raises:
        UserError: naming `field`.
    """
    return _check_hex_id(value, _TRACE_ID, 32, field)


def _check_ns(value: Any, field: str) -> int:
    # `type(...) is int` first: a trace holds hundreds of thousands of these, and ABC checks are slow.
    if type(value) is not int and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
        raise UserError(f"{field} must be an integer number of nanoseconds, not {value!r}", field=field)
    if not INT64_MIN <= int(value) <= INT64_MAX:
        raise UserError(f"{field}={value} is outside the 64-bit integer range", field=field)
    return int(value)


def check_span(span: Any, field: str) -> SpanRecord:
    """The record of one span {"trace_id", "span_id", "parent_id", "name", "level", "start_ns",
    "end_ns", "attributes"}; "parent_id" and "attributes" may be left out or None (None and {}).

    Raises:
        UserError: naming the first offending field, e.g. "spans.3.end_ns".
    """
    if type(span) is not dict and not isinstance(span, Mapping):
        raise UserError(f"{field} must be an object, not {type(span).__name__}", field=field)
    if not _SPAN_KEY_SET.issuperset(span):
        key = next(key for key in span if key not in _SPAN_KEY_SET)
        raise UserError(
            f"{field}.{key} is not a span field: expected {', '.join(_SPAN_KEYS)}", field=f"{field}.{key}"
        )
    trace_id = _check_hex_id(span.get("trace_id"), _TRACE_ID, 32, f"{field}.trace_id")
    span_id = _check_hex_id(span.get("span_id"), _SPAN_ID, 16, f"{field}.span_id")
    parent_id = span.get("parent_id")
    if parent_id is not None:
        _check_hex_id(parent_id, _SPAN_ID, 16, f"{field}.parent_id")
    name = check_text(span.get("name"), f"{field}.name")
    level = span.get("level")
    if level not in SPAN_LEVELS:
        raise UserError(
            f"{field}.level={level!r} is not one of {', '.join(SPAN_LEVELS)}", field=f"{field}.level"
        )
    start_ns = _check_ns(span.get("start_ns"), f"{field}.start_ns")
    end_ns = _check_ns(span.get("end_ns"), f"{field}.end_ns")
    if end_ns < start_ns:
        raise UserError(
            f"{field}.end_ns={end_ns} is before start_ns={start_ns}: a span cannot end before it starts",
            field=f"{field}.end_ns",
        )
    attributes = span.get("attributes")
    attributes = (
        {} if attributes is None or attributes == {} else check_object(attributes, f"{field}.attributes")
    )
    if attributes.get("layer_type") is not None:
        check_text(attributes["layer_type"], f"{field}.attributes.layer_type")
    return SpanRecord(trace_id, span_id, parent_id, name, level, start_ns, end_ns, attributes)


def check_spans(spans: Any) -> list[SpanRecord]:
    """Records for `spans`, one per span id: a span id repeated in the list keeps its first span, as
    saving it again would.

    Raises:
        UserError: naming the first offending field, e.g. "spans.3.trace_id".
    """
    if isinstance(spans, (str, bytes, Mapping)) or not isinstance(spans, Sequence):
        raise UserError("spans must be a list of span objects", field="spans")
    records: dict[str, SpanRecord] = {}
    for index, span in enumerate(spans):
        record = check_span(span, f"spans.{index}")
        records.setdefault(record.span_id, record)
    return list(records.values())


def span_to_dict(record: SpanRecord) -> dict[str, Any]:
    """The public shape of a span: the keys `check_span` accepts, every one present."""
    return {
        "trace_id": record.trace_id,
        "span_id": record.span_id,
        "parent_id": record.parent_id,
        "name": record.name,
        "level": record.level,
        "start_ns": record.start_ns,
        "end_ns": record.end_ns,
        "attributes": record.attributes,
    }


def span_group_key(record: SpanRecord, group_by: str) -> str:
    """What `group_by` ("name" or "layer_type") groups `record` under: its attributes' layer_type falls
    back to its name, since spans from profilers that report no layer type still take time."""
    if group_by == "layer_type":
        layer_type = record.attributes.get("layer_type")
        if layer_type is not None:
            return layer_type
    return record.name


@dataclass(frozen=True)
class LayerTotal:
    """The spans of one group in a layer breakdown: how many, and their summed duration."""

    key: str
    calls: int
    total_ns: int


def layer_rows(totals: Sequence[LayerTotal], model_total_ns: int | None) -> list[dict[str, Any]]:
    """The rows of a layer breakdown, each {"key", "calls", "total_ms", "mean_ms", "share"}, the
    largest total first (then by key).

    Every backend computes the integer totals its own way and formats them here, so the floating-point
    figures are identical across backends.

    Args:
        totals: one per group, from the spans of one level.
        model_total_ns: the summed duration of the evaluation's MODEL-level spans (None when it has
            none), which `share` divides by; without it the rows' own sum is used. A zero divisor
            gives shares of 0.
    """
    denominator = sum(t.total_ns for t in totals) if model_total_ns is None else model_total_ns
    return [
        {
            "key": t.key,
            "calls": t.calls,
            "total_ms": t.total_ns / 1e6,
            "mean_ms": t.total_ns / t.calls / 1e6,
            "share": t.total_ns / denominator if denominator else 0.0,
        }
        for t in sorted(totals, key=lambda t: (-t.total_ns, t.key))
    ]
