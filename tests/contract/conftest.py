"""Fixtures of the store contract suite: `store_url` and `store`, parametrized over every Store
implementation, so one suite holds every backend to the same contract.

PostgreSQL runs against the server on this machine (MLSCOPE_TEST_POSTGRES_URL, default database
`test`), in a database created for this session and dropped after it, so runs never see each other's
rows. Unreachable, it skips locally and fails in CI, where a skipped backend would pass unnoticed.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL, make_url

from mlscope.store import Store, open_store

POSTGRES_URL = os.environ.get("MLSCOPE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def _conninfo(url: URL, database: str | None = None) -> str:
    from psycopg.conninfo import make_conninfo

    parts = {
        "host": url.host,
        "port": url.port,
        "user": url.username,
        "password": url.password,
        "dbname": database or url.database,
        "connect_timeout": 5,
    }
    return make_conninfo("", **{key: value for key, value in parts.items() if value is not None})


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of an empty database, with the store's schema, made for this test session."""
    import psycopg

    server = make_url(POSTGRES_URL)
    try:
        psycopg.connect(_conninfo(server)).close()
    except psycopg.OperationalError as error:
        message = f"PostgreSQL at {server.render_as_string(hide_password=True)} is unreachable: {error}"
        if _in_ci():
            pytest.fail(message)
        pytest.skip(message)

    name = f"mlscope_contract_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    # CREATE/DROP DATABASE cannot run inside a transaction, nor while connected to the target.
    with psycopg.connect(_conninfo(server, "postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = server.set(database=name).render_as_string(hide_password=False)
    try:
        open_store(url).close()  # creates the schema once, so tests can empty the tables after each run
        yield url
    finally:
        with psycopg.connect(_conninfo(server, "postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _empty_postgres(url: str) -> None:
    import psycopg

    with psycopg.connect(_conninfo(make_url(url)), autocommit=True) as connection:
        connection.execute("TRUNCATE measurements, evaluations, systems")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty store of each implementation."""
    if request.param == "sqlite":
        # A directory that does not exist yet: opening the store must create it.
        yield f"sqlite:///{tmp_path / 'data' / 'mlscope.db'}"
        return
    url = request.getfixturevalue("postgres_url")
    yield url
    _empty_postgres(url)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """An open, empty store of each implementation."""
    with open_store(store_url) as opened:
        yield opened
