"""The Store interface: where evaluations, their measurements, the systems they ran on and their traced
spans are kept.

`Store` is the whole public interface in one class: its methods own everything backends must agree on
(validation, the lifecycle `queued → running → succeeded | failed | cancelled`, leases, idempotency,
id prefixes, the result shape, bulk import, retention and schema versions). A backend subclasses it
and implements the private primitives of `StoreBackend` (backend.py), the one list of what a backend
must do; `Store` adds no abstract method of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.result import EvaluationResult
from mlscope.contract.system_ids import system_ids
from mlscope.store.backend import StoreBackend
from mlscope.store.errors import (
    CANDIDATES_SHOWN,
    AmbiguousEvaluationId,
    AmbiguousSystemId,
    EvaluationNotFound,
    InvalidTransition,
    SystemNotFound,
)
from mlscope.store.leases import check_lease_s
from mlscope.store.maintenance import IMPORT_BATCH_SIZE, PruneReport, batches, record_of
from mlscope.store.paging import (
    EXPORT_PAGE_SIZE,
    MAX_LIST_LIMIT,
    SPAN_BATCH_SIZE,
    check_page,
    decode_cursor,
    encode_cursor,
)
from mlscope.store.records import (
    ACTIVE_STATUSES,
    SPAN_GROUPINGS,
    SPAN_LEVELS,
    TRACE_LEVELS,
    CompareFilter,
    EvaluationFilter,
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
from mlscope.store.records.history import (
    DEFAULT_HISTORY_POINTS,
    check_history,
    check_series_filter,
    series_order,
)
from mlscope.store.schema import Upgraded

__all__ = ["MAX_LIST_LIMIT", "MIN_PREFIX_LENGTH", "SPAN_BATCH_SIZE", "Store"]

# Shorter prefixes would match too often to be worth the lookup; git uses the same floor.
MIN_PREFIX_LENGTH = 4
# An evaluation that ends is no runner's any more: finishing, failing and cancelling drop its lease.
_NO_LEASE: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Store(StoreBackend):
    """Results of evaluations, and the systems they ran on.

    Every method is safe to call from several processes on the same store; writes that repeat
    (a redelivered job, a retried submit) are idempotent as documented per method. The parts, in
    order: systems, the lifecycle (create, start, finish, fail, cancel), reading (one evaluation,
    listings, comparisons), history, spans, leases, bulk import and retention, schema versions, and
    the lifetime (`close`, a backend's, and `with`).
    """

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

    def resolve_system_id(self, prefix: str) -> str:
        """The full id of the system `prefix` names: an exact id, or a unique prefix of at least
        MIN_PREFIX_LENGTH characters (as `resolve_id` for evaluations; tables print 8).

        Raises:
            SystemNotFound: when nothing matches.
            AmbiguousSystemId: when several systems match, listing them.
        """
        check_text(prefix, "system_id")
        candidates = self._system_ids_with_prefix(prefix, limit=CANDIDATES_SHOWN + 1)
        # Ids sort before their own extensions, so an exact match is always the first candidate.
        if candidates and candidates[0] == prefix:
            return prefix
        if len(prefix) < MIN_PREFIX_LENGTH:
            raise SystemNotFound(prefix, f" (an id prefix needs at least {MIN_PREFIX_LENGTH} characters)")
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            raise SystemNotFound(prefix)
        raise AmbiguousSystemId(prefix, candidates)

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

    def start_evaluation(
        self,
        id: str,
        *,
        started_at: datetime | None = None,
        lease_owner: str | None = None,
        lease_s: float | None = None,
    ) -> int:
        """Marks the evaluation running and counts the attempt. A redelivered job may start again:
        running → running, one more attempt, the lease taken over by the new runner.

        Args:
            id: the full evaluation id.
            started_at: aware datetime; now when None.
            lease_owner: who runs it (a worker's agent id, a process); with `lease_s`, or neither.
            lease_s: seconds the lease lasts from now unless renewed (`renew_lease`); greater than 0.
                Without a lease, any lease an earlier start took is dropped.

        Returns:
            How many times the evaluation has been started, this start included.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
            InvalidTransition: when the evaluation has already ended.
            UserError: naming `lease_owner` or `lease_s` when one is given without the other or is
                invalid.
        """
        checked_id = check_text(id, "id")
        changes: dict[str, Any] = {
            "status": "running",
            "started_at": check_aware(started_at, "started_at") or _now(),
            "lease_owner": None,
            "lease_expires_at": None,
        }
        if (lease_owner is None) != (lease_s is None):
            missing = "lease_s" if lease_s is None else "lease_owner"
            raise UserError(
                f"a lease needs both lease_owner and lease_s; {missing} is missing", field=missing
            )
        if lease_owner is not None:
            changes["lease_owner"] = check_text(lease_owner, "lease_owner")
            changes["lease_expires_at"] = _now() + timedelta(seconds=check_lease_s(lease_s))
        status, attempts = self._start(checked_id, changes=changes)
        if status != "running":
            raise InvalidTransition(id, status, "running")
        return attempts

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
        machine_id, stack_id = system_ids(checked_system, checked_framework["details"])
        changes = {
            "status": "succeeded",
            "system_id": checked_system["id"],
            "machine_id": machine_id,
            "stack_id": stack_id,
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
        cursor: str | None = None,
    ) -> list[EvaluationResult]:
        """Evaluations matching every given condition, newest first (then by id), without raw latencies.

        Args:
            model, framework: model and framework names.
            system_id: the id of the system they ran on.
            status: one of STATUSES.
            since, until: aware datetimes bounding created_at; since inclusive, until exclusive.
            limit: at most this many, 1 to MAX_LIST_LIMIT.
            offset: skip this many first.
            cursor: continue after the evaluation this cursor names (the `next_cursor` of
                `page_evaluations`, or `encode_cursor` of an evaluation's created_at and id), so that
                pages stay put while evaluations are added; `offset` then skips from there.

        Raises:
            UserError: naming the invalid filter, or "cursor".
        """
        where = self._listing(model, framework, system_id, status, since, until, limit, offset, cursor)
        return [evaluation_to_dict(r) for r in self._query_evaluations(where, limit=limit, offset=offset)]

    def page_evaluations(
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
        cursor: str | None = None,
    ) -> tuple[list[EvaluationResult], str | None]:
        """One page of `list_evaluations` (same arguments and errors), and the cursor of the next page.

        Returns:
            (the evaluations, the cursor that continues after the last of them), the cursor None when
            no evaluation follows.
        """
        where = self._listing(model, framework, system_id, status, since, until, limit, offset, cursor)
        records = self._query_evaluations(where, limit=limit, offset=offset)
        items = [evaluation_to_dict(r) for r in records]
        if len(records) < limit:
            return items, None
        # Whether one more follows: the same filter, checked once, after the page's last evaluation.
        last = records[-1]
        more = self._query_evaluations(replace(where, after=(last.created_at, last.id)), limit=1, offset=0)
        return items, encode_cursor(items[-1]["created_at"], items[-1]["id"]) if more else None

    def iter_evaluations(
        self,
        *,
        model: str | None = None,
        framework: str | None = None,
        system_id: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        page_size: int = EXPORT_PAGE_SIZE,
    ) -> Iterator[EvaluationResult]:
        """Every evaluation `list_evaluations` would find with no limit, in its order, read `page_size`
        at a time by keyset cursor: memory stays flat however many there are, and evaluations added
        during the walk never shift it (those created later than the walk's position are not in it).

        The arguments are checked before this returns, so a bad filter raises here, not mid-walk.

        Raises:
            UserError: naming the invalid filter, or "page_size".
        """
        if (
            isinstance(page_size, bool)
            or not isinstance(page_size, int)
            or not 1 <= page_size <= MAX_LIST_LIMIT
        ):
            raise UserError(
                f"page_size={page_size!r} must be an integer from 1 to {MAX_LIST_LIMIT}", field="page_size"
            )
        where = self._listing(model, framework, system_id, status, since, until, page_size, 0, None)
        return self._walk(where, page_size)

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

    # ----- history ---------------------------------------------------------------------------------

    def history(
        self,
        *,
        model: str,
        framework: str,
        system_id: str | None = None,
        device: str | None = None,
        scenario: str = "single_stream",
        batch_size: int = 1,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = DEFAULT_HISTORY_POINTS,
        manifest_sha256: str | None = None,
        framework_version: str | None = None,
        machine_id: str | None = None,
        stack_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """How one model on one framework performed over time: a point per succeeded evaluation that
        measured `scenario` at `batch_size`, oldest first (created_at, then id).

        One series in the strict sense (records.history: one manifest, framework version, machine,
        stack and device) when every argument is given; otherwise the points of every series that
        matches, each point saying which it belongs to.

        Args:
            model, framework: the model and framework names.
            machine_id, stack_id, device: only evaluations on this machine, stack (contract.system_ids)
                and device; any when None.
            system_id: only evaluations on the machines and stacks this system was measured on (under
                any system id); any when None.
            manifest_sha256, framework_version: only evaluations of this manifest, on this version of
                the framework; any when None.
            scenario, batch_size: the measurement each point is read from.
            since, until: aware datetimes bounding created_at; since inclusive, until exclusive.
            limit: at most this many points, the latest ones; 1 to records.history.MAX_HISTORY_POINTS.

        Returns:
            Points {"evaluation_id", "created_at" (ISO 8601), "system_id", "device", "manifest_sha256",
            "framework_version", "median_ms", "ci_low_ms", "ci_high_ms", "p99_ms", "throughput",
            "valid", "workload_key", "machine_id", "stack_id"}.

        Raises:
            UserError: naming the invalid argument.
        """
        where = check_history(
            model=model,
            framework=framework,
            system_id=system_id,
            device=device,
            scenario=scenario,
            batch_size=batch_size,
            since=since,
            until=until,
            limit=limit,
            manifest_sha256=manifest_sha256,
            framework_version=framework_version,
            machine_id=machine_id,
            stack_id=stack_id,
        )
        return self._history_points(where, limit=limit)

    def history_series(
        self,
        *,
        model: str | None = None,
        framework: str | None = None,
        manifest_sha256: str | None = None,
        framework_version: str | None = None,
        system_id: str | None = None,
        device: str | None = None,
        scenario: str | None = None,
        batch_size: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        machine_id: str | None = None,
        stack_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """The history series that have points matching every given condition: what `history` can be
        asked for, one entry per series key (records.history.SERIES_KEY_FIELDS), counted in the
        database.

        Args:
            model ... batch_size, machine_id, stack_id: only series with this key value; any when None.
            system_id: only series on the machines and stacks this system was measured on.
            since, until: aware datetimes bounding created_at; since inclusive, until exclusive. Only
                the points in between are counted, and series with none are left out.

        Returns:
            {"model", "manifest_sha256", "framework", "framework_version", "machine_id", "stack_id",
            "device", "scenario", "batch_size", "system_id" (the greatest system id among its points),
            "points", "first_at", "last_at"} per series, ordered by key (None first, strings by code
            point).

        Raises:
            UserError: naming the invalid argument.
        """
        where = check_series_filter(
            model=model,
            framework=framework,
            manifest_sha256=manifest_sha256,
            framework_version=framework_version,
            system_id=system_id,
            machine_id=machine_id,
            stack_id=stack_id,
            device=device,
            scenario=scenario,
            batch_size=batch_size,
            since=since,
            until=until,
        )
        return sorted(self._series_keys(where), key=series_order)

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

    # ----- leases ----------------------------------------------------------------------------------

    def renew_lease(self, id: str, *, owner: str, lease_s: float) -> bool:
        """Extends the lease of a running evaluation to `lease_s` seconds from now, if `owner` holds it.

        Returns:
            True when renewed; False, changing nothing, when the evaluation is not running or another
            runner (or none) holds its lease: its runner should stop, its work is someone else's now.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
            UserError: naming `owner` or `lease_s` when invalid.
        """
        checked_owner = check_text(owner, "owner")
        expires_at = _now() + timedelta(seconds=check_lease_s(lease_s))
        return self._leased_transition(
            check_text(id, "id"),
            owner=checked_owner,
            expired_before=None,
            changes={"lease_expires_at": expires_at},
        )

    def expired_leases(self, *, now: datetime | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Running evaluations whose lease expired before `now`: their runners stopped renewing.
        Evaluations running without a lease are never listed.

        Args:
            now: aware datetime; the current time when None.
            limit: at most this many, 1 to MAX_LIST_LIMIT.

        Returns:
            The oldest expiry first (then by id), each {"id", "lease_owner", "lease_expires_at" (aware
            datetime), "attempts", "queue" (None: it came from no queue), "request", "trace_id",
            "created_at" (aware datetime)}.

        Raises:
            UserError: naming `now` or `limit` when invalid.
        """
        checked_now = check_aware(now, "now") or _now()
        check_int("limit", limit, 1)
        if limit > MAX_LIST_LIMIT:
            raise UserError(f"limit={limit} is too large: at most {MAX_LIST_LIMIT}", field="limit")
        return self._expired_leases(checked_now, limit=limit)

    def requeue_evaluation(
        self, id: str, *, owner: str | None, expired_before: datetime | None = None
    ) -> bool:
        """Sends a running evaluation back to queued, as it was before it started: lease and
        started_at cleared, its attempts kept (the next start counts one more).

        Args:
            id: the full evaluation id.
            owner: only if this runner holds its lease; None: whoever holds it (a sweeper).
            expired_before: aware datetime; when given, only if its lease expired before then, so that
                a sweeper never takes an evaluation whose runner renewed it after it was listed.

        Returns:
            True when it went back to queued; False, changing nothing, when it is not running or the
            condition does not hold.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
            UserError: naming the invalid argument.
        """
        changes = {"status": "queued", "started_at": None, "lease_owner": None, "lease_expires_at": None}
        return self._leased_transition(
            check_text(id, "id"),
            owner=check_optional_text(owner, "owner"),
            expired_before=check_aware(expired_before, "expired_before"),
            changes=changes,
        )

    # ----- bulk import and retention ---------------------------------------------------------------

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
        for first, batch in batches(results, batch_size):
            records: list[EvaluationRecord] = []
            systems: dict[str, dict[str, Any]] = {}
            for offset, result in enumerate(batch):
                try:
                    record, system = record_of(result)
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

    # ----- schema versions -------------------------------------------------------------------------

    def schema_status(self) -> dict[str, Any]:
        """The store's schema version against the one this mlscope needs. Works on a store opened
        with `open_store(url, check_schema=False)`, whatever it holds.

        Returns:
            {"backend", "store_url" (password masked), "state" (one of SCHEMA_STATES), "current"
            (None when empty or foreign), "required", "upgrade_needed", "note", "message" (why the
            store cannot be used as it is, or None)}.
        """
        state = self._schema_state()
        refusal = state.refusal()
        return {
            "backend": state.backend,
            "store_url": state.location,
            "state": state.state,
            "current": state.current,
            "required": state.required,
            "upgrade_needed": state.state == "older",
            "note": state.note,
            "message": None if refusal is None else str(refusal),
        }

    def upgrade(self) -> dict[str, Any]:
        """Brings the store to the schema this mlscope needs: an older one is migrated (its stored
        rows backfilled with the new fields), an empty one created; a current one is left as it is.
        A failed upgrade changes nothing.

        Returns:
            {"backend", "store_url", "from" (None: it was empty), "to", "upgraded" (False when there
            was nothing to do), "steps" (the versions applied), "backfilled" (rows given the new
            fields), "backup" (the path of a copy of the database from before, or None)}.

        Raises:
            UserError: when the store was written by a newer mlscope or holds another application's
                data; nothing is changed then.
            RuntimeError: when the migration itself failed; it was rolled back.
        """
        state = self._schema_state()
        if state.state in ("newer", "foreign"):
            state.check()
        upgraded = Upgraded(previous=state.current) if state.state == "current" else self._upgrade_schema()
        return {
            "backend": state.backend,
            "store_url": state.location,
            "from": upgraded.previous,
            "to": state.required,
            "upgraded": bool(upgraded.steps),
            "steps": list(upgraded.steps),
            "backfilled": upgraded.backfilled,
            "backup": upgraded.backup,
        }

    # ----- lifetime --------------------------------------------------------------------------------

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # ----- helpers ---------------------------------------------------------------------------------

    def _walk(self, where: EvaluationFilter, page_size: int) -> Iterator[EvaluationResult]:
        while page := self._query_evaluations(where, limit=page_size, offset=0):
            yield from (evaluation_to_dict(record) for record in page)
            if len(page) < page_size:
                return
            where = replace(where, after=(page[-1].created_at, page[-1].id))

    def _listing(
        self,
        model: str | None,
        framework: str | None,
        system_id: str | None,
        status: str | None,
        since: datetime | None,
        until: datetime | None,
        limit: int,
        offset: int,
        cursor: str | None,
    ) -> EvaluationFilter:
        where = check_filter(model, framework, system_id, status, since, until)
        check_page(limit, offset)
        return where if cursor is None else replace(where, after=decode_cursor(cursor))
