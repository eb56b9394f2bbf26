"""What a Store keeps, in a form every backend shares: the records backends read and write, the checks
that turn a caller's input into records, and the public (JSON) shape records are served in.

Backends never see unchecked input and never build the public shape themselves, so every backend
accepts and returns exactly the same things.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.names import ACTIVE_STATUSES, STATUSES, TERMINAL_STATUSES, TRACE_LEVELS

__all__ = [
    "ACTIVE_STATUSES",
    "COMPARE_COLUMNS",
    "SPAN_GROUPINGS",
    "SPAN_LEVELS",
    "STATUSES",
    "TERMINAL_STATUSES",
    "TRACE_LEVELS",
    "CompareFilter",
    "EvaluationFilter",
    "EvaluationRecord",
    "LayerTotal",
    "MeasurementRecord",
    "SpanRecord",
    "check_aware",
    "check_cold_start",
    "check_error",
    "check_framework",
    "check_measurements",
    "check_model",
    "check_object",
    "check_optional_text",
    "check_span",
    "check_spans",
    "check_system",
    "check_text",
    "check_trace_id",
    "compare_rows",
    "evaluation_to_dict",
    "json_safe",
    "layer_rows",
    "pack_latencies",
    "span_group_key",
    "span_to_dict",
    "unpack_latencies",
]


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Keys a measurement stores in columns of their own; any other key travels in `extra`.
_MEASUREMENT_KEYS = frozenset(
    {"scenario", "batch_size", "latency_ms", "throughput", "validity", "latencies_ns"}
)
_COLD_START_KEYS = ("import_ms", "load_ms", "first_inference_ms")


@dataclass
class MeasurementRecord:
    """One scenario at one batch size, as a backend stores it.

    `latencies_ns` is None when the caller recorded none, or when the backend was not asked for it.
    """

    scenario: str
    batch_size: int
    latency_ms: dict[str, Any]
    throughput: float | None
    validity: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    latencies_ns: list[int] | None = None


@dataclass
class EvaluationRecord:
    """One evaluation as a backend stores it: flat fields, timestamps as aware UTC datetimes.

    `system` and `measurements` are filled by reads only; writes go through `system_id` and the
    measurements handed to `Store._transition`.
    """

    id: str
    status: str
    model_name: str
    model_version: str | None
    manifest_sha256: str | None
    framework_name: str
    framework_version: str | None
    runner: str
    device: str
    trace_level: str
    request: dict[str, Any]
    manifest: dict[str, Any]
    created_at: datetime
    system_id: str | None = None
    trace_id: str | None = None
    cold_start: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    framework_details: dict[str, Any] | None = None
    system: dict[str, Any] | None = None
    measurements: list[MeasurementRecord] = field(default_factory=list)


@dataclass(frozen=True)
class EvaluationFilter:
    """Conditions on evaluations; None means "any". `since` is inclusive, `until` exclusive."""

    model: str | None = None
    framework: str | None = None
    system_id: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class CompareFilter:
    """Which succeeded evaluations a comparison draws on; an empty tuple means "any"."""

    ids: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    system_ids: tuple[str, ...] = ()
    batch_sizes: tuple[int, ...] = ()
    scenarios: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None


# The columns of a comparison row, in the order tables and CSV files show them.
COMPARE_COLUMNS: tuple[str, ...] = (
    "model",
    "framework",
    "framework_version",
    "system_id",
    "hostname",
    "agent_id",
    "cpu",
    "device",
    "scenario",
    "batch_size",
    "median_ms",
    "p90_ms",
    "p99_ms",
    "ci_low_ms",
    "ci_high_ms",
    "throughput",
    "count",
    "valid",
    "reasons",
    "runs",
    "evaluation_id",
    "finished_at",
)


def compare_rows(evaluations: list[dict[str, Any]], where: CompareFilter) -> list[dict[str, Any]]:
    """The comparison table from succeeded evaluations in the public shape.

    One row per (model, framework, system, device, scenario, batch size): the most recently finished
    evaluation's figures, with `runs` counting how many succeeded evaluations share the key. Rows are
    ordered by model, scenario, batch size, then median latency, so the fastest of a group comes first.
    """
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    runs: dict[tuple[Any, ...], int] = {}
    for evaluation in evaluations:
        system = evaluation.get("system") or {}
        for m in evaluation["measurements"]:
            if where.batch_sizes and m["batch_size"] not in where.batch_sizes:
                continue
            if where.scenarios and m["scenario"] not in where.scenarios:
                continue
            key = (
                evaluation["model"]["name"],
                evaluation["framework"]["name"],
                system.get("id"),
                evaluation["device"],
                m["scenario"],
                m["batch_size"],
            )
            runs[key] = runs.get(key, 0) + 1
            ci = m["latency_ms"].get("median_ci") or [None, None]
            row = {
                "model": key[0],
                "framework": key[1],
                "framework_version": evaluation["framework"].get("version"),
                "system_id": key[2],
                "hostname": system.get("hostname"),
                "agent_id": (system.get("agent") or {}).get("id"),
                "cpu": (system.get("cpu") or {}).get("model"),
                "device": key[3],
                "scenario": key[4],
                "batch_size": key[5],
                "median_ms": m["latency_ms"].get("median"),
                "p90_ms": m["latency_ms"].get("p90"),
                "p99_ms": m["latency_ms"].get("p99"),
                "ci_low_ms": ci[0],
                "ci_high_ms": ci[1],
                "throughput": m.get("throughput"),
                "count": m["latency_ms"].get("count"),
                "valid": (m.get("validity") or {}).get("valid"),
                "reasons": list((m.get("validity") or {}).get("reasons") or []),
                "evaluation_id": evaluation["id"],
                "finished_at": evaluation["finished_at"],
            }
            held = latest.get(key)
            if held is None or (row["finished_at"] or "", row["evaluation_id"]) > (
                held["finished_at"] or "",
                held["evaluation_id"],
            ):
                latest[key] = row
    rows = []
    for key, row in latest.items():
        row["runs"] = runs[key]
        rows.append({column: row[column] for column in COMPARE_COLUMNS})
    inf = float("inf")
    rows.sort(
        key=lambda r: (
            r["model"],
            r["scenario"],
            r["batch_size"],
            r["median_ms"] if r["median_ms"] is not None else inf,
            r["framework"],
            r["system_id"] or "",
            r["device"],
        )
    )
    return rows


def pack_latencies(values: Sequence[int]) -> bytes:
    """Latencies in nanoseconds as little-endian int64 bytes: the form every backend stores them in."""
    packed = array("q", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def unpack_latencies(data: bytes) -> list[int]:
    """The inverse of `pack_latencies`."""
    unpacked = array("q")
    unpacked.frombytes(data)
    if sys.byteorder == "big":
        unpacked.byteswap()
    return unpacked.tolist()


def json_safe(value: Any, field: str) -> Any:
    """A plain-JSON copy of `value`, so that every backend stores and returns the same thing.

    Non-finite floats become None: PostgreSQL's json type rejects NaN, and statistics over one sample
    (stdev, cv) are NaN, so storing them as null is the only form every backend keeps alike.

    Raises:
        UserError: naming the field holding something JSON cannot represent.
    """
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, Mapping):
        copy: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise UserError(f"{field} has the key {key!r}: JSON object keys must be strings", field=field)
            copy[key] = json_safe(item, f"{field}.{key}")
        return copy
    if isinstance(value, (list, tuple)):
        return [json_safe(item, f"{field}[{index}]") for index, item in enumerate(value)]
    # Measurement code hands over numpy scalars and arrays; both turn into plain Python via tolist().
    to_list = getattr(value, "tolist", None)
    if callable(to_list):
        return json_safe(to_list(), field)
    raise UserError(f"{field} is a {type(value).__name__}, which cannot be stored as JSON", field=field)


def check_text(value: Any, field: str) -> str:
    """`value` if it is a non-empty string.

    Raises:
        UserError: naming the field otherwise.
    """
    if not isinstance(value, str) or not value:
        raise UserError(f"{field} must be a non-empty string, not {value!r}", field=field)
    return value


def check_optional_text(value: Any, field: str) -> str | None:
    """`value` if it is None or a non-empty string.

    Raises:
        UserError: naming the field otherwise.
    """
    return None if value is None else check_text(value, field)


def check_object(value: Any, field: str) -> dict[str, Any]:
    """A plain-JSON copy of `value`, which must be an object (a mapping with string keys).

    Raises:
        UserError: naming the field otherwise.
    """
    if not isinstance(value, Mapping):
        raise UserError(f"{field} must be an object, not {type(value).__name__}", field=field)
    checked: dict[str, Any] = json_safe(value, field)
    return checked


def check_aware(value: datetime | None, field: str) -> datetime | None:
    """`value` converted to UTC.

    Raises:
        UserError: when `value` is not a datetime or carries no timezone, because a naive time could
            be local or UTC and guessing would silently shift results by hours.
    """
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise UserError(f"{field} must be a datetime, not {type(value).__name__}", field=field)
    if value.tzinfo is None or value.utcoffset() is None:
        raise UserError(f"{field}={value.isoformat()} has no timezone: give an aware datetime", field=field)
    return value.astimezone(timezone.utc)


def check_system(system: Any) -> dict[str, Any]:
    """The system description as stored, "id" included.

    Raises:
        UserError: when it is not an object or has no string "id".
    """
    checked = check_object(system, "system")
    check_text(checked.get("id"), "system.id")
    return checked


def check_model(model: Any) -> dict[str, Any]:
    """{"name", "version", "manifest_sha256"}: name required, the others optional strings."""
    checked = check_object(model, "model")
    return {
        "name": check_text(checked.get("name"), "model.name"),
        "version": check_optional_text(checked.get("version"), "model.version"),
        "manifest_sha256": check_optional_text(checked.get("manifest_sha256"), "model.manifest_sha256"),
    }


def check_framework(framework: Any) -> dict[str, Any]:
    """{"name", "version", ...}: version may be None until the framework has been imported; other
    keys (effective threads, providers, library builds) are kept as the framework's details."""
    checked = check_object(framework, "framework")
    details = {k: v for k, v in checked.items() if k not in ("name", "version")}
    return {
        "name": check_text(checked.get("name"), "framework.name"),
        "version": check_optional_text(checked.get("version"), "framework.version"),
        "details": json_safe(details, "framework") if details else None,
    }


def check_cold_start(cold_start: Any) -> dict[str, Any]:
    """The cold-start timings; the three standard keys must be present (a value may be None)."""
    checked = check_object(cold_start, "cold_start")
    for key in _COLD_START_KEYS:
        if key not in checked:
            raise UserError(
                f"cold_start has no {key!r}: expected {', '.join(_COLD_START_KEYS)}",
                field=f"cold_start.{key}",
            )
        value = checked[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UserError(
                f"cold_start.{key} must be a number of milliseconds, not {value!r}", field=f"cold_start.{key}"
            )
    return checked


def check_error(error: Any) -> dict[str, Any]:
    """{"type", "message", "phase"}: type and message required, phase optional."""
    checked = check_object(error, "error")
    return {
        "type": check_text(checked.get("type"), "error.type"),
        "message": _check_message(checked.get("message")),
        "phase": check_optional_text(checked.get("phase"), "error.phase"),
    }


def _check_message(value: Any) -> str:
    # An exception's message may legitimately be empty, so only its type is checked.
    if not isinstance(value, str):
        raise UserError(f"error.message must be a string, not {value!r}", field="error.message")
    return value


def _check_latencies(values: Any, field: str) -> list[int] | None:
    if values is None:
        return None
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__iter__"):
        raise UserError(f"{field} must be a list of integer nanoseconds", field=field)
    try:
        checked = [operator.index(value) for value in values]
    except TypeError:
        raise UserError(f"{field} must hold integer nanoseconds only", field=field) from None
    if checked and (min(checked) < _INT64_MIN or max(checked) > _INT64_MAX):
        raise UserError(f"{field} holds a value outside the 64-bit integer range", field=field)
    return checked


def _check_measurement(measurement: Any, field: str) -> MeasurementRecord:
    if not isinstance(measurement, Mapping):
        raise UserError(f"{field} must be an object, not {type(measurement).__name__}", field=field)
    scenario = check_text(measurement.get("scenario"), f"{field}.scenario")
    batch_size = measurement.get("batch_size")
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise UserError(
            f"{field}.batch_size must be a positive integer, not {batch_size!r}", field=f"{field}.batch_size"
        )
    throughput = measurement.get("throughput")
    if throughput is not None and (isinstance(throughput, bool) or not isinstance(throughput, numbers.Real)):
        raise UserError(
            f"{field}.throughput must be a number, not {throughput!r}", field=f"{field}.throughput"
        )
    validity = check_object(measurement.get("validity"), f"{field}.validity")
    if not isinstance(validity.get("valid"), bool):
        raise UserError(f"{field}.validity.valid must be true or false", field=f"{field}.validity.valid")
    extra = {key: value for key, value in measurement.items() if key not in _MEASUREMENT_KEYS}
    return MeasurementRecord(
        scenario=scenario,
        batch_size=int(batch_size),
        latency_ms=check_object(measurement.get("latency_ms"), f"{field}.latency_ms"),
        throughput=json_safe(throughput, f"{field}.throughput"),
        validity=validity,
        extra=json_safe(extra, field),
        latencies_ns=_check_latencies(measurement.get("latencies_ns"), f"{field}.latencies_ns"),
    )


def check_measurements(measurements: Any) -> list[MeasurementRecord]:
    """Records for `measurements`, at most one per (scenario, batch_size).

    Raises:
        UserError: naming the first offending field, e.g. "measurements[2].batch_size".
    """
    if isinstance(measurements, (str, bytes, Mapping)) or not isinstance(measurements, (list, tuple)):
        raise UserError("measurements must be a list of objects", field="measurements")
    records: list[MeasurementRecord] = []
    seen: set[tuple[str, int]] = set()
    for index, measurement in enumerate(measurements):
        record = _check_measurement(measurement, f"measurements[{index}]")
        key = (record.scenario, record.batch_size)
        if key in seen:
            raise UserError(
                f"measurements[{index}] repeats scenario {record.scenario!r} "
                f"at batch size {record.batch_size}",
                field=f"measurements[{index}]",
            )
        seen.add(key)
        records.append(record)
    return records


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat()


def _measurement_to_dict(record: MeasurementRecord, *, include_raw: bool) -> dict[str, Any]:
    result = {
        "scenario": record.scenario,
        "batch_size": record.batch_size,
        "latency_ms": record.latency_ms,
        "throughput": record.throughput,
        "validity": record.validity,
        **record.extra,
    }
    if include_raw:
        result["latencies_ns"] = record.latencies_ns
    return result


def evaluation_to_dict(record: EvaluationRecord, *, include_raw: bool = False) -> dict[str, Any]:
    """The public result shape (DESIGN.md, "Result shape"), plus the request and manifest snapshots."""
    measurements = sorted(record.measurements, key=lambda m: (m.scenario, m.batch_size))
    return {
        "id": record.id,
        "status": record.status,
        "model": {
            "name": record.model_name,
            "version": record.model_version,
            "manifest_sha256": record.manifest_sha256,
        },
        "framework": {
            "name": record.framework_name,
            "version": record.framework_version,
            **(record.framework_details or {}),
        },
        "system": record.system,
        "runner": record.runner,
        "device": record.device,
        "trace_level": record.trace_level,
        "trace_id": record.trace_id,
        "cold_start": record.cold_start,
        "measurements": [_measurement_to_dict(m, include_raw=include_raw) for m in measurements],
        "error": record.error,
        "created_at": _iso(record.created_at),
        "started_at": _iso(record.started_at),
        "finished_at": _iso(record.finished_at),
        "request": record.request,
        "manifest": record.manifest,
    }


# ----- spans -----------------------------------------------------------------------------------------

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
    if not _INT64_MIN <= int(value) <= _INT64_MAX:
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
