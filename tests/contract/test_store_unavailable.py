"""A store that fails under a write: a full disk (SQLite) and a PostgreSQL connection lost in the
middle of a transaction. Each ends in one clear StoreUnavailable, the transaction rolled back (nothing
half-written), and the same write succeeds once the database is back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from mlscope.contract.errors import StoreUnavailable
from mlscope.store import Store, open_store
from tests.contract.builders import submit
from tests.contract.conftest import _conninfo


def _running(store: Store) -> str:
    evaluation_id = submit(store, framework="onnxruntime")
    store.start_evaluation(evaluation_id)
    return evaluation_id


def _finish(store: Store, evaluation_id: str, samples: int) -> None:
    latencies = [10_000_000 + (i * 7919) % 1_000_003 for i in range(samples)]
    store.finish_evaluation(
        evaluation_id,
        system={"id": "box-a", "hostname": "box-a", "cpu": {"model": "x"}, "gpus": []},
        framework={"name": "onnxruntime", "version": "1.23"},
        cold_start={"import_ms": 1.0, "load_ms": 1.0, "first_inference_ms": 1.0},
        measurements=[
            {
                "scenario": "single_stream",
                "batch_size": 1,
                "latency_ms": {"count": samples, "median": 10.5, "median_ci": [10.4, 10.6]},
                "throughput": 95.0,
                "validity": {"valid": True, "reasons": []},
                "latencies_ns": latencies,
            }
        ],
        finished_at=datetime.now(timezone.utc),
    )


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlscope.db'}"


def test_a_full_disk_rolls_the_finish_back_and_says_so(sqlite_url: str) -> None:
    # Given a running evaluation in a SQLite store whose file may not grow (SQLite's own "database or
    # disk is full", SQLITE_FULL, as a full disk gives it)
    with open_store(sqlite_url) as store:
        evaluation_id = _running(store)
        engine: Any = store._engine  # type: ignore[attr-defined]
        pages = engine.raw_connection().cursor().execute("PRAGMA page_count").fetchone()[0]

        @event.listens_for(engine, "connect")
        def _cap(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute(f"PRAGMA max_page_count={pages}")

        engine.dispose()
        # When its result is stored
        with pytest.raises(StoreUnavailable) as failure:
            _finish(store, evaluation_id, samples=200_000)
        # Then one line says where, what and that nothing was kept
        message = failure.value.message
        assert "database or disk is full" in message and sqlite_url.split("///")[1] in message
        assert "nothing of it was kept" in message
        event.remove(engine, "connect", _cap)
        engine.dispose()
    # ... and nothing is half-written: the evaluation is still running, with no measurement
    with open_store(sqlite_url) as reopened:
        stored = reopened.get_evaluation(evaluation_id)
        assert stored["status"] == "running" and stored["measurements"] == []
        # When the disk has room again, the same write succeeds
        _finish(reopened, evaluation_id, samples=200_000)
        assert reopened.get_evaluation(evaluation_id)["status"] == "succeeded"


@pytest.fixture
def postgres_store(postgres_url: str) -> Iterator[Store]:
    from tests.contract.conftest import emptied_postgres

    with emptied_postgres(postgres_url), open_store(postgres_url) as store:
        yield store


def test_a_connection_lost_mid_transaction_rolls_back_and_the_retry_succeeds(
    postgres_store: Store, postgres_url: str
) -> None:
    from sqlalchemy.engine import make_url

    # Given a running evaluation, and a server that ends the store's connection right after the
    # finish has locked the evaluation's row (inside its transaction)
    evaluation_id = _running(postgres_store)
    engine: Any = postgres_store._engine  # type: ignore[attr-defined]
    killed: list[int] = []

    @event.listens_for(engine, "after_cursor_execute")
    def _kill(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FOR UPDATE" in statement and not killed:
            pid = conn.connection.dbapi_connection.info.backend_pid
            with psycopg.connect(_conninfo(make_url(postgres_url)), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            killed.append(pid)

    # When the result is stored
    with pytest.raises(StoreUnavailable) as failure:
        _finish(postgres_store, evaluation_id, samples=1000)
    event.remove(engine, "after_cursor_execute", _kill)
    # Then it is one clear error, with the password masked, and the transaction left nothing behind
    assert killed and "nothing of it was kept" in failure.value.message
    stored = postgres_store.get_evaluation(evaluation_id)
    assert stored["status"] == "running" and stored["measurements"] == []
    # ... and the same write succeeds on a new connection
    _finish(postgres_store, evaluation_id, samples=1000)
    stored = postgres_store.get_evaluation(evaluation_id, include_raw=True)
    assert stored["status"] == "succeeded" and len(stored["measurements"][0]["latencies_ns"]) == 1000


def test_an_unreachable_server_is_still_a_one_line_error_naming_the_store_url() -> None:
    from mlscope.contract.errors import UserError

    with pytest.raises(UserError) as failure:
        open_store("postgresql://postgres:secret@127.0.0.1:1/nothing")
    assert failure.value.field == "store_url" and "secret" not in failure.value.message
