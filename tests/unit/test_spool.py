"""The worker's spool of store writes, against a real SQLite store: writes kept while the store is
away reach it once, in order, when it returns; replaying them again changes nothing; a write the store
can never take is dropped, not retried forever; and a new worker on the same directory writes what an
old one left. The outage here is a store that answers StoreUnavailable on every call (what the SQL
store raises for a server that is down); tests/integration/test_spool_outage.py takes a real
PostgreSQL server away."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mlscope.contract.errors import StoreUnavailable, UserError
from mlscope.store import Store, open_store
from mlscope.workers.spool import DurableWrites, Spool, spool_directory
from tests.contract.builders import submit
from tests.fixtures.store_writes import FINISHED_AT, finish_kwargs


def queued(store: Store) -> str:
    return submit(store, framework="onnxruntime")


class Outage:
    """The store as a worker sees it through an outage: every call raises StoreUnavailable while
    `down`, and goes to the real store otherwise."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.down = False
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if self.down:
                raise StoreUnavailable(f"the store did not take {name} (test outage); nothing was kept")
            return method(*args, **kwargs)

        return call


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as opened:
        yield opened


@pytest.fixture
def spool(tmp_path: Path) -> Spool:
    return Spool(tmp_path / "spool" / "agent-a")


def test_put_keeps_each_write_in_a_file_of_its_own_in_order(spool: Spool) -> None:
    # Given writes for two evaluations, interleaved
    spool.put("e1", "start_evaluation", {"started_at": FINISHED_AT - timedelta(minutes=1)})
    spool.put("e2", "start_evaluation", {})
    spool.put("e1", "finish_evaluation", finish_kwargs())
    # Then they wait in the order made, the oldest evaluation first, nothing half-written beside them
    assert len(spool) == 3 and spool.pending() == ["e1", "e2"]
    assert [(w.evaluation_id, w.op) for w in spool.writes()] == [
        ("e1", "start_evaluation"),
        ("e2", "start_evaluation"),
        ("e1", "finish_evaluation"),
    ]
    assert not [path for path in spool.directory.iterdir() if path.name.startswith(".")]
    # ... and datetimes come back as the aware datetimes the store wants
    kwargs = spool.writes()[2].kwargs()
    assert (
        kwargs["finished_at"] == FINISHED_AT and kwargs["measurements"][0]["latencies_ns"][-1] == 10_000_049
    )


def test_put_refuses_what_it_could_not_replay(spool: Spool) -> None:
    with pytest.raises(UserError) as bad_op:
        spool.put("e1", "delete_everything", {})
    assert bad_op.value.field == "op"
    with pytest.raises(UserError) as bad_kwargs:
        spool.put("e1", "save_spans", {"spans": [object()]})
    assert bad_kwargs.value.field == "kwargs"
    with pytest.raises(UserError) as bad_id:
        spool.put("", "start_evaluation", {})
    assert bad_id.value.field == "evaluation_id"
    assert len(spool) == 0


def test_an_id_with_any_characters_survives_the_file_name(spool: Spool) -> None:
    odd = "run/1+2 é%"
    spool.put(odd, "cancel_evaluation", {})
    assert spool.pending() == [odd]


def test_flush_writes_in_order_and_empties_the_spool(store: Store, spool: Spool) -> None:
    # Given a start and a finish kept while the store was away
    evaluation_id = queued(store)
    spool.put(evaluation_id, "start_evaluation", {})
    spool.put(evaluation_id, "finish_evaluation", finish_kwargs())
    # When the spool is flushed
    written = spool.flush(store)
    # Then both landed, the finish after the start, and nothing waits
    assert written == 2 and len(spool) == 0
    stored = store.get_evaluation(evaluation_id, include_raw=True)
    assert stored["status"] == "succeeded" and len(stored["measurements"]) == 1
    assert len(stored["measurements"][0]["latencies_ns"]) == 50


def test_a_write_replayed_after_it_landed_changes_nothing(store: Store, spool: Spool) -> None:
    # Given a finish that landed, but whose file was left (a crash between the two)
    evaluation_id = queued(store)
    store.start_evaluation(evaluation_id)
    store.finish_evaluation(evaluation_id, **finish_kwargs())
    spool.put(evaluation_id, "finish_evaluation", finish_kwargs(samples=7))
    spool.put(evaluation_id, "start_evaluation", {})
    # When it is replayed
    spool.flush(store)
    # Then the evaluation holds one result, the first, and the spool is empty
    stored = store.get_evaluation(evaluation_id, include_raw=True)
    assert stored["status"] == "succeeded" and len(stored["measurements"]) == 1
    assert len(stored["measurements"][0]["latencies_ns"]) == 50
    assert len(spool) == 0


def test_a_write_for_an_unknown_evaluation_is_dropped_with_an_error_line(
    store: Store, spool: Spool, caplog: pytest.LogCaptureFixture
) -> None:
    known = queued(store)
    spool.put("0" * 32, "finish_evaluation", finish_kwargs())
    spool.put(known, "fail_evaluation", {"error": {"type": "X", "message": "m", "phase": "load"}})
    with caplog.at_level(logging.ERROR, logger="mlscope.worker.spool"):
        written = spool.flush(store)
    assert written == 1 and len(spool) == 0
    assert store.get_evaluation(known)["status"] == "failed"
    assert any(
        "0" * 32 in record.getMessage() and "no such evaluation" in record.getMessage()
        for record in caplog.records
    )


def test_flush_stops_at_the_first_unavailable_and_keeps_the_rest(store: Store, spool: Spool) -> None:
    # Given two evaluations' writes, and a store that goes away
    first, second = queued(store), queued(store)
    spool.put(first, "start_evaluation", {})
    spool.put(second, "start_evaluation", {})
    outage = Outage(store)
    outage.down = True
    # When the spool is flushed
    written = spool.flush(outage)  # type: ignore[arg-type]
    # Then nothing was written, one call was tried, and both writes wait
    assert written == 0 and outage.calls == ["start_evaluation"] and len(spool) == 2
    # ... and once it is back, both land
    outage.down = False
    assert spool.flush(outage) == 2  # type: ignore[arg-type]
    assert {store.get_evaluation(i)["status"] for i in (first, second)} == {"running"}


def test_writes_queue_behind_a_kept_one_and_others_go_straight_through(store: Store, spool: Spool) -> None:
    # Given an evaluation whose start was kept during an outage
    waiting, other = queued(store), queued(store)
    outage = Outage(store)
    durable = DurableWrites(outage, spool, log=lambda line: None)  # type: ignore[arg-type]
    outage.down = True
    assert durable.write(waiting, "start_evaluation") is False
    # When the store is back and both evaluations write
    outage.down = False
    kept = durable.write(waiting, "finish_evaluation", **finish_kwargs())
    direct = durable.write(other, "start_evaluation")
    # Then the waiting evaluation's finish queued behind its start (never before it), the other's went
    # straight to the store
    assert kept is False and direct is True
    assert [w.op for w in spool.writes()] == ["start_evaluation", "finish_evaluation"]
    assert store.get_evaluation(waiting)["status"] == "queued"
    assert store.get_evaluation(other)["status"] == "running"
    # ... and a flush lands them in order
    assert durable.flush_now() == 2
    assert store.get_evaluation(waiting)["status"] == "succeeded"


def test_errors_of_the_write_itself_reach_the_caller(store: Store, spool: Spool) -> None:
    durable = DurableWrites(store, spool)
    with pytest.raises(UserError):
        durable.write("f" * 32, "start_evaluation")
    assert len(spool) == 0


def test_the_flusher_writes_kept_results_when_the_store_returns_and_says_so(
    store: Store, spool: Spool
) -> None:
    # Given a flusher retrying quickly, and a store that is away when a result is written
    evaluation_id = queued(store)
    store.start_evaluation(evaluation_id)
    outage = Outage(store)
    lines: list[str] = []
    stored = threading.Event()

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("store back"):
            stored.set()

    durable = DurableWrites(outage, spool, retry_s=0.05, log=log)  # type: ignore[arg-type]
    outage.down = True
    with durable:
        assert durable.write(evaluation_id, "finish_evaluation", **finish_kwargs()) is False
        # When the store comes back
        outage.down = False
        assert stored.wait(30), lines
    # Then the result landed once, and the log said when it was kept and when it was written
    assert store.get_evaluation(evaluation_id)["status"] == "succeeded" and len(spool) == 0
    assert lines[0].startswith(f"store unreachable: 1 results kept in {spool.directory}, retrying")
    assert lines[-1].startswith("store back: 1 spooled writes stored after ")


def test_a_new_worker_writes_what_an_old_one_left(store: Store, tmp_path: Path) -> None:
    # Given a worker that kept a result and died (its spool directory, and a temporary file it never
    # finished writing)
    evaluation_id = queued(store)
    directory = tmp_path / "spool" / "agent-a"
    Spool(directory).put(evaluation_id, "start_evaluation", {})
    Spool(directory).put(evaluation_id, "finish_evaluation", finish_kwargs())
    (directory / ".000000000003+save_spans+x.json.tmp").write_text("{", encoding="utf-8")
    # When a new worker starts on the same directory
    lines: list[str] = []
    done = threading.Event()

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("store back"):
            done.set()

    with DurableWrites(store, Spool(directory), log=log):
        assert done.wait(30), lines
    # Then the result is stored, and the half-written file is gone
    assert store.get_evaluation(evaluation_id)["status"] == "succeeded"
    assert sorted(path.name for path in directory.iterdir()) == []
    assert lines[0].startswith("store writes waiting from before: 2 kept in")
    assert lines[-1].startswith("store back: 2 spooled writes stored")


def test_an_outage_whose_writes_were_all_dropped_still_ends(store: Store, spool: Spool) -> None:
    # Given a write kept during an outage for an evaluation the store then turns out not to know
    outage = Outage(store)
    lines: list[str] = []
    durable = DurableWrites(outage, spool, log=lines.append)  # type: ignore[arg-type]
    outage.down = True
    assert durable.write("e" * 32, "start_evaluation") is False
    # When the store is back and the spool flushed
    outage.down = False
    assert durable.flush_now() == 0
    # Then the outage is over (the next one is announced again)
    assert lines[-1].startswith("store back: 0 spooled writes stored after")
    outage.down = True
    durable.write(queued(store), "start_evaluation")
    assert lines[-1].startswith("store unreachable: 1 results kept")


def test_the_spool_directory_is_the_agents_own_under_the_cache(tmp_path: Path) -> None:
    assert spool_directory(tmp_path, "box-a") == tmp_path / "spool" / "box-a"
    assert spool_directory(tmp_path, "../x").parent == tmp_path / "spool"
