"""The SQL schema's versions, as Alembic revisions (the scripts: migrations/): what a database holds
(`read_state`, and `read_sqlite_state`, which never writes to the file), creating the schema at the
head revision in an empty database (`create_at_head`), and upgrading an older one (`migrate`) on a
connection whose transaction the caller owns, so that a failed upgrade rolls back whole; SQLite files
are also copied aside first (`backup_sqlite`).

Alembic is driven from code: `alembic_config` builds the Config, with `script_location` inside this
package; no alembic.ini is read.
"""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from mlscope.store.schema import SchemaState
from mlscope.store.sql.revisions import MIGRATIONS, REVISION_PREFIX, VERSION_TABLE, head_revision, revisions
from mlscope.store.sql.tables import Base

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

__all__ = [
    "BASELINE",
    "MIGRATIONS",
    "REVISION_PREFIX",
    "STORE_TABLES",
    "VERSION_TABLE",
    "alembic_config",
    "backup_sqlite",
    "create_at_head",
    "head_revision",
    "migrate",
    "read_sqlite_state",
    "read_state",
    "revisions",
]

# The schema mlscope 0.1.0 created, without recording any version.
BASELINE = "mlscope_0001"
STORE_TABLES = frozenset(Base.metadata.tables)
# The tables mlscope 0.1.0 created (later revisions add more): what an unversioned store must hold.
BASELINE_TABLES = frozenset({"systems", "evaluations", "measurements", "spans"})
_UNVERSIONED_NOTE = "written by mlscope 0.1.0, which kept no schema version"


def alembic_config(connection: Connection | None = None) -> Config:
    """The Alembic configuration of the store's migrations, built in code.

    Args:
        connection: the connection env.py runs the revisions on (in the transaction it is in); None
            for commands that need no database, such as `command.revision`.
    """
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


@functools.lru_cache(maxsize=1)
def _scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def read_state(connection: Connection, *, backend: str, location: str) -> SchemaState:
    """What the database `connection` is on holds, read without changing anything.

    Args:
        connection: any connection to the database.
        backend: "sqlite" or "postgresql", for the state.
        location: the store URL with its password masked, for the state.
    """
    tables = set(sa.inspect(connection).get_table_names())
    head = head_revision()

    def state(name: str, current: str | None, note: str = "", found: tuple[str, ...] = ()) -> SchemaState:
        return SchemaState(backend, location, name, current, head, note, found)

    versions: list[str] = []
    if VERSION_TABLE in tables:
        versions = [str(v) for v in connection.scalars(sa.text(f"SELECT version_num FROM {VERSION_TABLE}"))]
    other_tables = tuple(sorted(tables - {VERSION_TABLE}))
    if versions:
        if len(versions) == 1 and versions[0] in revisions():
            if versions[0] == head:
                return state("current", head)
            return state("older", versions[0], "written by an older mlscope")
        if all(v.startswith(REVISION_PREFIX) for v in versions):
            return state("newer", ", ".join(sorted(versions)))
        revision = ", ".join(repr(v) for v in sorted(versions))
        return state("foreign", None, found=(f"{VERSION_TABLE} at revision {revision}", *other_tables))
    if not tables:
        return state("empty", None)
    if tables >= BASELINE_TABLES:
        return state("older", BASELINE, _UNVERSIONED_NOTE)
    if VERSION_TABLE in tables:
        return state("foreign", None, found=(f"{VERSION_TABLE} with no revision", *other_tables))
    return state("foreign", None, found=other_tables)


def read_sqlite_state(path: Path, *, location: str) -> SchemaState | None:
    """What the SQLite file at `path` holds, read through a read-only connection, so that nothing in
    the file changes (not even its journal mode) whatever it turns out to be.

    Returns:
        The state, or None when there is no file (the database is empty).

    Raises:
        sqlalchemy.exc.DatabaseError: when the file is not a SQLite database.
    """
    if not path.is_file():
        return None
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    engine = sa.create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return read_state(connection, backend="sqlite", location=location)
    finally:
        engine.dispose()


def create_at_head(connection: Connection) -> None:
    """Creates the schema in an empty database from tables.py and stamps it with the head revision
    (the contract suite checks this equals the migrations applied one after another)."""
    Base.metadata.create_all(connection)
    from alembic.runtime.migration import MigrationContext

    MigrationContext.configure(connection).stamp(_scripts(), "head")


def migrate(connection: Connection, state: SchemaState) -> tuple[tuple[str, ...], int]:
    """Upgrades an older database to the head revision, in the transaction `connection` is in.

    Args:
        connection: a connection in a transaction the caller commits, or rolls back on error.
        state: the database's state, read on this connection ("older").

    Returns:
        The revisions applied, oldest first, and how many measurement rows were backfilled.
    """
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    config = alembic_config(connection)
    if VERSION_TABLE not in sa.inspect(connection).get_table_names():
        # mlscope 0.1.0's database: its schema is the baseline, which it never recorded.
        MigrationContext.configure(connection).stamp(_scripts(), BASELINE)
    assert state.current is not None
    known = revisions()
    steps = tuple(known[known.index(state.current) + 1 :])
    command.upgrade(config, "head")
    return steps, int(config.attributes.get("mlscope.backfilled", 0))


def backup_sqlite(path: Path, label: str) -> Path:
    """Copies the SQLite database at `path` to `<path>.before-upgrade-<label>` (`.2`, `.3`, ... after
    it when that exists) through SQLite's backup API, which copies a consistent snapshot, pages in
    the write-ahead log included.

    Returns:
        The copy's path.
    """
    target = path.with_name(f"{path.name}.before-upgrade-{label}")
    number = 1
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}.before-upgrade-{label}.{number}")
    source = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
    try:
        copy = sqlite3.connect(target)
        try:
            source.backup(copy)
        finally:
            copy.close()
    finally:
        source.close()
    return target
