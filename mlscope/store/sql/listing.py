"""The SQLite listing read with the standard library's sqlite3: `mlscope results list` on a SQLite
store, without importing SQLAlchemy (whose import alone costs a listing most of its time).

It reads the rows SQLStore's listing reads (store.py `_query_evaluations`, `_count_evaluations`), turns
them into the same records and hands them to the same `evaluation_to_dict`, so the documents are the
ORM path's (tests/unit/test_sqlite_listing.py fills a store and holds the two equal). It answers only
what it can answer as the store would: anything else returns None and the caller opens the store —
a URL other than a plain SQLite file, no file yet (opening creates it), a schema other than the head
revision (opening refuses it with the words to upgrade), a running evaluation whose lease expired
(the listing's sweep must first mark it failed), or a file SQLite cannot read.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlscope.contract.result import EvaluationResult
from mlscope.store.paging import check_page
from mlscope.store.records import EvaluationRecord, MeasurementRecord, check_filter, evaluation_to_dict
from mlscope.store.sql.revisions import VERSION_TABLE, head_revision

__all__ = ["list_sqlite"]

_PREFIX = "sqlite:///"
# As engine.py's SQLITE_BUSY_TIMEOUT_S: a reader waits this long for a writer's lock.
_BUSY_TIMEOUT_S = 30.0
# The columns stored as JSON text, and as timestamps (naive UTC text, as SQLAlchemy writes them).
_JSON_COLUMNS = frozenset(
    {"request", "manifest", "cold_start", "error", "framework_details", "accuracy", "parity", "memory"}
)
_TIME_COLUMNS = frozenset({"created_at", "started_at", "finished_at", "lease_expires_at"})
# The evaluation's own columns: the record's fields but those a read fills from other tables.
_COLUMNS = tuple(
    f.name for f in dataclasses.fields(EvaluationRecord) if f.name not in ("system", "measurements")
)
_ORDER = "created_at DESC, id"


def list_sqlite(
    url: str,
    *,
    model: str | None,
    framework: str | None,
    status: str | None,
    limit: int,
    offset: int,
    now: datetime | None = None,
) -> tuple[list[EvaluationResult], int] | None:
    """`Store.list_evaluations` and `count_evaluations` of the SQLite store at `url` with these
    filters, read in one transaction; None when this reader cannot answer (see the module).

    Raises:
        UserError: a filter, `limit` or `offset` the store would refuse, in its words.
    """
    where = check_filter(model, framework, None, status, None, None)
    check_page(limit, offset)
    path = _file_of(url)
    if path is None or not path.is_file():
        return None
    try:
        connection = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error:
        return None
    try:
        connection.execute("BEGIN")
        if not _at_head(connection) or _expired_lease(connection, now or datetime.now(timezone.utc)):
            return None
        conditions = [
            (f"{column} = ?", value)
            for column, value in (("model_name", where.model), ("framework_name", where.framework))
            if value is not None
        ]
        if where.status is not None:
            conditions.append(("status = ?", where.status))
        sql_where = f"WHERE {' AND '.join(c for c, _ in conditions)}" if conditions else ""
        values = [v for _, v in conditions]
        records = _records(connection, sql_where, values, limit, offset)
        total = connection.execute(f"SELECT count(*) FROM evaluations {sql_where}", values).fetchone()[0]
        return [evaluation_to_dict(r) for r in records], int(total)
    except sqlite3.Error:
        return None
    finally:
        connection.close()


def _file_of(url: str) -> Path | None:
    """The file a plain SQLite URL names (as engine.py's `sqlite_path`); None for anything this
    reader leaves to the store: another scheme, a query string, an escaped character, memory, a URI."""
    if not url.startswith(_PREFIX) or "?" in url or "%" in url:
        return None
    database = url[len(_PREFIX) :]
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).expanduser()


def _at_head(connection: sqlite3.Connection) -> bool:
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if VERSION_TABLE not in tables:
        return False
    versions = [row[0] for row in connection.execute(f"SELECT version_num FROM {VERSION_TABLE}")]
    return versions == [head_revision()]


def _expired_lease(connection: sqlite3.Connection, now: datetime) -> bool:
    """Whether a running evaluation's lease expired before `now` (store.py's expired_leases_query)."""
    query = "SELECT 1 FROM evaluations WHERE status = 'running' AND lease_expires_at < ? LIMIT 1"
    return connection.execute(query, (_stored_time(now),)).fetchone() is not None


def _stored_time(moment: datetime) -> str:
    """An aware datetime as SQLAlchemy stores it in SQLite (tables.UTCDateTime: naive UTC)."""
    return moment.astimezone(timezone.utc).replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")


def _value(column: str, value: Any) -> Any:
    if value is None:
        return None
    if column in _JSON_COLUMNS:
        return json.loads(value)
    if column in _TIME_COLUMNS:
        return datetime.fromisoformat(value).replace(tzinfo=timezone.utc)
    return value


def _records(
    connection: sqlite3.Connection, where: str, values: list[Any], limit: int, offset: int
) -> list[EvaluationRecord]:
    """The page's evaluations, newest first, with their systems and measurements (store.py's
    `_query_evaluations`: the page's ids from the listing index, then only those rows)."""
    page = f"SELECT id FROM evaluations {where} ORDER BY {_ORDER} LIMIT ? OFFSET ?"
    rows = connection.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM evaluations WHERE id IN ({page}) ORDER BY {_ORDER}",
        [*values, limit, offset],
    ).fetchall()
    records = [
        EvaluationRecord(**{c: _value(c, v) for c, v in zip(_COLUMNS, row, strict=True)}) for row in rows
    ]
    if not records:
        return records
    by_id = {r.id: r for r in records}
    marks = ", ".join("?" * len(by_id))
    measured = connection.execute(
        "SELECT evaluation_id, scenario, batch_size, latency_ms, throughput, validity, extra "
        f"FROM measurements WHERE evaluation_id IN ({marks})",
        list(by_id),
    )
    for evaluation_id, scenario, batch_size, latency_ms, throughput, validity, extra in measured:
        by_id[evaluation_id].measurements.append(
            MeasurementRecord(
                scenario=scenario,
                batch_size=batch_size,
                latency_ms=json.loads(latency_ms),
                throughput=throughput,
                validity=json.loads(validity),
                extra=json.loads(extra),
            )
        )
    system_ids = sorted({r.system_id for r in records if r.system_id is not None})
    if system_ids:
        marks = ", ".join("?" * len(system_ids))
        query = f"SELECT id, data FROM systems WHERE id IN ({marks})"
        systems = {id: json.loads(data) for id, data in connection.execute(query, system_ids)}
        for record in records:
            if record.system_id is not None:
                record.system = systems.get(record.system_id)
    return records
