"""Keeping a store at scale: filling it in bulk (`import_evaluations`: whole results, as another store
exports them or a benchmark makes them) and bounding what it keeps (`prune`: raw latencies and spans
of old evaluations, never a summary unless asked).

The public methods own validation, as everywhere in the Store; each backend writes two primitives.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.names import STATUSES, TERMINAL_STATUSES, TRACE_LEVELS
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

__all__ = ["IMPORT_BATCH_SIZE", "PruneReport", "StoreMaintenance"]

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


class StoreMaintenance(ABC):
    """Bulk import and retention, on top of a backend's primitives."""

    def import_evaluations(
        self, results: Iterable[Mapping[str, Any]], *, batch_size: int = IMPORT_BATCH_SIZE
    ) -> int:
        """Store whole evaluations in bulk, `batch_size` per transaction.

        Each result has the shape `get_evaluation(id, include_raw=True)` returns (timestamps as
        aware datetimes or ISO 8601 text); its system is saved with it. An id the store already
        holds is skipped, so an import that stopped half-way can simply be run again.

        Args:
            results: the evaluations, any number (read lazily, one batch at a time).
            batch_size: evaluations per transaction, 1 to 100000.

        Returns:
            How many evaluations were stored (the skipped ones not counted).

        Raises:
            UserError: naming the first invalid field as `results.<index>.<field>`; the batches
                before it are stored, nothing of the batch holding it.
        """
        check_int("batch_size", batch_size, 1)
        if batch_size > 100_000:
            raise UserError(f"batch_size={batch_size} is too large: at most 100000", field="batch_size")
        stored = 0
        for first, batch in _batches(results, batch_size):
            records: list[EvaluationRecord] = []
            systems: dict[str, dict[str, Any]] = {}
            for offset, result in enumerate(batch):
                try:
                    record, system = _record_of(result)
                except UserError as exc:
                    where = f"results.{first + offset}"
                    field = f"{where}.{exc.field}" if exc.field else where
                    raise UserError(f"{where}: {exc.message}", field=field) from None
                records.append(record)
                if system is not None:
                    systems[system["id"]] = system
            stored += self._bulk_insert(records, systems)
        return stored

    def prune(self, *, before: datetime, keep_summaries: bool = True) -> PruneReport:
        """Bound what the store keeps: drop the raw data of evaluations that ended before `before`.

        Args:
            before: aware datetime; evaluations that ended (succeeded, failed, cancelled) earlier.
                A queued or running evaluation is never touched.
            keep_summaries: True drops raw latencies and spans only: every summary, every
                comparison and history figure stays. False deletes those evaluations whole.

        Returns:
            What was removed.

        Raises:
            UserError: `before` is not an aware datetime.
        """
        cutoff = check_aware(before, "before")
        assert cutoff is not None
        return self._prune(cutoff, keep_summaries=keep_summaries)

    @abstractmethod
    def _bulk_insert(self, records: Sequence[EvaluationRecord], systems: Mapping[str, dict[str, Any]]) -> int:
        """Insert the systems (an existing id: skipped) and the evaluations with their measurements
        (an existing evaluation id: skipped, measurements included) in one transaction.

        Returns:
            How many evaluations were inserted.
        """

    @abstractmethod
    def _prune(self, before: datetime, *, keep_summaries: bool) -> PruneReport:
        """Drop raw latencies and spans (or, without summaries, whole evaluations) of the evaluations
        in a terminal status whose `finished_at` (or `created_at` when none) is before `before`, in
        one transaction."""


def _batches(items: Iterable[Mapping[str, Any]], size: int) -> Iterator[tuple[int, list[Mapping[str, Any]]]]:
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


def _record_of(result: Mapping[str, Any]) -> tuple[EvaluationRecord, dict[str, Any] | None]:
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
