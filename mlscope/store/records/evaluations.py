"""Evaluations and their measurements: the records backends read and write, the checks that turn a
caller's submit, finish or failure into them, the filter a listing applies, the packed form raw
latencies are stored in, and the public (JSON) result shape an evaluation is served in.
"""

from __future__ import annotations

import array
import numbers
import operator
import sys
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypedDict, cast

from mlscope.contract.errors import UserError
from mlscope.contract.names import STATUSES
from mlscope.contract.result import (
    Accuracy,
    ColdStart,
    ErrorInfo,
    EvaluationResult,
    FrameworkInfo,
    Memory,
    Parity,
    ResultMeasurement,
)
from mlscope.contract.workload import display_name
from mlscope.store.records.sections import check_cost, check_energy
from mlscope.store.records.values import (
    INT64_MAX,
    INT64_MIN,
    check_aware,
    check_object,
    check_optional_text,
    check_text,
    json_safe,
)

__all__ = [
    "PLAIN_CODEC",
    "RAW_CODEC",
    "RAW_CODECS",
    "EvaluationFilter",
    "EvaluationRecord",
    "MeasurementRecord",
    "check_cold_start",
    "check_error",
    "check_filter",
    "check_framework",
    "check_measurements",
    "check_model",
    "check_system",
    "evaluation_to_dict",
    "pack_latencies",
    "subsample_latencies",
    "summary_columns",
    "unpack_latencies",
]

# Keys a measurement stores in columns of their own; any other key travels in `extra`.
_MEASUREMENT_KEYS = frozenset(
    {"scenario", "batch_size", "latency_ms", "throughput", "validity", "latencies_ns"}
)
_COLD_START_KEYS = ("import_ms", "load_ms", "first_inference_ms")
# A warm start's figures (docs/warm-start.md), each present only when measured.
_WARM_NUMBERS = (
    "warm_load_ms",
    "warm_first_inference_ms",
    "warm_publish_ms",
    "warm_shared_mb",
    "warm_read_mb",
)
WARM_SOURCES = ("store", "published")


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
    # The result sections (records.sections): None when not measured, and then absent from the result.
    accuracy: dict[str, Any] | None = None
    parity: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    # Schema 7: the broker queue its job was sent to (None: run in place by `mlscope run`, or submitted
    # before queues were kept), how many times it was started, and while running the lease its runner
    # renews: who holds it and until when. An expired lease is how a dead runner is told from a slow one.
    queue: str | None = None
    attempts: int = 0
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    # Schema 9: the machine and the software stack it ran on (contract.system_ids), what history
    # series group by; None until it has a system.
    machine_id: str | None = None
    stack_id: str | None = None
    system: dict[str, Any] | None = None
    measurements: list[MeasurementRecord] = field(default_factory=list)


@dataclass(frozen=True)
class EvaluationFilter:
    """Conditions on evaluations; None means "any". `since` is inclusive, `until` exclusive.

    `after` (created_at, id) keeps only the evaluations a listing orders after that one (created_at
    descending, then id ascending): the keyset continuation of a listing's previous page.
    """

    model: str | None = None
    framework: str | None = None
    system_id: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    after: tuple[datetime, str] | None = None


def subsample_latencies(measurement: Mapping[str, Any], limit: int) -> dict[str, Any]:
    """The measurement with at most `limit` raw latencies kept: every k-th, in their order, k the
    smallest stride that fits, and "latencies_sampled": {"kept", "of", "every"} saying so. The
    summary (latency_ms) is untouched: it always covers every sample. A measurement within the
    limit, or without raw latencies, comes back as it was.
    """
    raw = measurement.get("latencies_ns")
    if not isinstance(raw, Sequence) or len(raw) <= limit:
        return dict(measurement)
    every = -(-len(raw) // limit) if limit > 0 else len(raw) + 1
    kept = list(raw[::every]) if limit > 0 else []
    sampled = {"kept": len(kept), "of": len(raw), "every": every}
    return {**measurement, "latencies_ns": kept, "latencies_sampled": sampled}


def summary_columns(latency_ms: Mapping[str, Any], validity: Mapping[str, Any]) -> dict[str, Any]:
    """The summary a measurement stores in columns of its own (schema 2), from its latency summary
    and validity: what comparisons, history series and filters read instead of the JSON."""

    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    ci = latency_ms.get("median_ci")
    low, high = (ci[0], ci[1]) if isinstance(ci, list | tuple) and len(ci) == 2 else (None, None)
    count = latency_ms.get("count")
    return {
        "sample_count": int(count) if isinstance(count, int) and not isinstance(count, bool) else None,
        "mean_ms": number(latency_ms.get("mean")),
        "median_ms": number(latency_ms.get("median")),
        "p90_ms": number(latency_ms.get("p90")),
        "p95_ms": number(latency_ms.get("p95")),
        "p99_ms": number(latency_ms.get("p99")),
        "ci_low_ms": number(low),
        "ci_high_ms": number(high),
        "valid": bool(validity.get("valid")) if "valid" in validity else None,
    }


# How raw latencies are packed. 0.1.0 stored plain little-endian int64 ("int64le"); since schema 2
# the bytes are shuffled (every value's first byte, then every second byte, ...: the high bytes of
# similar latencies are alike and compress well) and zlib-compressed, about a third of the size.
PLAIN_CODEC = "int64le"
RAW_CODEC = "i64-shuffle-zlib"
RAW_CODECS = (PLAIN_CODEC, RAW_CODEC)


def pack_latencies(values: Sequence[int], codec: str = RAW_CODEC) -> bytes:
    """Latencies in nanoseconds packed as `codec` says (RAW_CODEC unless told otherwise). In the
    standard library only (array, bytes slicing in C): storing a result imports no numpy."""
    ndarray: Any = values if _is_ndarray(values) else None
    plain = ndarray.astype("<i8").tobytes() if ndarray is not None else _int64le(values).tobytes()
    if codec == PLAIN_CODEC:
        return plain
    if codec != RAW_CODEC:
        raise ValueError(f"unknown latency codec {codec!r}: expected one of {', '.join(RAW_CODECS)}")
    # Every value's byte 0, then every value's byte 1, ...: the transpose of an n x 8 byte matrix.
    shuffled = b"".join(plain[byte::8] for byte in range(8))
    return zlib.compress(shuffled, 6)


def unpack_latencies(data: bytes, codec: str | None = PLAIN_CODEC) -> list[int]:
    """The inverse of `pack_latencies`; `codec` None is a row written before codecs were recorded."""
    if codec == RAW_CODEC:
        shuffled = zlib.decompress(data)
        count = len(shuffled) // 8
        plain = bytearray(len(shuffled))
        for byte in range(8):
            plain[byte::8] = shuffled[byte * count : (byte + 1) * count]
        data = bytes(plain)
    elif codec not in (PLAIN_CODEC, None):
        raise ValueError(f"unknown latency codec {codec!r}: expected one of {', '.join(RAW_CODECS)}")
    values = array.array("q")
    values.frombytes(data)
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def _int64le(values: Sequence[int]) -> array.array[int]:
    """`values` as little-endian 64-bit integers (OverflowError beyond that range)."""
    packed = array.array("q", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed


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
    _check_warm_start(checked)
    return checked


def _check_warm_start(cold_start: dict[str, Any]) -> None:
    """The warm_* keys, where present: numbers >= 0, a known source, a reason as text."""
    for key in _WARM_NUMBERS:
        value = cold_start.get(key)
        if key in cold_start and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
        ):
            raise UserError(
                f"cold_start.{key} must be a number >= 0, not {value!r}", field=f"cold_start.{key}"
            )
    if "warm_source" in cold_start and cold_start["warm_source"] not in WARM_SOURCES:
        raise UserError(
            f"cold_start.warm_source must be one of {', '.join(WARM_SOURCES)}, "
            f"not {cold_start['warm_source']!r}",
            field="cold_start.warm_source",
        )
    if "warm_unavailable" in cold_start:
        check_text(cold_start["warm_unavailable"], "cold_start.warm_unavailable")


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


# Latencies checked value by value in Python up to this many (a few milliseconds), in numpy beyond.
_PYTHON_CHECKS_UP_TO = 20_000


def _check_latencies(values: Any, field: str) -> list[int] | None:
    if values is None:
        return None
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__iter__"):
        raise UserError(f"{field} must be a list of integer nanoseconds", field=field)
    long = isinstance(values, (list, tuple)) and (
        len(values) > _PYTHON_CHECKS_UP_TO or "numpy" in sys.modules
    )
    if long or _is_ndarray(values):
        # The common case in one numpy pass: integers that all fit 64 bits come out as int64. A short
        # list is checked in Python: importing numpy for it would cost a short run's parent ~0.1 s.
        import numpy as np

        try:
            array = np.asarray(values)
        except (OverflowError, TypeError, ValueError):
            array = None
        if array is not None and array.ndim == 1 and array.dtype == np.int64:
            fast: list[int] = array.tolist()
            return fast
    try:
        checked = [operator.index(value) for value in values]
    except TypeError:
        raise UserError(f"{field} must hold integer nanoseconds only", field=field) from None
    if checked and (min(checked) < INT64_MIN or max(checked) > INT64_MAX):
        raise UserError(f"{field} holds a value outside the 64-bit integer range", field=field)
    return checked


def _is_ndarray(values: Any) -> bool:
    """Whether `values` is a numpy array, without importing numpy: one exists only once it is."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(values, numpy.ndarray)


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
    # The measurement's own result sections, absent when not measured.
    for name, check in (("energy", check_energy), ("cost", check_cost)):
        if extra.get(name) is not None:
            check(extra[name], f"{field}.{name}")
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


def _measurement_to_dict(record: MeasurementRecord, *, include_raw: bool) -> ResultMeasurement:
    # The latency summary, validity and the other keys are kept as the worker wrote them (checked
    # then by check_measurements): the JSON a backend reads back is taken to hold that shape.
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
    return cast(ResultMeasurement, result)


class _Sections(TypedDict, total=False):
    accuracy: Accuracy
    parity: Parity
    memory: Memory


def evaluation_to_dict(record: EvaluationRecord, *, include_raw: bool = False) -> EvaluationResult:
    """The public result shape (docs/design.md, "Result shape"), plus the request and manifest snapshots, the
    queue its job was sent to and how many times it was started; "accuracy", "parity" and "memory" only
    when the evaluation has them. The lease stays inside the store: it is the runners' business."""
    measurements = sorted(record.measurements, key=lambda m: (m.scenario, m.batch_size))
    sections: _Sections = {}
    if record.accuracy:
        sections["accuracy"] = cast(Accuracy, record.accuracy)
    if record.parity:
        sections["parity"] = cast(Parity, record.parity)
    if record.memory:
        sections["memory"] = cast(Memory, record.memory)
    # The model as users read it, with its overrides (`hf:gpt2[n_layer=2]`): derived, so every
    # stored result has it, old ones included.
    shown = display_name(
        {"model": {"name": record.model_name}, "request": record.request, "manifest": record.manifest}
    )
    return {
        "id": record.id,
        "status": record.status,
        "model": {
            "name": record.model_name,
            "version": record.model_version,
            "manifest_sha256": record.manifest_sha256,
        },
        "display_name": shown,
        "framework": cast(
            FrameworkInfo,
            {
                "name": record.framework_name,
                "version": record.framework_version,
                **(record.framework_details or {}),
            },
        ),
        "system": record.system,
        "runner": record.runner,
        "device": record.device,
        "trace_level": record.trace_level,
        "trace_id": record.trace_id,
        "queue": record.queue,
        "attempts": record.attempts,
        "cold_start": cast(ColdStart | None, record.cold_start),
        "measurements": [_measurement_to_dict(m, include_raw=include_raw) for m in measurements],
        **sections,
        "error": cast(ErrorInfo | None, record.error),
        "created_at": record.created_at.astimezone(timezone.utc).isoformat(),
        "started_at": _iso(record.started_at),
        "finished_at": _iso(record.finished_at),
        "request": record.request,
        "manifest": record.manifest,
    }


def check_filter(
    model: str | None,
    framework: str | None,
    system_id: str | None,
    status: str | None,
    since: datetime | None,
    until: datetime | None,
) -> EvaluationFilter:
    """The conditions of a listing, checked.

    Raises:
        UserError: naming the invalid filter.
    """
    if status is not None and status not in STATUSES:
        raise UserError(f"status={status!r} is not one of {', '.join(STATUSES)}", field="status")
    return EvaluationFilter(
        model=check_optional_text(model, "model"),
        framework=check_optional_text(framework, "framework"),
        system_id=check_optional_text(system_id, "system_id"),
        status=status,
        since=check_aware(since, "since"),
        until=check_aware(until, "until"),
    )
