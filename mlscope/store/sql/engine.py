"""Opening a SQL database: the store URL as an engine URL (PostgreSQL driven by psycopg 3), and the
SQLite engine set up to be shared safely between processes (WAL, a busy timeout, write transactions
that take the write lock up front).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, ExceptionContext, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from mlscope.contract.errors import UserError

from ..errors import StoreUnavailable

__all__ = [
    "SQLITE_BUSY_TIMEOUT_S",
    "create_sqlite_engine",
    "engine_url",
    "report_unavailable",
    "sqlite_path",
]

# How long a write waits for another process's write to finish before SQLite gives up.
SQLITE_BUSY_TIMEOUT_S = 30.0


def engine_url(url: str) -> URL:
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise UserError(f"store URL {url!r} is not a database URL: {error}", field="store_url") from None
    # Plain postgresql:// would pick psycopg2; mlscope ships psycopg 3 (the `postgresql` extra).
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def sqlite_path(url: URL) -> Path | None:
    """The file a SQLite URL names; None in memory and for `file:` URIs."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).expanduser()


def create_sqlite_engine(url: URL) -> Engine:
    path = sqlite_path(url)
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


# What SQLite says when the store, not the statement, is at fault.
_SQLITE_UNAVAILABLE = ("database or disk is full", "database is locked", "disk i/o error", "unable to open")


def report_unavailable(engine: Engine, shown: str) -> None:
    """Make the engine raise StoreUnavailable, naming the store (`shown`, password masked), where
    the database, not the statement, failed: a lost connection (the server went away, or the
    connection broke mid-transaction), a full disk, a database locked past the busy timeout. The
    transaction in progress is rolled back as it unwinds, so nothing of the call is kept."""

    @event.listens_for(engine, "handle_error")
    def _translate(context: ExceptionContext) -> None:
        original = context.original_exception
        reason = str(original).strip().splitlines()[0] if str(original).strip() else type(original).__name__
        sqlite_down = engine.dialect.name == "sqlite" and any(
            phrase in reason.lower() for phrase in _SQLITE_UNAVAILABLE
        )
        if context.is_disconnect or sqlite_down:
            raise StoreUnavailable(
                f"the store at {shown} did not take the call ({reason}); it was rolled back, nothing "
                "of it was kept: try again once the database is reachable and has room"
            ) from context.sqlalchemy_exception
