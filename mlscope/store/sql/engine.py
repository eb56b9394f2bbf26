"""Opening a SQL database: the store URL as an engine URL (PostgreSQL driven by psycopg 3), the
SQLite engine set up to be shared safely between processes (WAL, a busy timeout, write transactions
that take the write lock up front), the PostgreSQL engine set up so that an unreachable server costs a
caller seconds, not minutes, and the one place where the database's failures become StoreUnavailable.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, ExceptionContext, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import ConnectionPoolEntry, QueuePool, StaticPool

from mlscope.contract.errors import UserError
from mlscope.store.errors import StoreUnavailable

__all__ = [
    "CONNECT_TIMEOUT_S",
    "POOL_TIMEOUT_S",
    "SQLITE_BUSY_TIMEOUT_S",
    "create_server_engine",
    "create_sqlite_engine",
    "engine_url",
    "report_unavailable",
    "sqlite_path",
    "upsert_into",
]

# How long a write waits for another process's write to finish before SQLite gives up.
SQLITE_BUSY_TIMEOUT_S = 30.0
# How long opening a connection to a database server may take. libpq waits forever by default, so a
# server that is down behind a firewall (packets dropped, not refused) held every API request.
CONNECT_TIMEOUT_S = 3
# How long a caller waits for a pooled connection when all are taken (SQLAlchemy's default is 30 s):
# while the server is away they are all busy failing, and the caller should hear so promptly.
POOL_TIMEOUT_S = 5.0
# A connection whose sent data goes unacknowledged this long (the server's host vanished mid-query)
# is dead; without it, a query waits for the kernel's own retransmission timeout, about 15 minutes.
TCP_USER_TIMEOUT_MS = 10_000


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


class _BoundedPool(QueuePool):
    """A QueuePool whose checkout timeout is the store's trouble (StoreUnavailable), like every other
    way the server can fail to answer, rather than SQLAlchemy's own TimeoutError."""

    shown = "the store"

    def _do_get(self) -> ConnectionPoolEntry:
        try:
            return super()._do_get()
        except PoolTimeout as error:
            raise StoreUnavailable(
                f"the store at {self.shown} did not take the call (every connection stayed busy for "
                f"{self._timeout:g}s: the database server is slow or unreachable); nothing of it was kept: "
                "try again once the database is reachable"
            ) from error

    def recreate(self) -> QueuePool:
        # dispose() swaps in a new pool: it must still name the store.
        pool = super().recreate()
        pool.shown = self.shown  # type: ignore[attr-defined]
        return pool


def create_server_engine(url: URL) -> Engine:
    """The engine for a database server (PostgreSQL): connections checked before use (a restarted
    server leaves the pool's connections dead), and every wait bounded (connect, pool checkout,
    unacknowledged writes), so while the server is down a call fails within seconds."""
    query = {key.lower() for key in url.query}
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in query:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    if "tcp_user_timeout" not in query:
        connect_args["tcp_user_timeout"] = TCP_USER_TIMEOUT_MS
    if "keepalives" not in query:
        # An idle pooled connection to a vanished host is found dead by keepalives, not by the next
        # request waiting on it.
        connect_args.update(keepalives=1, keepalives_idle=30, keepalives_interval=5, keepalives_count=3)
    return create_engine(
        url,
        pool_pre_ping=True,
        poolclass=_BoundedPool,
        pool_timeout=POOL_TIMEOUT_S,
        connect_args=connect_args,
    )


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


def _server_down(engine: Engine, original: BaseException) -> bool:
    """Whether a database server's error is the server's trouble rather than the statement's.

    The DB-API's OperationalError is exactly that on PostgreSQL (psycopg raises it for a refused or
    timed-out connection, a server shutting down or starting up, too many clients, a cancelled
    statement, a deadlock or serialization failure: each worth retrying), and InterfaceError for a
    connection that is already closed; the statement's own faults are ProgrammingError, DataError,
    IntegrityError. A connection that fails to open is no disconnect to SQLAlchemy, so these escaped
    as a bare OperationalError (a 500) before.
    """
    if engine.dialect.name == "sqlite":
        return False
    dbapi = engine.dialect.loaded_dbapi
    return isinstance(original, (dbapi.OperationalError, dbapi.InterfaceError))


def report_unavailable(engine: Engine, shown: str) -> None:
    """Make the engine raise StoreUnavailable, naming the store (`shown`, password masked), where
    the database, not the statement, failed: the server refusing or not answering a connection, a
    lost connection (the server went away, or the connection broke mid-transaction), every pooled
    connection busy past POOL_TIMEOUT_S, a full disk, a database locked past the busy timeout. The
    transaction in progress is rolled back as it unwinds, so nothing of the call is kept."""
    if isinstance(engine.pool, _BoundedPool):
        engine.pool.shown = shown

    @event.listens_for(engine, "handle_error")
    def _translate(context: ExceptionContext) -> None:
        original = context.original_exception
        reason = str(original).strip().splitlines()[0] if str(original).strip() else type(original).__name__
        sqlite_down = engine.dialect.name == "sqlite" and any(
            phrase in reason.lower() for phrase in _SQLITE_UNAVAILABLE
        )
        if context.is_disconnect or sqlite_down or _server_down(engine, original):
            raise StoreUnavailable(
                f"the store at {shown} did not take the call ({reason}); it was rolled back, nothing "
                "of it was kept: try again once the database is reachable and has room"
            ) from context.sqlalchemy_exception


def upsert_into(dialect: str, table: Any) -> Any:
    """An INSERT into `table` with the dialect's ON CONFLICT clauses (`on_conflict_do_nothing`,
    `on_conflict_do_update`, `excluded`): PostgreSQL's for "postgresql", else SQLite's.

    The dialect's module is imported here, when a statement is built: a process that only opens SQLite
    never imports SQLAlchemy's PostgreSQL dialect, a large part of a short command's start."""
    name = "postgresql" if dialect == "postgresql" else "sqlite"
    return importlib.import_module(f"sqlalchemy.dialects.{name}").insert(table)
