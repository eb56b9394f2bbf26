"""The SQL of history series, run where the data is: one series' latest points (`history_query`), and
the series a filter selects, each counted by one GROUP BY (`series_keys_query`), on the measurements'
summary columns (SQLite and PostgreSQL alike)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

from sqlalchemy import ColumnElement, Row, Select, func, select, tuple_

from mlscope.store.records.history import HistoryFilter, SeriesFilter, history_point, series_summary
from mlscope.store.sql.tables import EvaluationRow, MeasurementRow

__all__ = ["history_query", "history_result", "series_keys_query", "series_keys_result"]

# records.history.SERIES_KEY_FIELDS as columns of evaluations (e) and measurements (m).
_E, _M = EvaluationRow, MeasurementRow
_KEY_COLUMNS: dict[str, Any] = {
    "model": _E.model_name,
    "manifest_sha256": _E.manifest_sha256,
    "framework": _E.framework_name,
    "framework_version": _E.framework_version,
    "machine_id": _E.machine_id,
    "stack_id": _E.stack_id,
    "device": _E.device,
    "scenario": _M.scenario,
    "batch_size": _M.batch_size,
}


def _conditions(where: SeriesFilter) -> list[ColumnElement[bool]]:
    """The succeeded measurements `where` selects: each key value it gives, its system's machines and
    stacks, and its time bounds."""
    conditions = [_E.status == "succeeded"]
    for name, column in _KEY_COLUMNS.items():
        value = getattr(where, name)
        if value is not None:
            conditions.append(column == value)
    if where.system_id is not None:
        of_system = select(_E.machine_id, _E.stack_id).where(_E.system_id == where.system_id).distinct()
        conditions.append(tuple_(_E.machine_id, _E.stack_id).in_(of_system))
    if where.since is not None:
        conditions.append(_E.created_at >= where.since)
    if where.until is not None:
        conditions.append(_E.created_at < where.until)
    return conditions


def history_query(where: HistoryFilter, *, limit: int, dialect: str) -> Select[Unpack[tuple[Any, ...]]]:
    """The latest `limit` points of a series, latest first (`history_result` turns them round)."""
    # The evaluation's id by code point, as Python orders it: PostgreSQL's collation "C".
    evaluation_id = _E.id.collate("C") if dialect == "postgresql" else _E.id
    return (
        select(
            _E.id,
            _E.created_at,
            _E.system_id,
            _E.device,
            _E.manifest_sha256,
            _E.framework_version,
            _M.median_ms,
            _M.ci_low_ms,
            _M.ci_high_ms,
            _M.p99_ms,
            _M.throughput,
            _M.valid,
            _M.workload_key,
            _E.machine_id,
            _E.stack_id,
        )
        .join_from(_E, _M, _M.evaluation_id == _E.id)
        .where(*_conditions(where))
        .order_by(_E.created_at.desc(), evaluation_id.desc())
        .limit(limit)
    )


def history_result(rows: Sequence[Row[Unpack[tuple[Any, ...]]]]) -> list[dict[str, Any]]:
    """The rows of `history_query` as points, oldest first."""
    points = []
    for row in reversed(rows):
        (id, created_at, system_id, device, manifest, version) = row[:6]
        median, ci_low, ci_high, p99, throughput, valid, workload_key, machine_id, stack_id = row[6:]
        points.append(
            history_point(
                evaluation_id=id,
                created_at=created_at,
                system_id=system_id,
                device=device,
                manifest_sha256=manifest,
                framework_version=version,
                median_ms=median,
                ci_low_ms=ci_low,
                ci_high_ms=ci_high,
                p99_ms=p99,
                throughput=throughput,
                valid=valid,
                workload_key=workload_key,
                machine_id=machine_id,
                stack_id=stack_id,
            )
        )
    return points


def series_keys_query(where: SeriesFilter) -> Select[Unpack[tuple[Any, ...]]]:
    """Per series with points `where` selects: its key, how many, the first and last created_at, and
    its greatest system id."""
    key = tuple(_KEY_COLUMNS.values())
    return (
        select(*key, func.count(), func.min(_E.created_at), func.max(_E.created_at), func.max(_E.system_id))
        .join_from(_E, _M, _M.evaluation_id == _E.id)
        .where(*_conditions(where))
        .group_by(*key)
    )


def series_keys_result(rows: Sequence[Row[Unpack[tuple[Any, ...]]]]) -> list[dict[str, Any]]:
    """The rows of `series_keys_query` as records.history.series_summary."""
    width = len(_KEY_COLUMNS)
    return [
        series_summary(
            tuple(row[:width]),
            points=row[width],
            first_at=row[width + 1],
            last_at=row[width + 2],
            system_id=row[width + 3],
        )
        for row in rows
    ]
