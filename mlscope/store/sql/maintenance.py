"""The SQL store's bulk import and retention statements: whole evaluations inserted a batch per
transaction (executemany, ids already present skipped), and the raw data of old evaluations dropped
(or the evaluations deleted) in one transaction each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Engine, delete, func, select, update

from mlscope.contract.names import TERMINAL_STATUSES
from mlscope.contract.workload import display_name, workload_key
from mlscope.store.maintenance import PruneReport
from mlscope.store.records import (
    RAW_CODEC,
    EvaluationRecord,
    MeasurementRecord,
    pack_latencies,
    summary_columns,
    workload_view,
)
from mlscope.store.sql.aggregates import backfill_compare_keys, upsert_compare_key_rows
from mlscope.store.sql.tables import Base, CompareKeyRow, EvaluationRow, MeasurementRow, SpanRow, SystemRow

__all__ = ["bulk_insert", "evaluation_display_name", "measurement_values", "prune", "record_workload"]

Insert = Callable[[type[Base]], Any]


def record_workload(record: EvaluationRecord | Any) -> dict[str, Any]:
    """What contract.workload reads of an evaluation record or row (records.workload_view)."""
    return workload_view(record.model_name, record.model_version, record.request, record.manifest)


def evaluation_display_name(record: EvaluationRecord | Any) -> str:
    """The `display_name` column of an evaluation record or row (schema 8)."""
    return display_name(record_workload(record))


def measurement_values(evaluation_id: str, m: MeasurementRecord, workload: dict[str, Any]) -> dict[str, Any]:
    """A measurement's row: its summary in columns, its raw latencies packed, and the key of the
    workload it measured (of `workload`, its evaluation as record_workload reads it)."""
    raw = m.latencies_ns
    return {
        "evaluation_id": evaluation_id,
        "workload_key": workload_key(workload, m.scenario),
        "scenario": m.scenario,
        "batch_size": m.batch_size,
        "latency_ms": m.latency_ms,
        "throughput": m.throughput,
        "validity": m.validity,
        "extra": m.extra,
        "latencies_ns": None if raw is None else pack_latencies(raw),
        "raw_codec": None if raw is None else RAW_CODEC,
        "raw_count": None if raw is None else len(raw),
        **summary_columns(m.latency_ms, m.validity),
    }


def bulk_insert(
    writer: Engine, insert: Insert, records: Sequence[EvaluationRecord], systems: Mapping[str, dict[str, Any]]
) -> int:
    columns = [column.key for column in EvaluationRow.__table__.columns if column.key != "display_name"]
    with writer.begin() as connection:
        if systems:
            now = datetime.now(timezone.utc)
            rows = [{"id": id, "data": data, "saved_at": now} for id, data in systems.items()]
            connection.execute(insert(SystemRow).on_conflict_do_nothing(index_elements=["id"]), rows)
        wanted = list(dict.fromkeys(record.id for record in records))
        present = set(connection.scalars(select(EvaluationRow.id).where(EvaluationRow.id.in_(wanted))))
        new: dict[str, EvaluationRecord] = {}
        for record in records:
            if record.id not in present:
                new.setdefault(record.id, record)
        if not new:
            return 0
        evaluations = [
            {
                **{key: getattr(record, key) for key in columns},
                "display_name": evaluation_display_name(record),
            }
            for record in new.values()
        ]
        # A concurrent import of the same ids loses nothing and duplicates nothing: both skip.
        connection.execute(insert(EvaluationRow).on_conflict_do_nothing(index_elements=["id"]), evaluations)
        measurements = [
            measurement_values(record.id, m, record_workload(record))
            for record in new.values()
            for m in record.measurements
        ]
        if measurements:
            statement = insert(MeasurementRow).on_conflict_do_nothing(
                index_elements=["evaluation_id", "scenario", "batch_size"]
            )
            connection.execute(statement, measurements)
        keys = _compare_keys(new.values())
        if keys:
            connection.execute(upsert_compare_key_rows(connection.dialect.name), keys)
        return len(new)


_KEY_NAMES = ("model_name", "framework_name", "system_id", "device", "scenario", "batch_size", "workload_key")


def _compare_keys(records: Iterable[EvaluationRecord]) -> list[dict[str, Any]]:
    """The compare_keys rows the succeeded `records` add: per key, how many and which finished last
    (as SQLStore's finish counts one evaluation at a time)."""
    keys: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records:
        if record.status != "succeeded" or record.system_id is None or record.finished_at is None:
            continue
        workload = record_workload(record)
        for m in record.measurements:
            key = (
                record.model_name,
                record.framework_name,
                record.system_id,
                record.device,
                m.scenario,
                m.batch_size,
                workload_key(workload, m.scenario),
            )
            row = keys.get(key)
            if row is None:
                keys[key] = {
                    **dict(zip(_KEY_NAMES, key, strict=True)),
                    "runs": 1,
                    "latest_evaluation_id": record.id,
                    "latest_finished_at": record.finished_at,
                }
                continue
            row["runs"] += 1
            if (record.finished_at, record.id) > (row["latest_finished_at"], row["latest_evaluation_id"]):
                row["latest_evaluation_id"], row["latest_finished_at"] = record.id, record.finished_at
    return [keys[key] for key in sorted(keys)]


def prune(writer: Engine, before: datetime, *, keep_summaries: bool) -> PruneReport:
    ended = select(EvaluationRow.id).where(
        EvaluationRow.status.in_(sorted(TERMINAL_STATUSES)),
        func.coalesce(EvaluationRow.finished_at, EvaluationRow.created_at) < before,
    )
    with writer.begin() as connection:
        count = int(connection.scalar(select(func.count()).select_from(ended.subquery())) or 0)
        spans = connection.execute(delete(SpanRow).where(SpanRow.evaluation_id.in_(ended))).rowcount
        if keep_summaries:
            # raw_count 0 beside sample_count N says what happened: N measured, none kept.
            dropped = connection.execute(
                update(MeasurementRow)
                .where(MeasurementRow.evaluation_id.in_(ended), MeasurementRow.latencies_ns.is_not(None))
                .values(latencies_ns=None, raw_codec=None, raw_count=0)
            ).rowcount
        else:
            # compare_keys names the latest evaluation of each key: emptied first, counted again after.
            connection.execute(delete(CompareKeyRow))
            dropped = connection.execute(
                delete(MeasurementRow).where(
                    MeasurementRow.evaluation_id.in_(ended), MeasurementRow.latencies_ns.is_not(None)
                )
            ).rowcount
            connection.execute(delete(MeasurementRow).where(MeasurementRow.evaluation_id.in_(ended)))
            connection.execute(delete(EvaluationRow).where(EvaluationRow.id.in_(ended)))
            connection.execute(backfill_compare_keys(connection.dialect.name))
    return PruneReport(
        evaluations=count, raw_latencies=int(dropped), spans=int(spans), deleted=not keep_summaries
    )
