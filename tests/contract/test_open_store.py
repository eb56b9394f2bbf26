"""Choosing and opening a store by URL, and what the embedded SQLite store promises beyond the
contract: it creates its directory, and a CLI can read or write while another process writes."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from mlscope.contract.errors import UserError
from mlscope.store import Store, open_store

MODEL = {"name": "resnet18", "version": "1.0", "manifest_sha256": None}
FRAMEWORK = {"name": "pytorch", "version": None}


def submit(store: Store) -> str:
    return store.create_evaluation(
        model=MODEL, manifest={}, framework=FRAMEWORK, runner="inline", device="cpu", request={}
    )


@pytest.mark.parametrize(
    "url", ["mysql://root@localhost/db", "postgres://u@h/db", "redis://127.0.0.1:6379/0"]
)
def test_an_unknown_scheme_names_it_and_the_known_ones(url: str) -> None:
    with pytest.raises(UserError) as raised:
        open_store(url)
    scheme = url.split("://")[0]
    assert repr(scheme) in str(raised.value)
    assert "sqlite" in str(raised.value) and "postgresql" in str(raised.value)
    assert raised.value.field == "store_url"


def test_a_path_is_not_a_store_url() -> None:
    with pytest.raises(UserError) as raised:
        open_store("/var/lib/mlscope.db")
    assert raised.value.field == "store_url"


def test_an_unreachable_postgresql_is_a_user_error() -> None:
    # Nothing listens on port 1, so the connection is refused at once.
    with pytest.raises(UserError) as raised:
        open_store("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2")
    assert "127.0.0.1:1" in str(raised.value)


def test_an_unreachable_mongodb_is_a_user_error_naming_the_url() -> None:
    # Given a mongodb:// URL where nothing listens (port 1 refuses at once), with a password in it
    url = "mongodb://scope:s3cret@127.0.0.1:1/results"

    # When it is opened with the store's own server-selection timeout (a few seconds, not pymongo's 30)
    with pytest.raises(UserError) as raised:
        open_store(url)

    # Then the user error names store_url and the server, says none answered, and hides the password
    message = str(raised.value)
    assert raised.value.field == "store_url"
    assert "127.0.0.1:1" in message and "no MongoDB server answered" in message
    assert "s3cret" not in message and "Topology" not in message


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mongodb://", "hostname"),
        ("mongodb://127.0.0.1:notaport/db", "Port"),
        ("mongodb://127.0.0.1:1/bad db", "database name"),
    ],
)
def test_a_malformed_mongodb_url_is_a_user_error(url: str, says: str) -> None:
    with pytest.raises(UserError) as raised:
        open_store(url)
    assert raised.value.field == "store_url" and says in str(raised.value)


def test_sqlite_creates_its_directory_and_uses_wal(tmp_path: Path) -> None:
    # Given a database path whose directories do not exist
    path = tmp_path / "a" / "b" / "mlscope.db"

    # When the store is opened and used
    with open_store(f"sqlite:///{path}") as store:
        submit(store)

    # Then the file exists, in write-ahead-log mode so readers never wait for writers
    assert path.is_file()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_sqlite_in_memory_works_for_one_process() -> None:
    with open_store("sqlite://") as store:
        id = submit(store)
        assert store.get_evaluation(id)["status"] == "queued"


def test_sqlite_reads_and_writes_while_another_process_writes(tmp_path: Path) -> None:
    # Given a store, and another connection (as another process would) holding the write lock
    path = tmp_path / "mlscope.db"
    with open_store(f"sqlite:///{path}") as store:
        first = submit(store)
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        other.execute("UPDATE evaluations SET status = 'running'")
        release = threading.Timer(0.5, other.execute, args=("COMMIT",))
        release.start()
        try:
            # When the store reads, Then it does not wait and sees the last committed state
            assert store.get_evaluation(first)["status"] == "queued"
            # When the store writes, Then it waits for the lock instead of failing
            second = submit(store)
        finally:
            release.join()
            other.close()
        assert store.get_evaluation(first)["status"] == "running"
        assert store.get_evaluation(second)["status"] == "queued"
