"""The Store interface: where evaluations, their measurements, the systems they ran on and their traced
spans are kept.

`Store`'s public methods own everything backends must agree on (validation, the lifecycle
`queued → running → succeeded | failed | cancelled`, idempotency, id prefixes, the result shape);
each backend implements only the small private primitives of `StorePrimitives` (primitives.py).
Starting an evaluation, its attempts and its runner's lease are in leases.py.
"""

from __future__ import annotations

import uuid
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, ClassVar

from mlscope.contract.errors import UserError
from mlscope.contract.result import EvaluationResult
from mlscope.store.aggregates import StoreAggregates
from mlscope.store.errors import CANDIDATES_SHOWN, AmbiguousEvaluationId, EvaluationNotFound, SystemNotFound
from mlscope.store.leases import StoreLeases
from mlscope.store.maintenance import StoreMaintenance
from mlscope.store.paging import MAX_LIST_LIMIT, SPAN_BATCH_SIZE
from mlscope.store.primitives import StorePrimitives
from mlscope.store.records import (
    ACTIVE_STATUSES,
    SPAN_GROUPINGS,
    SPAN_LEVELS,
    TRACE_LEVELS,
    CompareFilter,
    EvaluationRecord,
    check_accuracy,
    check_aware,
    check_batch_size,
    check_choice,
    check_cold_start,
    check_error,
    check_filter,
    check_framework,
    check_int,
    check_measurements,
    check_memory,
    check_model,
    check_object,
    check_optional_text,
    check_parity,
    check_spans,
    check_system,
    check_text,
    check_trace_id,
    evaluation_to_dict,
    layer_rows,
    span_to_dict,
)
from mlscope.store.schema import StoreSchema

__all__ = ["MAX_LIST_LIMIT", "MIN_PREFIX_LENGTH", "SPAN_BATCH_SIZE", "Store"]

# Shorter prefixes would match too often to be worth the lookup; git uses the same floor.
MIN_PREFIX_LENGTH = 4
# An evaluation that ends is no runner's any more: finishing, failing and cancelling drop its lease.
_NO_LEASE: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Store(StoreLeases, StoreAggregates, StoreMaintenance, StoreSchema, StorePrimitives):
    """Results of evaluations, and the systems they ran on.

    Every method is safe to call from several processes on the same store; writes that repeat
    (a redelivered job, a retried submit) are idempotent as documented per method.
    """

    NAME: ClassVar[str]

    # ----- systems ---------------------------------------------------------------------------------

    def save_system(self, system: Mapping[str, Any]) -> str:
        """Keeps a hardware/software description; saving the same id again keeps the first.

        Args:
            system: JSON-able description with an "id" that is a hash of its content.

        Returns:
            The system's id.

        Raises:
            UserError: when `system` is not JSON-able or has no string "id".
        """
        checked = check_system(system)
        self._insert_system(checked["id"], checked)
        return str(checked["id"])

    def get_system(self, id: str) -> dict[str, Any]:
        """The system description saved under `id`, "id" included.

        Raises:
            SystemNotFound: when no system has this id.
        """
        system = self._read_system(check_text(id, "system_id"))
        if system is None:
            raise SystemNotFound(id)
        return system

    def list_systems(self) -> list[dict[str, Any]]:
        """Every saved system description, ordered by id."""
        return self._read_systems()

    # ----- the lifecycle ---------------------------------------------------------------------------

    def create_evaluation(
        self,
        *,
        model: Mapping[str, Any],
        manifest: Mapping[str, Any],
        framework: Mapping[str, Any],
        runner: str,
        device: str,
        request: Mapping[str, Any],
        trace_level: str = "NO_TRACE",
        trace_id: str | None = None,
        id: str | None = None,
        created_at: datetime | None = None,
        queue: str | None = None,
    ) -> str:
        """Records a queued evaluation.

        Args:
            model: {"name", "version", "manifest_sha256"}.
            manifest: snapshot of the validated manifest the evaluation runs.
            framework: {"name", "version"}; version may be None until the framework is imported.
            runner: how the predictor is isolated (inline, process, docker).
            device: where it runs ("cpu", "cuda:0", ...).
            request: snapshot of the request as submitted.
            trace_level: one of TRACE_LEVELS.
            trace_id: the OpenTelemetry trace (32 lower-case hex digits) the evaluation's spans
                belong to; None when it is not traced.
            id: the id to use; a new one when None. Submitting an id that exists changes nothing,
                so a retried submit is harmless.
            created_at: aware datetime; now when None.
            queue: the broker queue its job is sent to; None when it is run in place (`mlscope run`).
                A sweeper sends an evaluation whose runner died back to this queue.

        Returns:
            The evaluation's id.

        Raises:
            UserError: naming the first invalid field.
        """
        checked_model = check_model(model)
        checked_framework = check_framework(framework)
        if trace_level not in TRACE_LEVELS:
            raise UserError(
                f"trace_level={trace_level!r} is not one of {', '.join(TRACE_LEVELS)}", field="trace_level"
            )
        record = EvaluationRecord(
            id=uuid.uuid4().hex if id is None else check_text(id, "id"),
            status="queued",
            model_name=checked_model["name"],
            model_version=checked_model["version"],
            manifest_sha256=checked_model["manifest_sha256"],
            framework_name=checked_framework["name"],
            framework_version=checked_framework["version"],
            runner=check_text(runner, "runner"),
            device=check_text(device, "device"),
            trace_level=trace_level,
            trace_id=None if trace_id is None else check_trace_id(trace_id, "trace_id"),
            request=check_object(request, "request"),
            manifest=check_object(manifest, "manifest"),
            created_at=check_aware(created_at, "created_at") or _now(),
            queue=check_optional_text(queue, "queue"),
        )
        self._insert_evaluation(record)
        return record.id

    def finish_evaluation(
        self,
        id: str,
        *,
        system: Mapping[str, Any],
        framework: Mapping[str, Any],
        cold_start: Mapping[str, Any],
        measurements: Sequence[Mapping[str, Any]],
        accuracy: Mapping[str, Any] | None = None,
        parity: Mapping[str, Any] | None = None,
        memory: Mapping[str, Any] | None = None,
        finished_at: datetime | None = None,
    ) -> None:
        """Stores the results and marks the evaluation succeeded, atomically.

        Only a queued or running evaluation changes: finishing one that has ended (a redelivered job
        finishing twice, a job cancelled meanwhile) leaves it exactly as it was, so an evaluation never
        holds two sets of measurements.

        Args:
            id: the full evaluation id.
            system: the description of the machine it ran on (saved as by `save_system`).
            framework: {"name", "version"}; the version installed where it ran is kept.
            cold_start: {"import_ms", "load_ms", "first_inference_ms", ...}.
            measurements: one per (scenario, batch_size), each {"scenario", "batch_size",
                "latency_ms", "throughput", "validity", "latencies_ns", ...}; other keys are kept.
            accuracy: {"dataset", "count", "top1", "top5", "ci", ...} when accuracy was measured
                (records.check_accuracy); None leaves the result without the section.
            parity: {"against", "count", "verdict", "max_abs", ...} when outputs were compared with
                another framework's (records.check_parity); None leaves the result without it.
            memory: {"peak_rss_mb", "peak_device_mb", ...}, the predictor process's peaks
                (records.check_memory); None leaves the result without it.
            finished_at: aware datetime; now when None.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
            UserError: naming the first invalid field; nothing is stored then.
        """
        checked_system = check_system(system)
        checked_framework = check_framework(framework)
        changes = {
            "status": "succeeded",
            "system_id": checked_system["id"],
            "framework_version": checked_framework["version"],
            "framework_details": checked_framework["details"],
            "cold_start": check_cold_start(cold_start),
            "error": None,
            "finished_at": check_aware(finished_at, "finished_at") or _now(),
            **_NO_LEASE,
        }
        if accuracy is not None:
            changes["accuracy"] = check_accuracy(accuracy)
        if parity is not None:
            changes["parity"] = check_parity(parity)
        if memory is not None:
            changes["memory"] = check_memory(memory)
        records = check_measurements(measurements)
        # Saved outside the transaction: systems are content-addressed and shared, so one saved for a
        # finish that then changes nothing is still a true description of a machine.
        self._insert_system(checked_system["id"], checked_system)
        self._transition(
            check_text(id, "id"), allowed_from=ACTIVE_STATUSES, changes=changes, measurements=records
        )

    def fail_evaluation(
        self, id: str, *, error: Mapping[str, Any], finished_at: datetime | None = None
    ) -> None:
        """Marks a queued or running evaluation failed, keeping the error; an ended one is left as is.

        Args:
            id: the full evaluation id.
            error: {"type", "message", "phase"}.
            finished_at: aware datetime; now when None.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
            UserError: naming the first invalid field.
        """
        changes = {
            "status": "failed",
            "error": check_error(error),
            "finished_at": check_aware(finished_at, "finished_at") or _now(),
            **_NO_LEASE,
        }
        self._transition(check_text(id, "id"), allowed_from=ACTIVE_STATUSES, changes=changes)

    def cancel_evaluation(self, id: str) -> bool:
        """Cancels a queued or running evaluation.

        Args:
            id: the evaluation id or a unique prefix of it.

        Returns:
            True if it was cancelled by this call, False if it had already ended.

        Raises:
            EvaluationNotFound, AmbiguousEvaluationId: as `resolve_id`.
        """
        full_id = self.resolve_id(id)
        changes = {"status": "cancelled", "finished_at": _now(), **_NO_LEASE}
        return self._transition(full_id, allowed_from=ACTIVE_STATUSES, changes=changes) in ACTIVE_STATUSES

    # ----- reading ---------------------------------------------------------------------------------

    def resolve_id(self, prefix: str) -> str:
        """The full id of the evaluation `prefix` names: an exact id, or a unique prefix of at least
        MIN_PREFIX_LENGTH characters (like git's abbreviated hashes).

        Raises:
            EvaluationNotFound: when nothing matches.
            AmbiguousEvaluationId: when several evaluations match, listing them.
        """
        check_text(prefix, "id")
        if len(prefix) < MIN_PREFIX_LENGTH:
            if self._ids_with_prefix(prefix, limit=1) == [prefix]:
                return prefix
            raise EvaluationNotFound(prefix, f" (an id prefix needs at least {MIN_PREFIX_LENGTH} characters)")
        candidates = self._ids_with_prefix(prefix, limit=CANDIDATES_SHOWN + 1)
        # Ids sort before their own extensions, so an exact match is always the first candidate.
        if candidates and (len(candidates) == 1 or candidates[0] == prefix):
            return candidates[0]
        if not candidates:
            raise EvaluationNotFound(prefix)
        raise AmbiguousEvaluationId(prefix, candidates)

    def get_evaluation(self, id: str, *, include_raw: bool = False) -> EvaluationResult:
        """One evaluation in the public result shape.

        Args:
            id: the evaluation id or a unique prefix of it.
            include_raw: add each measurement's "latencies_ns" (can be large).

        Raises:
            EvaluationNotFound, AmbiguousEvaluationId: as `resolve_id`.
        """
        full_id = self.resolve_id(id)
        record = self._read_evaluation(full_id, include_raw=include_raw)
        if record is None:
            raise EvaluationNotFound(id)
        return evaluation_to_dict(record, include_raw=include_raw)

    def count_evaluations(
        self,
        *,
        model: str | None = None,
        framework: str | None = None,
        system_id: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        """How many evaluations `list_evaluations` would find with no limit; same filters and errors."""
        return self._count_evaluations(check_filter(model, framework, system_id, status, since, until))

    def compare(
        self,
        *,
        ids: Sequence[str] = (),
        models: Sequence[str] = (),
        frameworks: Sequence[str] = (),
        system_ids: Sequence[str] = (),
        batch_sizes: Sequence[int] = (),
        scenarios: Sequence[str] = (),
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[dict[str, Any]]:
        """The side-by-side table of succeeded evaluations (records.COMPARE_COLUMNS).

        One row per (model, framework, system, device, scenario, batch size, workload key:
        contract.workload.workload_key), from the latest evaluation of each; every argument narrows
        the evaluations drawn on (empty: any).

        Args:
            ids: full evaluation ids (a batch's ids, say).
            models, frameworks, system_ids, batch_sizes, scenarios: allowed values.
            since, until: aware datetimes bounding created_at.

        Raises:
            UserError: naming the invalid argument.
        """
        where = CompareFilter(
            ids=tuple(check_text(i, "ids") for i in ids),
            models=tuple(check_text(m, "models") for m in models),
            frameworks=tuple(check_text(f, "frameworks") for f in frameworks),
            system_ids=tuple(check_text(s, "system_ids") for s in system_ids),
            batch_sizes=tuple(check_batch_size(b) for b in batch_sizes),
            scenarios=tuple(check_text(s, "scenarios") for s in scenarios),
            since=check_aware(since, "since"),
            until=check_aware(until, "until"),
        )
        return self._compare_rows(where)

    # ----- spans -----------------------------------------------------------------------------------

    def save_spans(self, evaluation_id: str, spans: Sequence[Mapping[str, Any]]) -> int:
        """Keeps the spans traced while running an evaluation; saving a span again stores nothing new.

        Every span is checked before any is stored; they are stored in batches of SPAN_BATCH_SIZE, so
        one call may carry hundreds of thousands.

        Args:
            evaluation_id: the full evaluation id.
            spans: each {"trace_id": 32 lower-case hex digits, "span_id": 16, "parent_id": 16 or None,
                "name", "level": one of SPAN_LEVELS, "start_ns", "end_ns" ≥ start_ns (integer
                nanoseconds), "attributes": a JSON object}. A span id is unique within an evaluation.

        Returns:
            How many of the spans were new.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
            UserError: naming the first invalid field, e.g. "spans.3.end_ns"; nothing is stored then.
        """
        id = check_text(evaluation_id, "evaluation_id")
        if self._ids_with_prefix(id, limit=1) != [id]:
            raise EvaluationNotFound(id)
        records = check_spans(spans)
        return sum(
            self._insert_spans(id, records[start : start + SPAN_BATCH_SIZE])
            for start in range(0, len(records), SPAN_BATCH_SIZE)
        )

    def get_spans(
        self, evaluation_id: str, *, level: str | None = None, limit: int | None = None, offset: int = 0
    ) -> list[dict[str, Any]]:
        """An evaluation's spans in the shape `save_spans` takes, ordered by start_ns, then span_id.

        Args:
            evaluation_id: the evaluation id or a unique prefix of it.
            level: only spans of this level (one of SPAN_LEVELS); any level when None.
            limit: at most this many (1 or more); all when None.
            offset: skip this many first.

        Raises:
            EvaluationNotFound, AmbiguousEvaluationId: as `resolve_id`.
            UserError: naming the invalid argument.
        """
        full_id = self.resolve_id(evaluation_id)
        checked_level = None if level is None else check_choice(level, SPAN_LEVELS, "level")
        if limit is not None:
            check_int("limit", limit, 1)
        check_int("offset", offset, 0)
        records = self._read_spans(full_id, level=checked_level, limit=limit, offset=offset)
        return [span_to_dict(record) for record in records]

    def count_spans(self, evaluation_id: str) -> int:
        """How many spans an evaluation has.

        Raises:
            EvaluationNotFound, AmbiguousEvaluationId: as `resolve_id`.
        """
        return self._count_spans(self.resolve_id(evaluation_id))

    def layer_breakdown(
        self, evaluation_id: str, *, level: str = "FRAMEWORK", group_by: str = "name"
    ) -> list[dict[str, Any]]:
        """Where an evaluation's time went at one trace level: its spans grouped by name or layer type.

        Args:
            evaluation_id: the evaluation id or a unique prefix of it.
            level: the spans' level, one of SPAN_LEVELS.
            group_by: "name", or "layer_type" (the span's attributes["layer_type"], its name when it
                has none).

        Returns:
            Rows {"key", "calls", "total_ms", "mean_ms", "share"}, largest total first, then by key;
            share is the fraction of the evaluation's MODEL-level time (of the rows' own total when it
            has no MODEL spans). See records.layer_rows.

        Raises:
            EvaluationNotFound, AmbiguousEvaluationId: as `resolve_id`.
            UserError: naming the invalid argument.
        """
        full_id = self.resolve_id(evaluation_id)
        checked_level = check_choice(level, SPAN_LEVELS, "level")
        checked_group_by = check_choice(group_by, SPAN_GROUPINGS, "group_by")
        totals, model_total_ns = self._layer_totals(full_id, level=checked_level, group_by=checked_group_by)
        return layer_rows(totals, model_total_ns)

    # ----- lifetime --------------------------------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Releases connections; the store is unusable afterwards. Calling it twice is harmless."""

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
