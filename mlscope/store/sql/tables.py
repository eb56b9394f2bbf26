"""The SQL schema: the tables `systems`, `evaluations`, `measurements`, `spans` and `compare_keys`
as SQLAlchemy 2 declarative rows, their indexes and constraints, and the column type that keeps
timestamps aware UTC on every database.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

__all__ = [
    "Base",
    "CompareKeyRow",
    "EvaluationRow",
    "MeasurementRow",
    "SpanRow",
    "SystemRow",
    "UTCDateTime",
]

_JSON = JSON(none_as_null=True)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out, on every database.

    SQLite has no time zones and hands back naive values; storing UTC and re-attaching it on the way
    out keeps timestamps (and comparisons against them) identical across backends.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        utc = value.astimezone(timezone.utc)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class Base(DeclarativeBase):
    pass


class SystemRow(Base):
    __tablename__ = "systems"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    data: Mapped[dict[str, Any]] = mapped_column(_JSON)
    saved_at: Mapped[datetime] = mapped_column(UTCDateTime())


class EvaluationRow(Base):
    __tablename__ = "evaluations"
    __table_args__ = (
        # Id prefixes (LIKE 'abc%'): PostgreSQL's default operator class serves no LIKE unless the
        # collation is "C"; SQLite reads prefixes as a range of the primary key instead. The operator
        # class is written in the column's text, not as `postgresql_ops`: that keyword has SQLAlchemy
        # import its PostgreSQL dialect to check it, in every process that imports these tables.
        Index("ix_evaluations_id_pattern", text("id varchar_pattern_ops")).ddl_if(dialect="postgresql"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    model_name: Mapped[str] = mapped_column(String(255), index=True)
    model_version: Mapped[str | None] = mapped_column(String(255))
    manifest_sha256: Mapped[str | None] = mapped_column(String(64))
    framework_name: Mapped[str] = mapped_column(String(64), index=True)
    framework_version: Mapped[str | None] = mapped_column(String(64))
    system_id: Mapped[str | None] = mapped_column(ForeignKey("systems.id"), index=True)
    runner: Mapped[str] = mapped_column(String(32))
    device: Mapped[str] = mapped_column(String(64))
    trace_level: Mapped[str] = mapped_column(String(16))
    trace_id: Mapped[str | None] = mapped_column(String(64))
    cold_start: Mapped[dict[str, Any] | None] = mapped_column(_JSON)
    framework_details: Mapped[dict[str, Any] | None] = mapped_column(_JSON)
    error: Mapped[dict[str, Any] | None] = mapped_column(_JSON)
    request: Mapped[dict[str, Any]] = mapped_column(_JSON)
    manifest: Mapped[dict[str, Any]] = mapped_column(_JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Schema 5: the result sections (records.sections), NULL when not measured. Last, where the
    # migration adds them, so a fresh table and an upgraded one are alike column by column.
    accuracy: Mapped[dict[str, Any] | None] = mapped_column(_JSON)
    parity: Mapped[dict[str, Any] | None] = mapped_column(_JSON)
    # Schema 6: the memory section, likewise.
    memory: Mapped[dict[str, Any] | None] = mapped_column(_JSON)
    # Schema 7: the queue its job was sent to, how many times it was started, and its runner's lease
    # (records.EvaluationRecord); last for the same reason. attempts has a server default so that the
    # migration fills the rows stored before with 0.
    queue: Mapped[str | None] = mapped_column(String(255))
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Schema 8: the model as the comparison table shows it, with its options (`hf:gpt2[n_layer=2]`:
    # contract.workload.display_name), written with the evaluation; last for the same reason.
    display_name: Mapped[str | None] = mapped_column(String)
    # Schema 9: the machine and the software stack it ran on (contract.system_ids), what history series
    # group by; last for the same reason.
    machine_id: Mapped[str | None] = mapped_column(String(16), index=True)
    stack_id: Mapped[str | None] = mapped_column(String(16), index=True)

    # lazy="raise": every read says what it loads, so listing never issues a query per row.
    system: Mapped[SystemRow | None] = relationship(lazy="raise")
    measurements: Mapped[list[MeasurementRow]] = relationship(
        lazy="raise", cascade="all, delete-orphan", passive_deletes=True
    )


# In the listing's order (newest first, then id), so that a page deep in a listing is read from an
# index alone (schema 4; before, the mixed directions of an index on (created_at, id) made PostgreSQL
# sort the whole table for it). The second serves the listings of one model on one framework and its
# history series.
Index("ix_evaluations_created_desc_id", EvaluationRow.created_at.desc(), EvaluationRow.id)
# A comparison filtered by time or ids finds each key's latest evaluation by its finish.
Index("ix_evaluations_finished_at", EvaluationRow.finished_at)
# Schema 7: a sweeper's look for expired leases (status = 'running' AND lease_expires_at < now, oldest
# first) reads only the running evaluations' range of it, however many have ended.
Index("ix_evaluations_status_lease_expires", EvaluationRow.status, EvaluationRow.lease_expires_at)
Index(
    "ix_evaluations_model_framework_created_desc",
    EvaluationRow.model_name,
    EvaluationRow.framework_name,
    EvaluationRow.created_at.desc(),
    EvaluationRow.id,
)


class MeasurementRow(Base):
    __tablename__ = "measurements"
    __table_args__ = (UniqueConstraint("evaluation_id", "scenario", "batch_size"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    evaluation_id: Mapped[str] = mapped_column(ForeignKey("evaluations.id", ondelete="CASCADE"))
    scenario: Mapped[str] = mapped_column(String(32))
    batch_size: Mapped[int] = mapped_column(Integer)
    latency_ms: Mapped[dict[str, Any]] = mapped_column(_JSON)
    throughput: Mapped[float | None] = mapped_column(Float)
    validity: Mapped[dict[str, Any]] = mapped_column(_JSON)
    extra: Mapped[dict[str, Any]] = mapped_column(_JSON)
    # Raw latencies, packed (records.pack_latencies: int64 little-endian, zlib-compressed since
    # schema 2) and deferred, so that listings and aggregations never read them.
    latencies_ns: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)
    # Schema 2: how the raw latencies are packed ("int64le" for rows written by 0.1.0,
    # "zlib-int64le") and how many were kept (at most MLSCOPE_MAX_RAW_LATENCIES of `sample_count`).
    raw_codec: Mapped[str | None] = mapped_column(String(16))
    raw_count: Mapped[int | None] = mapped_column(Integer)
    # Schema 2: the summary in columns, written once with the measurement, so that comparisons,
    # history and filters aggregate in the database without parsing latency_ms.
    sample_count: Mapped[int | None] = mapped_column(Integer)
    mean_ms: Mapped[float | None] = mapped_column(Float)
    median_ms: Mapped[float | None] = mapped_column(Float)
    p90_ms: Mapped[float | None] = mapped_column(Float)
    p95_ms: Mapped[float | None] = mapped_column(Float)
    p99_ms: Mapped[float | None] = mapped_column(Float)
    ci_low_ms: Mapped[float | None] = mapped_column(Float)
    ci_high_ms: Mapped[float | None] = mapped_column(Float)
    valid: Mapped[bool | None] = mapped_column(Boolean)
    # Schema 8: the workload the measurement measured (contract.workload.workload_key of its
    # evaluation and scenario), which the comparison table keys on beside the model's name.
    workload_key: Mapped[str | None] = mapped_column(String(16))


class SpanRow(Base):
    __tablename__ = "spans"
    __table_args__ = (
        Index("ix_spans_evaluation_start", "evaluation_id", "start_ns", "span_id"),
        Index("ix_spans_evaluation_level_start", "evaluation_id", "level", "start_ns", "span_id"),
    )

    # The primary key makes saving a span twice a no-op (INSERT ... ON CONFLICT DO NOTHING).
    evaluation_id: Mapped[str] = mapped_column(
        ForeignKey("evaluations.id", ondelete="CASCADE"), primary_key=True
    )
    span_id: Mapped[str] = mapped_column(String(16), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(32), index=True)
    parent_id: Mapped[str | None] = mapped_column(String(16))
    # Unbounded: kernel names from the library level run to hundreds of characters.
    name: Mapped[str] = mapped_column(String)
    level: Mapped[str] = mapped_column(String(16))
    start_ns: Mapped[int] = mapped_column(BigInteger)
    end_ns: Mapped[int] = mapped_column(BigInteger)
    attributes: Mapped[dict[str, Any]] = mapped_column(_JSON)


class CompareKeyRow(Base):
    """The comparison table's keys, kept as evaluations succeed: per (model, framework, system, device,
    scenario, batch size, workload key; the last since schema 8), how many succeeded evaluations
    measured it and which finished last (greatest finished_at, then id), so that an unfiltered
    comparison reads one row per key instead of every measurement. Written in the transaction that
    finishes an evaluation (SQLStore._transition); a succeeded evaluation never changes again, so the
    counts stay exact."""

    __tablename__ = "compare_keys"

    model_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    framework_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    system_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    device: Mapped[str] = mapped_column(String(64), primary_key=True)
    scenario: Mapped[str] = mapped_column(String(32), primary_key=True)
    batch_size: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_key: Mapped[str] = mapped_column(String(16), primary_key=True)
    runs: Mapped[int] = mapped_column(Integer)
    latest_evaluation_id: Mapped[str] = mapped_column(ForeignKey("evaluations.id"))
    latest_finished_at: Mapped[datetime] = mapped_column(UTCDateTime())
