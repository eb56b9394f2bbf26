"""Fixtures of the store contract suite: `store_url` and `store`, parametrized over every Store
implementation, so one suite holds every backend to the same contract.

PostgreSQL runs against the server on this machine (MLSCOPE_TEST_POSTGRES_URL, default database
`test`), in a database created for this session and dropped after it, so runs never see each other's
rows. Unreachable, it skips locally and fails in CI, where a skipped backend would pass unnoticed.

The Mongo store runs twice. "mongomock": against mongomock (no MongoDB server can run where the suite
runs), in a database of its own per test. "mongodb": against the real server MLSCOPE_TEST_MONGO_URL
names, in a database of its own per test, dropped after it; skipped when the variable is unset.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from sqlalchemy.engine import URL, make_url

from mlscope.store import Store, open_store
from tests.fixtures.services import unavailable

POSTGRES_URL = os.environ.get("MLSCOPE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
MONGO_URL = os.environ.get("MLSCOPE_TEST_MONGO_URL", "")

# Tests that need what mongomock does not have, each with the reason. Only these are skipped there.
MONGOMOCK_CANNOT = {
    "test_concurrent_starts_count_every_attempt": (
        "mongomock's find_one_and_update writes and then reads the document back in two steps, so two "
        "concurrent starts can be handed the same attempt number (one in 400 here); the atomic start is "
        "proven against a real server only (param mongodb), and on SQLite and PostgreSQL by threads and "
        "processes"
    ),
    "test_concurrent_finishes_keep_exactly_one_set": (
        "mongomock does not isolate concurrent operations (its locks guard single dict accesses, and "
        "find_one_and_update is a find then an update), so the atomic conditional finish is proven "
        "against a real server only (param mongodb); tests/unit/test_store_mongo.py checks the losing "
        "finisher's path deterministically"
    ),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        name = getattr(item, "originalname", item.name)
        if (
            callspec is not None
            and callspec.params.get("store_url") == "mongomock"
            and name in MONGOMOCK_CANNOT
        ):
            item.add_marker(pytest.mark.skip(reason=f"mongomock: {MONGOMOCK_CANNOT[name]}"))


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
        unavailable(f"PostgreSQL at {server.render_as_string(hide_password=True)} is unreachable: {error}")

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
        connection.execute("TRUNCATE compare_keys, spans, measurements, evaluations, systems")


@contextmanager
def emptied_postgres(url: str) -> Iterator[str]:
    """The session's database, empty when a test starts and emptied after it. Emptied first too,
    because not every writer to it empties it afterwards (a farm's workers write to it as well)."""
    _empty_postgres(url)
    try:
        yield url
    finally:
        _empty_postgres(url)


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def _mongomock_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from mlscope import store as store_package
    from tests.contract.mongomock_store import SharedMongomockClient

    monkeypatch.setitem(store_package._STORES, "mongodb", "tests.contract.mongomock_store:MongomockStore")
    database = f"mlscope_contract_{uuid.uuid4().hex[:12]}"
    yield f"mongodb://127.0.0.1:27017/{database}"
    SharedMongomockClient().drop_database(database)


def _mongodb_url() -> Iterator[str]:
    if not MONGO_URL:
        pytest.skip(
            "MLSCOPE_TEST_MONGO_URL is not set: no MongoDB server here, so the Mongo store ran against "
            "mongomock only (param mongomock)"
        )
    import pymongo

    database = f"mlscope_contract_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    yield _with_database(MONGO_URL, database)
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
        MONGO_URL, serverSelectionTimeoutMS=5000
    )
    try:
        client.drop_database(database)
    finally:
        client.close()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.postgres),
        "mongomock",
        "mongodb",
    ]
)
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The URL of an empty store of each implementation."""
    if request.param == "sqlite":
        # A directory that does not exist yet: opening the store must create it.
        yield f"sqlite:///{tmp_path / 'data' / 'mlscope.db'}"
    elif request.param == "postgresql":
        with emptied_postgres(request.getfixturevalue("postgres_url")) as url:
            yield url
    elif request.param == "mongomock":
        yield from _mongomock_url(monkeypatch)
    else:
        yield from _mongodb_url()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty SQL store that several processes can share (so not SQLite in memory)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    with emptied_postgres(request.getfixturevalue("postgres_url")) as url:
        yield url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """An open, empty store of each implementation."""
    with open_store(store_url) as opened:
        yield opened
