"""A worker's store writes through a real PostgreSQL outage: a server of the test's own
(tests/fixtures/private_postgres.py) taken away as a crash takes it and brought back. Results written
while it is away are kept in the spool and land exactly once when it returns; a write for an
evaluation that has already ended changes nothing; and a worker that dies during the outage leaves
its writes for the next one on the same spool directory."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlscope.store import Store, open_store
from mlscope.workers.spool import DurableWrites, Spool
from tests.contract.builders import ERROR, finish, run_to
from tests.fixtures.private_postgres import PrivatePostgres
from tests.fixtures.store_writes import finish_kwargs

pytestmark = pytest.mark.postgres

SPANS = [
    {
        "trace_id": "a" * 32,
        "span_id": f"{n:016x}",
        "parent_id": None,
        "name": f"predict {n}",
        "level": "MODEL",
        "start_ns": n * 1000,
        "end_ns": n * 1000 + 500,
        "attributes": {"n": n},
    }
    for n in range(1, 4)
]


@pytest.fixture
def store_url(private_postgres: PrivatePostgres) -> str:
    return private_postgres.create_database("mlscope_spool")


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as opened:
        yield opened


class Lines:
    """The DurableWrites log, with a way to wait for the "store back" line."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.back = threading.Event()

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        if line.startswith("store back"):
            self.back.set()


def test_results_written_during_an_outage_land_once_when_the_store_returns(
    store: Store,
    private_postgres: PrivatePostgres,
    tmp_path: Path,
) -> None:
    # Given two running evaluations, one that has already ended, and a worker writing durably
    first, second = run_to(store, "running"), run_to(store, "running")
    ended = run_to(store, "running")
    finish(store, ended)
    ended_before = store.get_evaluation(ended, include_raw=True)
    log = Lines()
    durable = DurableWrites(store, Spool(tmp_path / "spool" / "agent-a"), retry_s=0.2, log=log)
    with durable:
        # When PostgreSQL goes away and the worker writes its results
        private_postgres.stop()
        kept = [
            durable.write(first, "save_spans", spans=SPANS),
            durable.write(first, "finish_evaluation", **finish_kwargs(samples=300)),
            durable.write(second, "fail_evaluation", error=ERROR),
            durable.write(ended, "finish_evaluation", **finish_kwargs(samples=9)),
        ]
        # Then none was lost: each is kept, and the log says where
        assert kept == [False] * 4 and len(durable.spool) == 4
        assert log.lines[0].startswith(f"store unreachable: 1 results kept in {durable.spool.directory}")
        # When the server comes back (the flusher has been retrying meanwhile)
        private_postgres.start()
        assert log.back.wait(120), log.lines
    # Then every write landed exactly once, and the spool is empty
    assert len(durable.spool) == 0 and log.lines[-1].startswith("store back: 4 spooled writes stored after")
    stored = store.get_evaluation(first, include_raw=True)
    assert stored["status"] == "succeeded" and len(stored["measurements"]) == 1
    assert len(stored["measurements"][0]["latencies_ns"]) == 300
    assert store.count_spans(first) == len(SPANS)
    assert store.get_evaluation(second)["status"] == "failed"
    assert store.get_evaluation(second)["error"] == ERROR
    # ... and the evaluation that had ended is exactly as it was
    assert store.get_evaluation(ended, include_raw=True) == ended_before
    # When the same writes are replayed (a worker that died between storing and forgetting them)
    spool = durable.spool
    spool.put(first, "save_spans", {"spans": SPANS})
    spool.put(first, "finish_evaluation", finish_kwargs(samples=300))
    spool.put(second, "start_evaluation", {})
    spool.flush(store)
    # Then nothing changed: one result, the spans once, the failure kept
    again = store.get_evaluation(first, include_raw=True)
    assert again == stored and store.count_spans(first) == len(SPANS)
    assert store.get_evaluation(second)["status"] == "failed" and len(spool) == 0


def test_a_worker_that_died_during_the_outage_leaves_its_results_to_the_next(
    store: Store,
    store_url: str,
    private_postgres: PrivatePostgres,
    tmp_path: Path,
) -> None:
    # Given a worker that kept a result during an outage and died before the server came back
    evaluation_id = run_to(store, "running")
    directory = tmp_path / "spool" / "agent-a"
    private_postgres.stop()
    dying = DurableWrites(store, Spool(directory), log=lambda line: None)
    assert dying.write(evaluation_id, "finish_evaluation", **finish_kwargs()) is False
    store.close()
    # When the server is back and a new worker starts on the same spool directory
    private_postgres.start()
    log = Lines()
    with open_store(store_url) as reopened:
        with DurableWrites(reopened, Spool(directory), log=log):
            assert log.back.wait(60), log.lines
        # Then the result is stored, once
        stored = reopened.get_evaluation(evaluation_id, include_raw=True)
    assert stored["status"] == "succeeded" and len(stored["measurements"]) == 1
    assert log.lines[0].startswith("store writes waiting from before: 1 kept in")
    assert list(directory.iterdir()) == []
