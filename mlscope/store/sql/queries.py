"""The SQL the store's primitives share: conditions of a listing, the eager loads of a read, an
evaluation row (with its system and measurements) as a record, and PostgreSQL's bulk span insert.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, or_, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.orm import selectinload

from mlscope.store.records import (
    EvaluationFilter,
    EvaluationRecord,
    MeasurementRecord,
    SpanRecord,
    unpack_latencies,
)
from mlscope.store.sql.tables import EvaluationRow, MeasurementRow

__all__ = ["expired_leases_query", "filtered", "insert_spans_postgresql", "to_record", "with_children"]


# One statement per batch with one array parameter per column: psycopg would otherwise parse a
# multi-row VALUES list of tens of thousands of placeholders, and executemany reports no row count.
_INSERT_SPANS_POSTGRESQL = text(
    """
    INSERT INTO spans (evaluation_id, span_id, trace_id, parent_id, name, level, start_ns, end_ns, attributes)
    SELECT :evaluation_id, s.* FROM unnest(
        CAST(:span_ids AS varchar[]), CAST(:trace_ids AS varchar[]), CAST(:parent_ids AS varchar[]),
        CAST(:names AS varchar[]), CAST(:levels AS varchar[]), CAST(:starts AS bigint[]),
        CAST(:ends AS bigint[]), CAST(:attributes AS json[])
    ) AS s
    ON CONFLICT (evaluation_id, span_id) DO NOTHING
    """
)


def insert_spans_postgresql(connection: Connection, evaluation_id: str, spans: Sequence[SpanRecord]) -> int:
    parameters = {
        "evaluation_id": evaluation_id,
        "span_ids": [span.span_id for span in spans],
        "trace_ids": [span.trace_id for span in spans],
        "parent_ids": [span.parent_id for span in spans],
        "names": [span.name for span in spans],
        "levels": [span.level for span in spans],
        "starts": [span.start_ns for span in spans],
        "ends": [span.end_ns for span in spans],
        "attributes": [json.dumps(span.attributes) for span in spans],
    }
    return int(connection.execute(_INSERT_SPANS_POSTGRESQL, parameters).rowcount)


def filtered(query: Select[Any], where: EvaluationFilter) -> Select[Any]:
    conditions = []
    if where.model is not None:
        conditions.append(EvaluationRow.model_name == where.model)
    if where.framework is not None:
        conditions.append(EvaluationRow.framework_name == where.framework)
    if where.system_id is not None:
        conditions.append(EvaluationRow.system_id == where.system_id)
    if where.status is not None:
        conditions.append(EvaluationRow.status == where.status)
    if where.since is not None:
        conditions.append(EvaluationRow.created_at >= where.since)
    if where.until is not None:
        conditions.append(EvaluationRow.created_at < where.until)
    if where.after is not None:
        # After (created_at, id) in the listing's order, created_at descending then id: the bound on
        # created_at alone lets the created_at indexes start the scan there.
        created_at, id = where.after
        conditions.append(EvaluationRow.created_at <= created_at)
        conditions.append(or_(EvaluationRow.created_at < created_at, EvaluationRow.id > id))
    return query.where(*conditions)


def expired_leases_query(now: datetime, *, limit: int) -> Select[Any]:
    """The running evaluations whose lease expired before `now`, oldest expiry first: a range of the
    index on (status, lease_expires_at), so only those rows are read (and sorted by id among equal
    expiries). Evaluations running without a lease have NULL there, which no comparison matches."""
    columns = (
        EvaluationRow.id,
        EvaluationRow.lease_owner,
        EvaluationRow.lease_expires_at,
        EvaluationRow.attempts,
        EvaluationRow.queue,
        EvaluationRow.request,
        EvaluationRow.trace_id,
        EvaluationRow.created_at,
    )
    return (
        select(*columns)
        .where(EvaluationRow.status == "running", EvaluationRow.lease_expires_at < now)
        .order_by(EvaluationRow.lease_expires_at, EvaluationRow.id)
        .limit(limit)
    )


def with_children(query: Select[Any], *, include_raw: bool) -> Select[Any]:
    measurements = selectinload(EvaluationRow.measurements)
    if include_raw:
        measurements = measurements.undefer(MeasurementRow.latencies_ns)
    return query.options(measurements, selectinload(EvaluationRow.system))


def to_record(row: EvaluationRow, *, include_raw: bool) -> EvaluationRecord:
    return EvaluationRecord(
        id=row.id,
        status=row.status,
        model_name=row.model_name,
        model_version=row.model_version,
        manifest_sha256=row.manifest_sha256,
        framework_name=row.framework_name,
        framework_version=row.framework_version,
        runner=row.runner,
        device=row.device,
        trace_level=row.trace_level,
        request=row.request,
        manifest=row.manifest,
        created_at=row.created_at,
        system_id=row.system_id,
        machine_id=row.machine_id,
        stack_id=row.stack_id,
        trace_id=row.trace_id,
        cold_start=row.cold_start,
        framework_details=row.framework_details,
        error=row.error,
        accuracy=row.accuracy,
        parity=row.parity,
        memory=row.memory,
        queue=row.queue,
        attempts=row.attempts,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        system=None if row.system is None else dict(row.system.data),
        measurements=[
            MeasurementRecord(
                scenario=m.scenario,
                batch_size=m.batch_size,
                latency_ms=m.latency_ms,
                throughput=m.throughput,
                validity=m.validity,
                extra=m.extra,
                latencies_ns=unpack_latencies(m.latencies_ns, m.raw_codec)
                if include_raw and m.latencies_ns is not None
                else None,
            )
            for m in row.measurements
        ],
    )
