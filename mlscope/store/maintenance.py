"""Keeping a store at scale: filling it in bulk (`import_evaluations`: whole results, as another store
exports them or a benchmark makes them) and bounding what it keeps (`prune`: raw latencies and spans
of old evaluations, never a summary unless asked).

The public methods are `Store`'s (base.py: `import_evaluations`, `prune`), which own validation, as
everywhere in the Store; each backend writes two primitives (`StoreBackend._bulk_insert`, `_prune`).
This module holds what they share: the report of a prune, and the check that turns an exported result
into the record a backend inserts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.names import STATUSES, TERMINAL_STATUSES, TRACE_LEVELS
from mlscope.contract.system_ids import system_ids
from mlscope.store.records import (
    EvaluationRecord,
    check_accuracy,
    check_aware,
    check_choice,
    check_cold_start,
    check_error,
    check_framework,
    check_int,
    check_measurements,
    check_memory,
    check_model,
    check_object,
    check_optional_text,
    check_parity,
    check_system,
    check_text,
    check_trace_id,
)

__all__ = ["IMPORT_BATCH_SIZE", "PruneReport", "batches", "record_of"]

IMPORT_BATCH_SIZE = 1000


@dataclass(frozen=True)
class PruneReport:
    """What `prune` removed.

    Attributes:
        evaluations: evaluations it touched (raw data dropped) or deleted.
        raw_latencies: measurements whose raw latencies were dropped.
        spans: spans deleted.
        deleted: whether whole evaluations were deleted (keep_summaries=False).
    """

    evaluations: int
    raw_latencies: int
    spans: int
    deleted: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "evaluations": self.evaluations,
            "raw_latencies": self.raw_latencies,
            "spans": self.spans,
            "deleted": self.deleted,
        }


def batches(items: Iterable[Mapping[str, Any]], size: int) -> Iterator[tuple[int, list[Mapping[str, Any]]]]:
    """`items` read `size` at a time, each batch with the index of its first item."""
    iterator = iter(items)
    first = 0
    while batch := list(islice(iterator, size)):
        yield first, batch
        first += len(batch)


def _timestamp(value: Any, field: str) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return check_aware(value, field)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise UserError(f"{field}={value!r} is not an ISO 8601 timestamp", field=field) from None
        return check_aware(parsed, field)
    raise UserError(f"{field} must be an ISO 8601 timestamp, not {type(value).__name__}", field=field)


def record_of(result: Mapping[str, Any]) -> tuple[EvaluationRecord, dict[str, Any] | None]:
    """An exported result as the record a backend inserts, and its system."""
    # Not check_object over the whole result: that would walk every raw latency; each part is checked.
    if not isinstance(result, Mapping):
        raise UserError(f"a result must be a mapping, not {type(result).__name__}")
    status = check_choice(result.get("status"), STATUSES, "status")
    model = check_model(result.get("model"))
    framework = check_framework(result.get("framework"))
    trace_level = check_choice(result.get("trace_level", "NO_TRACE"), TRACE_LEVELS, "trace_level")
    system = check_system(result["system"]) if result.get("system") is not None else None
    if status == "succeeded" and system is None:
        raise UserError("a succeeded evaluation needs its system", field="system")
    created_at = _timestamp(result.get("created_at"), "created_at")
    if created_at is None:
        raise UserError("created_at is missing", field="created_at")
    finished_at = _timestamp(result.get("finished_at"), "finished_at")
    if status in TERMINAL_STATUSES and finished_at is None:
        raise UserError(f"a {status} evaluation needs its finished_at", field="finished_at")
    trace_id = result.get("trace_id")
    machine_id, stack_id = (None, None) if system is None else system_ids(system, framework["details"])
    record = EvaluationRecord(
        id=check_text(result.get("id"), "id"),
        status=status,
        model_name=model["name"],
        model_version=model["version"],
        manifest_sha256=model["manifest_sha256"],
        framework_name=framework["name"],
        framework_version=framework["version"],
        framework_details=framework["details"],
        runner=check_text(result.get("runner"), "runner"),
        device=check_text(result.get("device"), "device"),
        trace_level=trace_level,
        trace_id=None if trace_id is None else check_trace_id(trace_id, "trace_id"),
        request=check_object(result.get("request") or {}, "request"),
        manifest=check_object(result.get("manifest") or {}, "manifest"),
        created_at=created_at,
        started_at=_timestamp(result.get("started_at"), "started_at"),
        finished_at=finished_at,
        system_id=None if system is None else system["id"],
        machine_id=machine_id,
        stack_id=stack_id,
        cold_start=None if result.get("cold_start") is None else check_cold_start(result["cold_start"]),
        error=None if result.get("error") is None else check_error(result["error"]),
        accuracy=None if result.get("accuracy") is None else check_accuracy(result["accuracy"]),
        parity=None if result.get("parity") is None else check_parity(result["parity"]),
        memory=None if result.get("memory") is None else check_memory(result["memory"]),
        # Exports written before queues and attempts were kept have neither. No lease is imported: the
        # runner that held it is not this store's.
        queue=check_optional_text(result.get("queue"), "queue"),
        attempts=check_int("attempts", result.get("attempts") or 0, 0),
        measurements=check_measurements(result.get("measurements") or [])
        if status in TERMINAL_STATUSES
        else [],
    )
    return record, system
