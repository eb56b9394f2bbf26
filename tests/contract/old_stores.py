"""Stores as mlscope 0.1.0 left them, for the migration tests: the SQLite file and the PostgreSQL dump of
tests/data/store-0.1.0 (never regenerated: see its README), what the script that made them wrote
(`FIXTURE_*`, `fixture_latencies`), and ways to see that a database did not change (`fingerprint`)
and what its schema is (`describe`)."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tests.conftest import REPO
from tests.contract.conftest import POSTGRES_URL, _conninfo

__all__ = [
    "FIXTURE",
    "FIXTURE_SPANS",
    "FIXTURE_STATUSES",
    "describe",
    "fingerprint",
    "fixture_latencies",
    "load_postgres_dump",
    "postgres_database",
]

FIXTURE = REPO / "tests" / "data" / "store-0.1.0"
# make_fixture.py's evaluations, in the order it made them.
FIXTURE_STATUSES = {
    f"fixture{i:02d}" + "0" * 24: status
    for i, status in enumerate(
        ["succeeded", "succeeded", "succeeded", "succeeded", "failed", "queued", "cancelled", "succeeded"]
    )
}
FIXTURE_SPANS = 20


def fixture_latencies() -> dict[tuple[str, int], list[int]]:
    """The raw latencies make_fixture.py wrote, drawn again from its seeded generator in its order."""
    rng = np.random.default_rng(7)
    drawn = {}
    for i, (id, status) in enumerate(FIXTURE_STATUSES.items()):
        if status != "succeeded":
            continue
        for batch_size, median_ms in ((1, 10.0 + i), (8, 60.0 + i)):
            values = rng.lognormal(np.log(median_ms * 1e6), 0.05, 200)
            drawn[(id, batch_size)] = [int(x) for x in values]
    return drawn


@contextmanager
def postgres_database(url: str = POSTGRES_URL) -> Iterator[str]:
    """An empty database of its own on the PostgreSQL server, dropped afterwards; its URL."""
    import psycopg

    server = make_url(url)
    name = f"mlscope_migrations_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_conninfo(server, "postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(_conninfo(server, "postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def load_postgres_dump(url: str, dump: Path = FIXTURE / "postgresql.sql") -> None:
    """Runs a plain pg_dump file through psycopg: its statements, and its COPY blocks as COPY. psql's
    meta-commands (\\restrict, \\unrestrict) are left out."""
    import psycopg

    statement: list[str] = []
    lines = iter(dump.read_text().splitlines())
    with psycopg.connect(_conninfo(make_url(url))) as connection, connection.cursor() as cursor:
        for line in lines:
            if not statement and (line.startswith(("--", "\\")) or not line.strip()):
                continue
            statement.append(line)
            if not line.rstrip().endswith(";"):
                continue
            sql = "\n".join(statement)
            statement = []
            if sql.startswith("COPY ") and sql.rstrip().endswith("FROM stdin;"):
                rows = []
                for row in lines:
                    if row == "\\.":
                        break
                    rows.append(row + "\n")
                with cursor.copy(sql) as copy:
                    copy.write("".join(rows))
            else:
                cursor.execute(sql)
        connection.commit()


def describe(url: str) -> dict[str, Any]:
    """The schema of mlscope's tables: columns (name, type, nullable), keys, uniques and indexes."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        inspector = sa.inspect(engine)
        tables = sorted(set(inspector.get_table_names()) - {"alembic_version"})
        return {
            table: {
                "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
                "primary_key": inspector.get_pk_constraint(table)["constrained_columns"],
                "foreign_keys": sorted(
                    (tuple(fk["constrained_columns"]), fk["referred_table"], str(fk.get("options")))
                    for fk in inspector.get_foreign_keys(table)
                ),
                "unique": sorted(tuple(u["column_names"]) for u in inspector.get_unique_constraints(table)),
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]), str(i.get("column_sorting")))
                    for i in inspector.get_indexes(table)
                ),
            }
            for table in tables
        }
    finally:
        engine.dispose()


def fingerprint(url: str) -> Any:
    """What must not change when a store is refused: a SQLite file's bytes, or every table of a
    PostgreSQL database with its columns and rows."""
    if url.startswith("sqlite:///"):
        return hashlib.sha256(Path(url.removeprefix("sqlite:///")).read_bytes()).hexdigest()
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as connection:
            found = {}
            for table in sorted(sa.inspect(connection).get_table_names()):
                columns = [c["name"] for c in sa.inspect(connection).get_columns(table)]
                rows = connection.execute(sa.text(f'SELECT * FROM "{table}"')).all()
                found[table] = (columns, sorted(repr(tuple(row)) for row in rows))
            return found
    finally:
        engine.dispose()
