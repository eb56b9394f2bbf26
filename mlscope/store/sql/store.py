"""The SQL store: SQLite (the embedded default) and PostgreSQL (the farm), on SQLAlchemy 2.

Owns the Store primitives in SQL, and the schema check on open: an empty database gets the schema at
the head revision, one at the head revision opens, anything else is refused (store/schema.py says
why, sql/schema.py reads and upgrades the Alembic revisions). The tables are in tables.py, how each
database is opened to be shared safely between processes in engine.py, the statements and
conversions the primitives share in queries.py, the aggregations (comparison, layer totals, the upkeep
of `compare_keys`) in aggregates.py, history series in series.py, bulk import and retention in maintenance.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import and_, func, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DatabaseError, NoSuchModuleError
from sqlalchemy.orm import InstrumentedAttribute, Session

from mlscope.contract.errors import UserError
from mlscope.store.base import Store
from mlscope.store.errors import EvaluationNotFound, StoreUnavailable
from mlscope.store.maintenance import PruneReport
from mlscope.store.records import (
    ACTIVE_STATUSES,
    CompareFilter,
    EvaluationFilter,
    EvaluationRecord,
    LayerTotal,
    MeasurementRecord,
    SpanRecord,
)
from mlscope.store.records.history import HistoryFilter, SeriesFilter
from mlscope.store.schema import SchemaState, Upgraded
from mlscope.store.sql.aggregates import (
    JSONTexts,
    compare_key_rows,
    compare_query,
    compare_result,
    layer_totals,
    upsert_compare_key_rows,
)
from mlscope.store.sql.engine import (
    create_server_engine,
    create_sqlite_engine,
    engine_url,
    report_unavailable,
    sqlite_path,
    upsert_into,
)
from mlscope.store.sql.maintenance import (
    bulk_insert,
    evaluation_display_name,
    measurement_values,
    prune,
    record_workload,
)
from mlscope.store.sql.queries import (
    expired_leases_query,
    filtered,
    insert_spans_postgresql,
    to_record,
    with_children,
)
from mlscope.store.sql.schema import (
    backup_sqlite,
    create_at_head,
    head_revision,
    migrate,
    read_sqlite_state,
    read_state,
)
from mlscope.store.sql.series import history_query, history_result, series_keys_query, series_keys_result
from mlscope.store.sql.tables import Base, EvaluationRow, MeasurementRow, SpanRow, SystemRow

__all__ = ["SQLStore"]

# Any constant works; it only has to be the same in every process creating the schema.
_SCHEMA_LOCK_KEY = 0x6D6C73636F7065


class SQLStore(Store):
    """The Store on SQLite or PostgreSQL; checks its schema on open, and creates it in an empty database.

    Args:
        url: `sqlite:///path/to/file.db` (parent directories are created), `sqlite://` (in memory:
            one connection, for one thread of one process), or `postgresql://user@host:port/database`
            (driven by psycopg 3).
        check_schema: refuse a database that is not at the schema this code needs, and create the
            schema in an empty one; False opens any database as it is, changing nothing, for
            `schema_status()` and `upgrade()`.

    Raises:
        UserError: when the URL is malformed, its driver is not installed, the database cannot be
            opened, or (check_schema) it holds an older or newer schema or another application's
            tables (SchemaState.refusal words each).
    """

    NAME: ClassVar[str] = "sql"

    def __init__(self, url: str, *, check_schema: bool = True) -> None:
        parsed = engine_url(url)
        self._shown = parsed.render_as_string(hide_password=True)
        try:
            if parsed.get_backend_name() == "sqlite":
                self._engine = create_sqlite_engine(parsed)
            else:
                self._engine = create_server_engine(parsed)
        except (NoSuchModuleError, ModuleNotFoundError) as error:
            raise UserError(
                f"store URL {self._shown}: its database driver is not installed ({error}); "
                "for PostgreSQL: pip install 'mlscope[postgresql]'",
                field="store_url",
            ) from None
        self._dialect = self._engine.dialect.name
        report_unavailable(self._engine, self._shown)
        # The SQLite file, looked at read-only before anything writes to it; None in memory.
        self._path: Path | None = sqlite_path(parsed) if self._dialect == "sqlite" else None
        self._writer = self._engine.execution_options(mlscope_write=True)
        # A read spans several queries (evaluations, then their measurements and systems); on
        # PostgreSQL they must see one snapshot, or a finish committing in between shows half of it.
        self._reader = (
            self._engine.execution_options(isolation_level="REPEATABLE READ")
            if self._dialect == "postgresql"
            else self._engine
        )
        try:
            if check_schema:
                self._open_schema()
        except DatabaseError as error:
            self._engine.dispose()
            raise UserError(
                f"cannot open the store at {self._shown}: {error.orig}", field="store_url"
            ) from None
        except StoreUnavailable as error:
            self._engine.dispose()
            # The database's own words (a connection that failed to open is chained as itself).
            cause = error.__cause__
            reason = getattr(cause, "orig", None) or cause or error.message
            raise UserError(f"cannot open the store at {self._shown}: {reason}", field="store_url") from None
        except BaseException:
            self._engine.dispose()
            raise

    # ----- the schema ------------------------------------------------------------------------------

    def _lock_schema(self, connection: Connection) -> None:
        if self._dialect == "postgresql":
            # Workers and the API may all open a fresh database at once (CREATE TABLE races), or while
            # an upgrade runs: schema changes take turns. SQLite's BEGIN IMMEDIATE already does.
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})

    def _state(self, connection: Connection) -> SchemaState:
        return read_state(connection, backend=self._dialect, location=self._shown)

    def _open_schema(self) -> None:
        if self._path is not None:
            # A file that is not at the head revision is refused without a byte of it changing.
            found = read_sqlite_state(self._path, location=self._shown)
            if found is not None and found.state != "empty":
                found.check()
                return
        with self._writer.begin() as connection:
            self._lock_schema(connection)
            state = self._state(connection)
            if state.state == "empty":
                create_at_head(connection)
            else:
                state.check()

    def _schema_state(self) -> SchemaState:
        if self._path is not None:
            found = read_sqlite_state(self._path, location=self._shown)
            return found or SchemaState("sqlite", self._shown, "empty", None, head_revision())
        with self._reader.connect() as connection:
            return self._state(connection)

    def _upgrade_schema(self) -> Upgraded:
        with self._writer.begin() as connection:
            self._lock_schema(connection)
            state = self._state(connection)
            if state.state == "empty":
                create_at_head(connection)
                return Upgraded(previous=None, steps=(state.required,))
            if state.state == "current":
                return Upgraded(previous=state.current)
            if state.state != "older":
                state.check()
            assert state.current is not None
            # Taken while this transaction holds the write lock: the copy is exactly the store as the
            # upgrade found it.
            backup = None if self._path is None else str(backup_sqlite(self._path, state.current))
            try:
                steps, backfilled = migrate(connection, state)
            except Exception as error:
                kept = f"; a copy of it from before is at {backup}" if backup else ""
                raise RuntimeError(
                    f"upgrading the store at {self._shown} from schema {state.current} to "
                    f"{state.required} failed and was rolled back, so the store was not changed{kept}: "
                    f"{type(error).__name__}: {error}"
                ) from error
        return Upgraded(previous=state.current, steps=steps, backfilled=backfilled, backup=backup)

    def close(self) -> None:
        self._engine.dispose()

    def _insert(self, table: type[Base]) -> Any:
        return upsert_into(self._dialect, table)

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
        values["display_name"] = evaluation_display_name(record)
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
                workload = record_workload(row)
                session.add_all(MeasurementRow(**measurement_values(id, m, workload)) for m in measurements)
                if measurements and row.status == "succeeded":
                    session.execute(
                        upsert_compare_key_rows(self._dialect), compare_key_rows(row, measurements)
                    )
            return before

    # ----- starts and leases (leases.py) ------------------------------------------------------------

    def _start(self, id: str, *, changes: Mapping[str, Any]) -> tuple[str, int]:
        # One UPDATE: the database adds the attempt under its own row lock, so concurrent starts of
        # one evaluation (a redelivery racing the first delivery) count every attempt.
        statement = (
            update(EvaluationRow)
            .where(EvaluationRow.id == id, EvaluationRow.status.in_(sorted(ACTIVE_STATUSES)))
            .values(**changes, attempts=EvaluationRow.attempts + 1)
            .returning(EvaluationRow.status, EvaluationRow.attempts)
        )
        with self._writer.begin() as connection:
            started = connection.execute(statement).one_or_none()
            if started is not None:
                return str(started.status), int(started.attempts)
            found = connection.execute(
                select(EvaluationRow.status, EvaluationRow.attempts).where(EvaluationRow.id == id)
            ).one_or_none()
        if found is None:
            raise EvaluationNotFound(id)
        return str(found.status), int(found.attempts)

    def _leased_transition(
        self, id: str, *, owner: str | None, expired_before: datetime | None, changes: Mapping[str, Any]
    ) -> bool:
        conditions = [EvaluationRow.id == id, EvaluationRow.status == "running"]
        if owner is not None:
            conditions.append(EvaluationRow.lease_owner == owner)
        if expired_before is not None:
            conditions.append(EvaluationRow.lease_expires_at < expired_before)
        with self._writer.begin() as connection:
            if connection.execute(update(EvaluationRow).where(*conditions).values(**changes)).rowcount:
                return True
            exists = connection.execute(select(EvaluationRow.id).where(EvaluationRow.id == id)).first()
        if exists is None:
            raise EvaluationNotFound(id)
        return False

    def _expired_leases(self, now: datetime, *, limit: int) -> list[dict[str, Any]]:
        with self._reader.connect() as connection:
            return [dict(row._mapping) for row in connection.execute(expired_leases_query(now, limit=limit))]

    def _bulk_insert(self, records: Sequence[EvaluationRecord], systems: Mapping[str, dict[str, Any]]) -> int:
        return bulk_insert(self._writer, self._insert, records, systems)

    def _prune(self, before: datetime, *, keep_summaries: bool) -> PruneReport:
        return prune(self._writer, before, keep_summaries=keep_summaries)

    def _ids_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        return self._keys_with_prefix(EvaluationRow.id, prefix, limit)

    def _system_ids_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        return self._keys_with_prefix(SystemRow.id, prefix, limit)

    def _keys_with_prefix(self, key: InstrumentedAttribute[str], prefix: str, limit: int) -> list[str]:
        """The values of the primary key `key` that start with `prefix`, ascending, at most `limit`."""
        condition = key.startswith(prefix, autoescape=True)
        if self._dialect == "sqlite":
            # SQLite serves no index to a LIKE on a bound parameter (and its LIKE ignores ASCII case);
            # the range of ids a prefix spans reads the primary key, exactly.
            bound = _successor(prefix)
            condition = and_(
                key >= prefix,
                key < bound if bound is not None else func.substr(key, 1, len(prefix)) == prefix,
            )
        query = select(key).where(condition).order_by(key).limit(limit)
        with Session(self._reader) as session:
            return list(session.scalars(query))

    def _read_evaluation(self, id: str, *, include_raw: bool) -> EvaluationRecord | None:
        query = with_children(select(EvaluationRow).where(EvaluationRow.id == id), include_raw=include_raw)
        with Session(self._reader) as session:
            row = session.scalars(query).one_or_none()
            return None if row is None else to_record(row, include_raw=include_raw)

    def _query_evaluations(
        self, where: EvaluationFilter, *, limit: int, offset: int
    ) -> list[EvaluationRecord]:
        order = (EvaluationRow.created_at.desc(), EvaluationRow.id)
        # The page's ids first, from the listing index alone (however deep the offset), then only
        # those rows: a deep page never reads, let alone sorts, the rows it skips.
        page = filtered(select(EvaluationRow.id), where).order_by(*order).limit(limit).offset(offset)
        query = select(EvaluationRow).where(EvaluationRow.id.in_(page.scalar_subquery())).order_by(*order)
        with Session(self._reader) as session:
            rows = session.scalars(with_children(query, include_raw=False)).all()
            return [to_record(row, include_raw=False) for row in rows]

    def _count_evaluations(self, where: EvaluationFilter) -> int:
        query = filtered(select(func.count()).select_from(EvaluationRow), where)
        with Session(self._reader) as session:
            return int(session.scalar(query) or 0)

    # ----- aggregations (aggregates.py) ------------------------------------------------------------

    def _compare_rows(self, where: CompareFilter) -> list[dict[str, Any]]:
        with self._reader.connect() as connection:
            texts = JSONTexts()
            return [
                compare_result(row, texts) for row in connection.execute(compare_query(where, self._dialect))
            ]

    def _history_points(self, where: HistoryFilter, *, limit: int) -> list[dict[str, Any]]:
        with self._reader.connect() as connection:
            rows = connection.execute(history_query(where, limit=limit, dialect=self._dialect)).all()
            return history_result(rows)

    def _series_keys(self, where: SeriesFilter) -> list[dict[str, Any]]:
        with self._reader.connect() as connection:
            return series_keys_result(connection.execute(series_keys_query(where)).all())

    # ----- spans -----------------------------------------------------------------------------------

    def _insert_spans(self, evaluation_id: str, spans: Sequence[SpanRecord]) -> int:
        if not spans:
            return 0
        with self._writer.begin() as connection:
            if self._dialect == "postgresql":
                return insert_spans_postgresql(connection, evaluation_id, spans)
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

    def _layer_totals(
        self, evaluation_id: str, *, level: str, group_by: str
    ) -> tuple[list[LayerTotal], int | None]:
        with self._reader.connect() as connection:
            return layer_totals(connection, evaluation_id, level=level, group_by=group_by)


def _successor(prefix: str) -> str | None:
    """The least string greater than every string starting with `prefix` (None when there is none)."""
    for end in range(len(prefix) - 1, -1, -1):
        if ord(prefix[end]) < 0x10FFFF:
            following = ord(prefix[end]) + 1
            # Surrogates are no characters of UTF-8 text: the next character after U+D7FF is U+E000.
            return prefix[:end] + chr(0xE000 if 0xD800 <= following <= 0xDFFF else following)
    return None
