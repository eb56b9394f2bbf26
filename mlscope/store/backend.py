"""What a Store backend implements: `StoreBackend`, the one list of the private primitives `Store`'s
public methods (base.py) are built on, each with the contract it must keep, and the defaults a backend
may override where its database computes the same result itself (the layer totals, the comparison
rows).

A backend subclasses `Store`, never this class directly: the public methods own validation,
idempotency and the result shape, and call these primitives only with checked input. `Store` declares
no abstract method of its own, so its abstract surface is exactly this class's (tests/unit/
test_store_backend.py checks both that and that every backend implements every primitive).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from mlscope.store.maintenance import PruneReport
from mlscope.store.paging import MAX_LIST_LIMIT, SPAN_BATCH_SIZE, paged
from mlscope.store.records import (
    CompareFilter,
    EvaluationFilter,
    EvaluationRecord,
    LayerTotal,
    MeasurementRecord,
    SpanRecord,
    compare_rows,
    evaluation_to_dict,
    span_group_key,
)
from mlscope.store.records.history import HistoryFilter, SeriesFilter
from mlscope.store.schema import SchemaState, Upgraded

__all__ = ["StoreBackend"]


class StoreBackend(ABC):
    """The primitives under `Store`'s public methods: storage only, on checked input.

    Every abstract method here is a backend's obligation, grouped as `Store` uses them: systems,
    the lifecycle, reading, spans, starts and leases, aggregates, bulk import and retention, schema
    versions, and `close`. Each must be safe to call from several processes on the same store.
    """

    # The backend's short name ("sql", "mongodb"), for messages and logs.
    NAME: ClassVar[str]

    # ----- systems ---------------------------------------------------------------------------------

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
    def _system_ids_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        """System ids starting with `prefix` (taken literally, no wildcards), sorted ascending.

        Args:
            prefix: the start of an id.
            limit: return at most this many.
        """

    # ----- the lifecycle ---------------------------------------------------------------------------

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

    # ----- reading ---------------------------------------------------------------------------------

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

    # ----- spans -----------------------------------------------------------------------------------

    @abstractmethod
    def _insert_spans(self, evaluation_id: str, spans: Sequence[SpanRecord]) -> int:
        """Stores the spans (at most SPAN_BATCH_SIZE, distinct span ids) of an existing evaluation,
        skipping any whose (evaluation_id, span_id) is stored already; safe under concurrency.

        Returns:
            How many were stored.
        """

    @abstractmethod
    def _read_spans(
        self, evaluation_id: str, *, level: str | None, limit: int | None, offset: int
    ) -> list[SpanRecord]:
        """An evaluation's spans ordered by start_ns, then span_id.

        Args:
            evaluation_id: the full evaluation id.
            level: only spans of this level; any when None.
            limit: at most this many; all when None.
            offset: skipping this many first.
        """

    @abstractmethod
    def _count_spans(self, evaluation_id: str) -> int:
        """How many spans the evaluation has."""

    # ----- starts and leases -----------------------------------------------------------------------

    @abstractmethod
    def _start(self, id: str, *, changes: Mapping[str, Any]) -> tuple[str, int]:
        """In one transaction, and with the evaluation locked against concurrent transitions: if it is
        queued or running, set `changes` and add one to its attempts; otherwise change nothing. Two
        concurrent starts count two attempts.

        Returns:
            Its status after the call ("running" when it started, else the status it ended in) and
            its attempts after the call.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
        """

    @abstractmethod
    def _leased_transition(
        self, id: str, *, owner: str | None, expired_before: datetime | None, changes: Mapping[str, Any]
    ) -> bool:
        """Atomically: if the evaluation is running, its lease_owner is `owner` (any, None included,
        when `owner` is None) and its lease expired before `expired_before` (when given), set `changes`.

        Returns:
            Whether it changed.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
        """

    @abstractmethod
    def _expired_leases(self, now: datetime, *, limit: int) -> list[dict[str, Any]]:
        """Running evaluations with lease_expires_at < `now`, read through an index on (status,
        lease_expires_at), oldest expiry first, then by id; each with the LEASE_KEYS, timestamps aware
        UTC datetimes."""

    # ----- aggregates ------------------------------------------------------------------------------

    @abstractmethod
    def _history_points(self, where: HistoryFilter, *, limit: int) -> list[dict[str, Any]]:
        """The points of a history series (records.history.history_point), oldest first (created_at,
        then id), at most `limit` of them: the latest ones.

        Args:
            where: checked conditions.
            limit: at most this many.
        """

    @abstractmethod
    def _series_keys(self, where: SeriesFilter) -> list[dict[str, Any]]:
        """The series `where` selects points of (records.history.series_summary), in any order.

        Args:
            where: checked conditions.
        """

    # ----- bulk import and retention ---------------------------------------------------------------

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

    # ----- schema versions -------------------------------------------------------------------------

    @abstractmethod
    def _schema_state(self) -> SchemaState:
        """What the store's database holds now, read without changing anything."""

    @abstractmethod
    def _upgrade_schema(self) -> Upgraded:
        """Looks again under the backend's lock (another process may have upgraded meanwhile) and
        brings an empty or older store to the current schema, all or nothing.

        Raises:
            UserError: the refusal of a newer or foreign store (SchemaState.check).
            RuntimeError: the migration failed; nothing was changed.
        """

    # ----- defaults a backend may override ---------------------------------------------------------

    def _layer_totals(
        self, evaluation_id: str, *, level: str, group_by: str
    ) -> tuple[list[LayerTotal], int | None]:
        """The per-group totals of a layer breakdown, and the MODEL-level spans' summed duration (None
        when there are none). This default reads the spans page by page; a backend may compute the
        same integers where the spans are (the contract suite checks).

        Args:
            evaluation_id: the full evaluation id.
            level: the level of the spans grouped.
            group_by: one of SPAN_GROUPINGS (see records.span_group_key).
        """
        calls: dict[str, int] = {}
        totals: dict[str, int] = {}
        for span in self._iter_spans(evaluation_id, level):
            key = span_group_key(span, group_by)
            calls[key] = calls.get(key, 0) + 1
            totals[key] = totals.get(key, 0) + span.end_ns - span.start_ns
        model_total_ns = None
        for span in self._iter_spans(evaluation_id, "MODEL"):
            model_total_ns = (model_total_ns or 0) + span.end_ns - span.start_ns
        return [LayerTotal(key, calls[key], totals[key]) for key in totals], model_total_ns

    def _iter_spans(self, evaluation_id: str, level: str) -> Iterator[SpanRecord]:
        yield from paged(
            lambda offset: self._read_spans(evaluation_id, level=level, limit=SPAN_BATCH_SIZE, offset=offset)
        )

    def _compare_rows(self, where: CompareFilter) -> list[dict[str, Any]]:
        """The comparison rows for `where`. This default reads matching evaluations page by page and
        builds the rows with records.compare_rows; a backend with a query language of its own may
        override it, provided it returns the same rows (the contract suite checks)."""
        one: dict[str, Any] = {
            name: values[0] if len(values) == 1 else None
            for name, values in (
                ("model", where.models),
                ("framework", where.frameworks),
                ("system_id", where.system_ids),
            )
        }
        if where.ids:
            found = (self._read_evaluation(i, include_raw=False) for i in dict.fromkeys(where.ids))
            records = [r for r in found if r is not None and r.status == "succeeded"]
        else:
            base = EvaluationFilter(status="succeeded", since=where.since, until=where.until, **one)
            records = list(
                paged(lambda offset: self._query_evaluations(base, limit=MAX_LIST_LIMIT, offset=offset))
            )
        evaluations = [
            evaluation_to_dict(r)
            for r in records
            if (not where.models or r.model_name in where.models)
            and (not where.frameworks or r.framework_name in where.frameworks)
            and (not where.system_ids or r.system_id in where.system_ids)
            and (where.since is None or r.created_at >= where.since)
            and (where.until is None or r.created_at < where.until)
        ]
        return compare_rows(evaluations, where)

    # ----- lifetime --------------------------------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Releases connections; the store is unusable afterwards. Calling it twice is harmless."""
