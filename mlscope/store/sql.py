"""The SQL store: SQLite (the embedded default) and PostgreSQL (the farm), on SQLAlchemy 2.

Owns the schema (tables `systems`, `evaluations`, `measurements`, `spans`), the engine set-up each database
needs to be shared safely between processes, and the Store primitives in SQL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    Select,
    String,
    UniqueConstraint,
    create_engine,
    event,
    func,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship, selectinload
from sqlalchemy.pool import StaticPool
from sqlalchemy.types import TypeDecorator

from mlscope.contract.errors import UserError

from .base import Store
from .errors import EvaluationNotFound
from .records import (
    EvaluationFilter,
    EvaluationRecord,
    MeasurementRecord,
    SpanRecord,
    pack_latencies,
    unpack_latencies,
)

__all__ = ["SQLStore"]

# How long a write waits for another process's write to finish before SQLite gives up.
SQLITE_BUSY_TIMEOUT_S = 30.0
# Any constant works; it only has to be the same in every process creating the schema.
_SCHEMA_LOCK_KEY = 0x6D6C73636F7065
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
    __table_args__ = (Index("ix_evaluations_created_at_id", "created_at", "id"),)

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

    # lazy="raise": every read says what it loads, so listing never issues a query per row.
    system: Mapped[SystemRow | None] = relationship(lazy="raise")
    measurements: Mapped[list[MeasurementRow]] = relationship(
        lazy="raise", cascade="all, delete-orphan", passive_deletes=True
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
    # Raw latencies as int64 little-endian bytes: 8 bytes a sample against ~10 as JSON text, no
    # parsing on the way out, and deferred so that listings never read them.
    latencies_ns: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)


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


def _engine_url(url: str) -> URL:
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise UserError(f"store URL {url!r} is not a database URL: {error}", field="store_url") from None
    # Plain postgresql:// would pick psycopg2; mlscope ships psycopg 3 (the `postgresql` extra).
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _sqlite_path(url: URL) -> Path | None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).expanduser()


def _create_sqlite_engine(url: URL) -> Engine:
    path = _sqlite_path(url)
    if path is None:
        # One shared connection, or each pooled connection would see its own empty in-memory database.
        engine = create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url.set(database=str(path)), connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # SQLAlchemy, not the sqlite3 module, emits BEGIN (see _on_begin).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # WAL lets a CLI read while a worker writes; the busy timeout makes writers queue up.
        cursor.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL never corrupts the database; a power cut may lose the last commits, which
        # costs a benchmark store little, and each commit is no longer an fsync (~4 ms here).
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        # A write transaction takes the write lock up front: a deferred one that read first and then
        # tries to write fails at once with SQLITE_BUSY when another writer committed meanwhile,
        # busy timeout or not. Reads stay deferred so they never wait for writers.
        writes = connection.get_execution_options().get("mlscope_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")

    return engine


class SQLStore(Store):
    """The Store on SQLite or PostgreSQL; creates its schema on open.

    Args:
        url: `sqlite:///path/to/file.db` (parent directories are created), `sqlite://` (in memory:
            one connection, for one thread of one process), or `postgresql://user@host:port/database`
            (driven by psycopg 3).

    Raises:
        UserError: when the URL is malformed, its driver is not installed, or the database cannot be
            opened.
    """

    NAME: ClassVar[str] = "sql"

    def __init__(self, url: str) -> None:
        parsed = _engine_url(url)
        shown = parsed.render_as_string(hide_password=True)
        try:
            if parsed.get_backend_name() == "sqlite":
                self._engine = _create_sqlite_engine(parsed)
            else:
                self._engine = create_engine(parsed, pool_pre_ping=True)
        except (NoSuchModuleError, ModuleNotFoundError) as error:
            raise UserError(
                f"store URL {shown}: its database driver is not installed ({error}); "
                "for PostgreSQL: pip install 'mlscope[postgresql]'",
                field="store_url",
            ) from None
        self._dialect = self._engine.dialect.name
        self._writer = self._engine.execution_options(mlscope_write=True)
        # A read spans several queries (evaluations, then their measurements and systems); on
        # PostgreSQL they must see one snapshot, or a finish committing in between shows half of it.
        self._reader = (
            self._engine.execution_options(isolation_level="REPEATABLE READ")
            if self._dialect == "postgresql"
            else self._engine
        )
        try:
            self._create_schema()
        except OperationalError as error:
            self._engine.dispose()
            raise UserError(f"cannot open the store at {shown}: {error.orig}", field="store_url") from None

    def _create_schema(self) -> None:
        with self._writer.begin() as connection:
            if self._dialect == "postgresql":
                # Workers and the API may all open a fresh database at once; CREATE TABLE races.
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
            Base.metadata.create_all(connection)

    def close(self) -> None:
        self._engine.dispose()

    def _insert(self, table: type[Base]) -> Any:
        dialect = postgresql if self._dialect == "postgresql" else sqlite
        return dialect.insert(table)

    # ----- systems ---------------------------------------------------------------------------------

    def _insert_system(self, id: str, system: dict[str, Any]) -> None:
        statement = (
            self._insert(SystemRow)
            .values(id=id, data=system, saved_at=datetime.now(timezone.utc))
            .on_conflict_do_nothing(index_elements=["id"])
        )
        with self._writer.begin() as connection:
            connection.execute(statement)

    def _read_system(self, id: str) -> dict[str, Any] | None:
        with Session(self._reader) as session:
            row = session.get(SystemRow, id)
            return None if row is None else dict(row.data)

    def _read_systems(self) -> list[dict[str, Any]]:
        with Session(self._reader) as session:
            return [dict(row.data) for row in session.scalars(select(SystemRow).order_by(SystemRow.id))]

    # ----- evaluations -----------------------------------------------------------------------------

    def _insert_evaluation(self, record: EvaluationRecord) -> None:
        values = {
            column.key: getattr(record, column.key)
            for column in EvaluationRow.__table__.columns
            if hasattr(record, column.key)
        }
        statement = self._insert(EvaluationRow).values(**values).on_conflict_do_nothing(index_elements=["id"])
        with self._writer.begin() as connection:
            connection.execute(statement)

    def _transition(
        self,
        id: str,
        *,
        allowed_from: frozenset[str],
        changes: Mapping[str, Any],
        measurements: Sequence[MeasurementRecord] = (),
    ) -> str:
        with Session(self._writer) as session, session.begin():
            # FOR UPDATE makes a second finisher on PostgreSQL wait, then see "succeeded"; SQLite needs
            # no row lock because BEGIN IMMEDIATE already serialises writers.
            locked = select(EvaluationRow).where(EvaluationRow.id == id).with_for_update()
            row = session.scalars(locked).one_or_none()
            if row is None:
                raise EvaluationNotFound(id)
            before = row.status
            if before in allowed_from:
                for name, value in changes.items():
                    setattr(row, name, value)
                session.add_all(
                    MeasurementRow(
                        evaluation_id=id,
                        scenario=m.scenario,
                        batch_size=m.batch_size,
                        latency_ms=m.latency_ms,
                        throughput=m.throughput,
                        validity=m.validity,
                        extra=m.extra,
                        latencies_ns=None if m.latencies_ns is None else pack_latencies(m.latencies_ns),
                    )
                    for m in measurements
                )
            return before

    def _ids_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        query = (
            select(EvaluationRow.id)
            .where(EvaluationRow.id.startswith(prefix, autoescape=True))
            .order_by(EvaluationRow.id)
            .limit(limit)
        )
        with Session(self._reader) as session:
            return list(session.scalars(query))

    def _read_evaluation(self, id: str, *, include_raw: bool) -> EvaluationRecord | None:
        query = _with_children(select(EvaluationRow).where(EvaluationRow.id == id), include_raw=include_raw)
        with Session(self._reader) as session:
            row = session.scalars(query).one_or_none()
            return None if row is None else _to_record(row, include_raw=include_raw)

    def _query_evaluations(
        self, where: EvaluationFilter, *, limit: int, offset: int
    ) -> list[EvaluationRecord]:
        query = (
            _filtered(select(EvaluationRow), where)
            .order_by(EvaluationRow.created_at.desc(), EvaluationRow.id)
            .limit(limit)
            .offset(offset)
        )
        with Session(self._reader) as session:
            rows = session.scalars(_with_children(query, include_raw=False)).all()
            return [_to_record(row, include_raw=False) for row in rows]

    def _count_evaluations(self, where: EvaluationFilter) -> int:
        query = _filtered(select(func.count()).select_from(EvaluationRow), where)
        with Session(self._reader) as session:
            return int(session.scalar(query) or 0)

    # ----- spans -----------------------------------------------------------------------------------

    def _insert_spans(self, evaluation_id: str, spans: Sequence[SpanRecord]) -> int:
        if not spans:
            return 0
        with self._writer.begin() as connection:
            if self._dialect == "postgresql":
                return _insert_spans_postgresql(connection, evaluation_id, spans)
            rows = [
                {
                    "evaluation_id": evaluation_id,
                    "span_id": span.span_id,
                    "trace_id": span.trace_id,
                    "parent_id": span.parent_id,
                    "name": span.name,
                    "level": span.level,
                    "start_ns": span.start_ns,
                    "end_ns": span.end_ns,
                    "attributes": span.attributes,
                }
                for span in spans
            ]
            statement = self._insert(SpanRow).on_conflict_do_nothing(
                index_elements=["evaluation_id", "span_id"]
            )
            # sqlite3's executemany sums the rows each statement changed: the ones not skipped.
            return int(connection.execute(statement, rows).rowcount)

    def _read_spans(
        self, evaluation_id: str, *, level: str | None, limit: int | None, offset: int
    ) -> list[SpanRecord]:
        columns = (
            SpanRow.trace_id,
            SpanRow.span_id,
            SpanRow.parent_id,
            SpanRow.name,
            SpanRow.level,
            SpanRow.start_ns,
            SpanRow.end_ns,
            SpanRow.attributes,
        )
        # Plain rows, not ORM objects: a trace is read hundreds of thousands of spans at a time.
        query = select(*columns).where(SpanRow.evaluation_id == evaluation_id)
        if level is not None:
            query = query.where(SpanRow.level == level)
        query = query.order_by(SpanRow.start_ns, SpanRow.span_id).limit(limit).offset(offset)
        with self._reader.connect() as connection:
            return [SpanRecord(*row) for row in connection.execute(query)]

    def _count_spans(self, evaluation_id: str) -> int:
        query = select(func.count()).select_from(SpanRow).where(SpanRow.evaluation_id == evaluation_id)
        with Session(self._reader) as session:
            return int(session.scalar(query) or 0)


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


def _insert_spans_postgresql(connection: Connection, evaluation_id: str, spans: Sequence[SpanRecord]) -> int:
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


def _filtered(query: Select[Any], where: EvaluationFilter) -> Select[Any]:
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
    return query.where(*conditions)


def _with_children(query: Select[Any], *, include_raw: bool) -> Select[Any]:
    measurements = selectinload(EvaluationRow.measurements)
    if include_raw:
        measurements = measurements.undefer(MeasurementRow.latencies_ns)
    return query.options(measurements, selectinload(EvaluationRow.system))


def _to_record(row: EvaluationRow, *, include_raw: bool) -> EvaluationRecord:
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
        trace_id=row.trace_id,
        cold_start=row.cold_start,
        framework_details=row.framework_details,
        error=row.error,
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
                latencies_ns=unpack_latencies(m.latencies_ns)
                if include_raw and m.latencies_ns is not None
                else None,
            )
            for m in row.measurements
        ],
    )
