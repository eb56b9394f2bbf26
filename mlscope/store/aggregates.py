"""The Store's reads over many evaluations, computed where the data is: listings by page or by keyset
cursor, a listing walked whole without holding it, and history series of one model over time.

`StoreAggregates` is a mixin of `Store` (base.py): its public methods own validation and the result
shape, and the primitives it adds (`_history_points`, `_series_keys`) are implemented by each backend
in its own query language, never by reading evaluations one by one.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.result import EvaluationResult
from mlscope.store.paging import MAX_LIST_LIMIT, check_page, decode_cursor, encode_cursor
from mlscope.store.primitives import StorePrimitives
from mlscope.store.records import EvaluationFilter, check_filter, evaluation_to_dict
from mlscope.store.records.history import (
    DEFAULT_HISTORY_POINTS,
    HistoryFilter,
    SeriesFilter,
    check_history,
    check_series_filter,
    series_order,
)

__all__ = ["EXPORT_PAGE_SIZE", "StoreAggregates"]

# A walk through a listing (`iter_evaluations`) reads this many evaluations at a time.
EXPORT_PAGE_SIZE = 200


class StoreAggregates(StorePrimitives):
    """Listings by keyset cursor, whole listings as streams, and history series."""

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
        items = self.list_evaluations(
            model=model,
            framework=framework,
            system_id=system_id,
            status=status,
            since=since,
            until=until,
            limit=limit,
            offset=offset,
            cursor=cursor,
        )
        if len(items) < limit:
            return items, None
        next_cursor = encode_cursor(items[-1]["created_at"], items[-1]["id"])
        where = self._listing(model, framework, system_id, status, since, until, 1, 0, next_cursor)
        return items, next_cursor if self._query_evaluations(where, limit=1, offset=0) else None

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
    ) -> list[dict[str, Any]]:
        """How one model on one framework performed over time: a point per succeeded evaluation that
        measured `scenario` at `batch_size`, oldest first (created_at, then id).

        One series in the strict sense (records.history: one manifest, framework version, system and
        device) when every argument is given; otherwise the points of every series that matches, each
        point saying which it belongs to.

        Args:
            model, framework: the model and framework names.
            system_id, device: only evaluations on this system, on this device; any when None.
            manifest_sha256, framework_version: only evaluations of this manifest, on this version of
                the framework; any when None.
            scenario, batch_size: the measurement each point is read from.
            since, until: aware datetimes bounding created_at; since inclusive, until exclusive.
            limit: at most this many points, the latest ones; 1 to records.history.MAX_HISTORY_POINTS.

        Returns:
            Points {"evaluation_id", "created_at" (ISO 8601), "system_id", "device", "manifest_sha256",
            "framework_version", "median_ms", "ci_low_ms", "ci_high_ms", "p99_ms", "throughput",
            "valid"}.

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
    ) -> list[dict[str, Any]]:
        """The history series that have points matching every given condition: what `history` can be
        asked for, one entry per series key (records.history.SERIES_KEY_FIELDS), counted in the
        database.

        Args:
            model ... batch_size: only series with this key value; any when None.
            since, until: aware datetimes bounding created_at; since inclusive, until exclusive. Only
                the points in between are counted, and series with none are left out.

        Returns:
            {"model", "manifest_sha256", "framework", "framework_version", "system_id", "device",
            "scenario", "batch_size", "points", "first_at", "last_at"} per series, ordered by key (None
            first, strings by code point).

        Raises:
            UserError: naming the invalid argument.
        """
        where = check_series_filter(
            model=model,
            framework=framework,
            manifest_sha256=manifest_sha256,
            framework_version=framework_version,
            system_id=system_id,
            device=device,
            scenario=scenario,
            batch_size=batch_size,
            since=since,
            until=until,
        )
        return sorted(self._series_keys(where), key=series_order)

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
