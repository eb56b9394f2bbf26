"""The Store interface: where evaluations, their measurements and the systems they ran on are kept.

`Store`'s public methods own everything backends must agree on (validation, the lifecycle
`queued → running → succeeded | failed | cancelled`, idempotency, id prefixes, the result shape);
each backend implements only the small private primitives marked abstract below.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, ClassVar

from mlscope.errors import UserError

from .errors import (
    CANDIDATES_SHOWN,
    AmbiguousEvaluationId,
    EvaluationNotFound,
    InvalidTransition,
    SystemNotFound,
)
from .records import (
    ACTIVE_STATUSES,
    STATUSES,
    TERMINAL_STATUSES,
    TRACE_LEVELS,
    EvaluationFilter,
    EvaluationRecord,
    MeasurementRecord,
    check_aware,
    check_cold_start,
    check_error,
    check_framework,
    check_measurements,
    check_model,
    check_object,
    check_optional_text,
    check_system,
    check_text,
    evaluation_to_dict,
)

__all__ = ["MAX_LIST_LIMIT", "MIN_PREFIX_LENGTH", "Store"]

# Shorter prefixes would match too often to be worth the lookup; git uses the same floor.
MIN_PREFIX_LENGTH = 4
MAX_LIST_LIMIT = 1000


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Store(ABC):
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
        id: str | None = None,
        created_at: datetime | None = None,
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
            id: the id to use; a new one when None. Submitting an id that exists changes nothing,
                so a retried submit is harmless.
            created_at: aware datetime; now when None.

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
            request=check_object(request, "request"),
            manifest=check_object(manifest, "manifest"),
            created_at=check_aware(created_at, "created_at") or _now(),
        )
        self._insert_evaluation(record)
        return record.id

    def start_evaluation(self, id: str, *, started_at: datetime | None = None) -> None:
        """Marks the evaluation running. A redelivered job may start again: running → running.

        Args:
            id: the full evaluation id.
            started_at: aware datetime; now when None.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
            InvalidTransition: when the evaluation has already ended.
        """
        changes = {"status": "running", "started_at": check_aware(started_at, "started_at") or _now()}
        before = self._transition(check_text(id, "id"), allowed_from=ACTIVE_STATUSES, changes=changes)
        if before in TERMINAL_STATUSES:
            raise InvalidTransition(id, before, "running")

    def finish_evaluation(
        self,
        id: str,
        *,
        system: Mapping[str, Any],
        framework: Mapping[str, Any],
        cold_start: Mapping[str, Any],
        measurements: Sequence[Mapping[str, Any]],
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
        }
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
        changes = {"status": "cancelled", "finished_at": _now()}
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

    def get_evaluation(self, id: str, *, include_raw: bool = False) -> dict[str, Any]:
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

    def list_evaluations(
        self,
        *,
        model: str | None = None,
        framework: str | None = None,
        system_id: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Evaluations matching every given condition, newest first (then by id), without raw latencies.

        Args:
            model, framework: model and framework names.
            system_id: the id of the system they ran on.
            status: one of STATUSES.
            since, until: aware datetimes bounding created_at; since inclusive, until exclusive.
            limit: at most this many, 1 to MAX_LIST_LIMIT.
            offset: skip this many first.

        Raises:
            UserError: naming the invalid filter.
        """
        where = _check_filter(model, framework, system_id, status, since, until)
        for name, value, low, high in (("limit", limit, 1, MAX_LIST_LIMIT), ("offset", offset, 0, None)):
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < low
                or (high and value > high)
            ):
                bounds = f"from {low} to {high}" if high else f"{low} or more"
                raise UserError(f"{name}={value!r} must be an integer {bounds}", field=name)
        records = self._query_evaluations(where, limit=limit, offset=offset)
        return [evaluation_to_dict(record) for record in records]

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
        return self._count_evaluations(_check_filter(model, framework, system_id, status, since, until))

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

    # ----- primitives each backend implements --------------------------------------------------------

    @abstractmethod
    def _insert_system(self, id: str, system: dict[str, Any]) -> None:
        """Stores `system` under `id` unless a system with that id exists; safe under concurrency.

        Args:
            id: the system's id.
            system: its checked description, "id" included.
        """

    @abstractmethod
    def _read_system(self, id: str) -> dict[str, Any] | None:
        """The description stored under `id`.

        Returns:
            The description, or None when there is none.
        """

    @abstractmethod
    def _read_systems(self) -> list[dict[str, Any]]:
        """Every stored description, ordered by id."""

    @abstractmethod
    def _insert_evaluation(self, record: EvaluationRecord) -> None:
        """Stores `record` unless an evaluation with its id exists; safe under concurrency.

        Args:
            record: a checked, queued evaluation without system or measurements.
        """

    @abstractmethod
    def _transition(
        self,
        id: str,
        *,
        allowed_from: frozenset[str],
        changes: Mapping[str, Any],
        measurements: Sequence[MeasurementRecord] = (),
    ) -> str:
        """In one transaction, and with the evaluation locked against concurrent transitions: if its
        status is in `allowed_from`, set `changes` and add `measurements`; otherwise change nothing.

        Args:
            id: the full evaluation id.
            allowed_from: statuses the change may start from.
            changes: new values of EvaluationRecord fields.
            measurements: checked measurements to add with the change.

        Returns:
            The status the evaluation had before the call, whether or not it changed.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
        """

    @abstractmethod
    def _ids_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        """Ids starting with `prefix` (taken literally, no wildcards), sorted ascending.

        Args:
            prefix: the start of an id.
            limit: return at most this many.
        """

    @abstractmethod
    def _read_evaluation(self, id: str, *, include_raw: bool) -> EvaluationRecord | None:
        """The evaluation with its system and measurements.

        Args:
            id: the full evaluation id.
            include_raw: fill each measurement's `latencies_ns`; leave them None otherwise.

        Returns:
            The record, or None when there is none.
        """

    @abstractmethod
    def _query_evaluations(
        self, where: EvaluationFilter, *, limit: int, offset: int
    ) -> list[EvaluationRecord]:
        """Evaluations matching `where`, with systems and measurements (latencies_ns left None),
        ordered by created_at descending, then id ascending.

        Args:
            where: checked conditions.
            limit: at most this many.
            offset: skipping this many first.
        """

    @abstractmethod
    def _count_evaluations(self, where: EvaluationFilter) -> int:
        """How many evaluations match `where`."""


def _check_filter(
    model: str | None,
    framework: str | None,
    system_id: str | None,
    status: str | None,
    since: datetime | None,
    until: datetime | None,
) -> EvaluationFilter:
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
