"""The Store contract, leases: every start counts an attempt, a runner's lease is renewed by that runner
only, expired leases are listed oldest first through an index, an evaluation goes back to its queue
only from running (and only for its lease's owner when one is named), and an ended evaluation holds no
lease. Every implementation in conftest.py must pass every test; each reads Given / When / Then."""

from __future__ import annotations

import math
import multiprocessing
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.store import EvaluationNotFound, InvalidTransition, Store, open_store
from mlscope.store.leases import LEASE_KEYS
from tests.contract.builders import ERROR, finish, run_to, submit

QUEUE = "pytorch@cpu.x86_64"
# A `now` this far ahead sees every lease of a test expired, without any test waiting for one.
LATER = timedelta(hours=1)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _lease(store: Store, id: str) -> tuple[str | None, datetime | None]:
    """The lease as stored: the result shape does not carry it, so the backend's read tells."""
    record = store._read_evaluation(id, include_raw=False)
    assert record is not None
    return record.lease_owner, record.lease_expires_at


def test_each_start_counts_an_attempt_and_the_result_shows_it_with_the_queue(store: Store) -> None:
    # Given an evaluation submitted to a queue, and one run in place
    queued = submit(store, queue=QUEUE)
    in_place = submit(store)
    evaluation = store.get_evaluation(queued)
    assert (evaluation["queue"], evaluation["attempts"]) == (QUEUE, 0)
    assert (store.get_evaluation(in_place)["queue"], store.get_evaluation(in_place)["attempts"]) == (None, 0)

    # When it is started, then started again by a redelivery of its job
    first = store.start_evaluation(queued)
    second = store.start_evaluation(queued, lease_owner="worker-b", lease_s=30)

    # Then each start returned the attempts so far, and the result shows them, running, queue kept
    assert (first, second) == (1, 2)
    evaluation = store.get_evaluation(queued)
    assert (evaluation["status"], evaluation["attempts"], evaluation["queue"]) == ("running", 2, QUEUE)
    assert "lease" not in evaluation and "lease_owner" not in evaluation
    # and the attempts stay with the result when it ends
    finish(store, queued)
    assert store.get_evaluation(queued)["attempts"] == 2
    listed = {e["id"]: (e["queue"], e["attempts"]) for e in store.list_evaluations(limit=10)}
    assert listed == {queued: (QUEUE, 2), in_place: (None, 0)}


def test_a_start_without_a_lease_drops_the_lease_an_earlier_start_took(store: Store) -> None:
    # Given an evaluation started with a lease
    id = submit(store, queue=QUEUE)
    before = _now()
    store.start_evaluation(id, lease_owner="worker-a", lease_s=30)
    owner, expires_at = _lease(store, id)
    assert owner == "worker-a"
    assert expires_at is not None and before + timedelta(seconds=30) <= expires_at
    assert expires_at <= _now() + timedelta(seconds=30)
    # When it starts again without one (an older runner)
    assert store.start_evaluation(id) == 2
    # Then it holds no lease, so it is never taken for a dead runner's
    assert _lease(store, id) == (None, None)
    assert store.expired_leases(now=_now() + LATER) == []


def test_the_lease_arguments_are_checked_and_a_refused_start_changes_nothing(store: Store) -> None:
    id = submit(store, queue=QUEUE)
    for kwargs, field in [
        ({"lease_owner": "worker-a"}, "lease_s"),
        ({"lease_s": 30}, "lease_owner"),
        ({"lease_owner": "worker-a", "lease_s": 0}, "lease_s"),
        ({"lease_owner": "worker-a", "lease_s": -5.0}, "lease_s"),
        ({"lease_owner": "worker-a", "lease_s": math.nan}, "lease_s"),
        ({"lease_owner": "worker-a", "lease_s": True}, "lease_s"),
        ({"lease_owner": "worker-a", "lease_s": "30"}, "lease_s"),
        ({"lease_owner": "", "lease_s": 30}, "lease_owner"),
    ]:
        with pytest.raises(UserError) as refused:
            store.start_evaluation(id, **kwargs)
        assert refused.value.field == field, kwargs
        assert field in str(refused.value)
    evaluation = store.get_evaluation(id)
    assert (evaluation["status"], evaluation["attempts"]) == ("queued", 0)
    with pytest.raises(UserError) as refused:
        submit(store, queue="")
    assert refused.value.field == "queue"
    for call, field in [
        (lambda: store.renew_lease(id, owner="worker-a", lease_s=0), "lease_s"),
        (lambda: store.renew_lease(id, owner="", lease_s=10), "owner"),
        (lambda: store.expired_leases(now=datetime(2030, 1, 1)), "now"),
        (lambda: store.expired_leases(limit=0), "limit"),
        (lambda: store.requeue_evaluation(id, owner=""), "owner"),
        (
            lambda: store.requeue_evaluation(id, owner=None, expired_before=datetime(2030, 1, 1)),
            "expired_before",
        ),
    ]:
        with pytest.raises(UserError) as refused:
            call()
        assert refused.value.field == field


def test_only_the_owner_renews_a_running_evaluations_lease(store: Store) -> None:
    # Given a running evaluation whose lease worker-a holds for 10 s
    id = submit(store, queue=QUEUE)
    store.start_evaluation(id, lease_owner="worker-a", lease_s=10)
    _, first_expiry = _lease(store, id)
    assert first_expiry is not None

    # When another runner renews it, nothing changes
    assert store.renew_lease(id, owner="worker-b", lease_s=600) is False
    assert _lease(store, id) == ("worker-a", first_expiry)
    # When its owner renews it for longer, it lasts from now
    before = _now()
    assert store.renew_lease(id, owner="worker-a", lease_s=600) is True
    owner, expires_at = _lease(store, id)
    assert owner == "worker-a" and expires_at is not None
    assert before + timedelta(seconds=600) <= expires_at <= _now() + timedelta(seconds=600)
    assert store.expired_leases(now=first_expiry + timedelta(seconds=1)) == []

    # Then a queued, an ended or an unknown evaluation cannot be renewed
    queued = submit(store, queue=QUEUE)
    assert store.renew_lease(queued, owner="worker-a", lease_s=10) is False
    finish(store, id)
    assert store.renew_lease(id, owner="worker-a", lease_s=10) is False
    with pytest.raises(EvaluationNotFound):
        store.renew_lease("f" * 32, owner="worker-a", lease_s=10)


def test_expired_leases_lists_running_evaluations_past_their_lease_oldest_first(store: Store) -> None:
    # Given running evaluations with leases of 10 s, 20 s and an hour and a half, one running with no
    # lease, one queued, one ended after a lease, and one run in place (no queue) with a lease
    ids = {}
    for name, lease_s in (("late", 20.0), ("early", 10.0), ("long", 5400.0)):
        ids[name] = submit(store, queue=QUEUE)
        store.start_evaluation(ids[name], lease_owner=f"worker-{name}", lease_s=lease_s)
    ids["no-lease"] = run_to(store, "running", queue=QUEUE)
    ids["queued"] = submit(store, queue=QUEUE)
    ids["ended"] = submit(store, queue=QUEUE)
    store.start_evaluation(ids["ended"], lease_owner="worker-ended", lease_s=1)
    store.fail_evaluation(ids["ended"], error=ERROR)
    ids["in-place"] = submit(store)
    store.start_evaluation(ids["in-place"], lease_owner="cli-4242", lease_s=15)
    store.start_evaluation(ids["in-place"], lease_owner="cli-4242", lease_s=15)

    # When a sweeper looks now, nothing has expired
    assert store.expired_leases() == []
    # When it looks an hour on
    found = store.expired_leases(now=_now() + LATER)

    # Then the three short leases are listed, the oldest expiry first, each with what a sweeper needs
    assert [f["id"] for f in found] == [ids["early"], ids["in-place"], ids["late"]]
    for expired in found:
        assert set(expired) == set(LEASE_KEYS)
        assert expired["lease_expires_at"].tzinfo is not None
        assert expired["created_at"].tzinfo is not None
        assert expired["request"] == {"model": "resnet18", "framework": "pytorch", "batch_sizes": [1, 8]}
        assert expired["trace_id"] is None
    early, in_place, late = found
    assert (early["lease_owner"], early["attempts"], early["queue"]) == ("worker-early", 1, QUEUE)
    assert (in_place["lease_owner"], in_place["attempts"], in_place["queue"]) == ("cli-4242", 2, None)
    assert early["lease_expires_at"] < in_place["lease_expires_at"] < late["lease_expires_at"]
    assert early["created_at"].isoformat() == store.get_evaluation(ids["early"])["created_at"]
    # and a limit keeps the oldest; two hours on, the long lease has expired too
    assert [f["id"] for f in store.expired_leases(now=_now() + LATER, limit=1)] == [ids["early"]]
    assert len(store.expired_leases(now=_now() + 2 * LATER)) == 4


def test_an_evaluation_is_requeued_only_from_running_and_only_for_its_owner(store: Store) -> None:
    # Given an evaluation running under worker-a's lease
    id = submit(store, queue=QUEUE)
    store.start_evaluation(id, lease_owner="worker-a", lease_s=30)

    # When another runner requeues it, nothing changes
    assert store.requeue_evaluation(id, owner="worker-b") is False
    assert store.get_evaluation(id)["status"] == "running"
    # When its owner requeues it (it could not start it after all)
    assert store.requeue_evaluation(id, owner="worker-a") is True

    # Then it is queued again as before it started, its attempt kept, no lease, nothing expired
    evaluation = store.get_evaluation(id)
    assert (evaluation["status"], evaluation["started_at"], evaluation["attempts"]) == ("queued", None, 1)
    assert _lease(store, id) == (None, None)
    assert store.expired_leases(now=_now() + LATER) == []
    # and a queued one is not requeued again; its next start counts the next attempt
    assert store.requeue_evaluation(id, owner=None) is False
    assert store.start_evaluation(id, lease_owner="worker-c", lease_s=30) == 2

    # When a sweeper (no owner) requeues it only if its lease expired before a time, that holds
    assert store.requeue_evaluation(id, owner=None, expired_before=_now()) is False
    assert store.requeue_evaluation(id, owner=None, expired_before=_now() + LATER) is True
    # and with no condition a sweeper requeues a running evaluation whoever holds it, lease or none
    no_lease = run_to(store, "running", queue=QUEUE)
    assert store.requeue_evaluation(no_lease, owner=None) is True
    # Then ended and unknown evaluations are never requeued
    for status in ("succeeded", "failed", "cancelled"):
        ended = run_to(store, status, queue=QUEUE)
        assert store.requeue_evaluation(ended, owner=None) is False
        assert store.get_evaluation(ended)["status"] == status
    with pytest.raises(EvaluationNotFound):
        store.requeue_evaluation("f" * 32, owner=None)


@pytest.mark.parametrize("end", ["finish", "fail", "cancel"])
def test_an_ended_evaluation_holds_no_lease(store: Store, end: str) -> None:
    # Given an evaluation running under a lease that already expired
    id = submit(store, queue=QUEUE)
    store.start_evaluation(id, lease_owner="worker-a", lease_s=0.001)
    assert [f["id"] for f in store.expired_leases(now=_now() + LATER)] == [id]

    # When it ends
    if end == "finish":
        finish(store, id)
    elif end == "fail":
        store.fail_evaluation(id, error=ERROR)
    else:
        assert store.cancel_evaluation(id) is True

    # Then its lease is gone, it is not listed, cannot be renewed, requeued or started again
    assert _lease(store, id) == (None, None)
    assert store.expired_leases(now=_now() + LATER) == []
    assert store.renew_lease(id, owner="worker-a", lease_s=30) is False
    assert store.requeue_evaluation(id, owner="worker-a") is False
    with pytest.raises(InvalidTransition):
        store.start_evaluation(id, lease_owner="worker-a", lease_s=30)
    assert store.get_evaluation(id)["attempts"] == 1
    with pytest.raises(EvaluationNotFound):
        store.start_evaluation("f" * 32)


def test_concurrent_starts_count_every_attempt(store_url: str) -> None:
    # Given an evaluation, and 8 threads with a store each, all starting it 10 times at once
    with open_store(store_url) as store:
        id = submit(store, queue=QUEUE)
    barrier = threading.Barrier(8)
    returned: list[int] = []
    errors: list[BaseException] = []

    def starter(n: int) -> None:
        try:
            with open_store(store_url) as mine:
                barrier.wait()
                for _ in range(10):
                    returned.append(mine.start_evaluation(id, lease_owner=f"thread-{n}", lease_s=30))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=starter, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then every start was counted once: each got its own attempt number
    assert errors == []
    assert sorted(returned) == list(range(1, 81))
    with open_store(store_url) as store:
        assert store.get_evaluation(id)["attempts"] == 80


def _start_many(url: str, id: str, process: int, times: int, start: Any, results: Any) -> None:
    start.wait()
    with open_store(url) as store:
        for _ in range(times):
            results.put(store.start_evaluation(id, lease_owner=f"process-{process}", lease_s=30))


def test_concurrent_starts_from_processes_count_every_attempt(shared_url: str) -> None:
    # Given an evaluation in a SQL store, and 4 processes starting it 25 times each, all at once
    with open_store(shared_url) as store:
        id = submit(store, queue=QUEUE)
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(target=_start_many, args=(shared_url, id, n, 25, start, results)) for n in range(4)
    ]
    for process in processes:
        process.start()
    start.set()
    returned = [results.get(timeout=300) for _ in range(100)]
    for process in processes:
        process.join(timeout=60)
    # Then no attempt was lost or counted twice
    assert [p.exitcode for p in processes] == [0] * 4
    assert sorted(returned) == list(range(1, 101))
    with open_store(shared_url) as store:
        assert store.get_evaluation(id)["attempts"] == 100


def test_the_expired_lease_query_is_served_by_an_index(store: Store) -> None:
    # The sweeper asks every few seconds, and the evaluations that ended long ago outnumber the running
    # ones by far: the query must read the (status, lease_expires_at) range, not the table.
    if hasattr(store, "_evaluations"):
        indexes = store._evaluations.index_information()  # type: ignore[attr-defined]
        assert [("status", 1), ("lease_expires_at", 1)] in [index["key"] for index in indexes.values()]
        return
    from sqlalchemy import text

    from mlscope.store.sql.queries import expired_leases_query

    engine = store._engine  # type: ignore[attr-defined]
    query = expired_leases_query(_now(), limit=100).compile(engine, compile_kwargs={"literal_binds": True})
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            plan = " ".join(str(row[-1]) for row in connection.execute(text(f"EXPLAIN QUERY PLAN {query}")))
        else:
            # An empty table is cheapest to scan: with scans made dear, the planner shows its index.
            connection.execute(text("SET LOCAL enable_seqscan = off"))
            plan = " ".join(str(row[0]) for row in connection.execute(text(f"EXPLAIN {query}")))
    assert "ix_evaluations_status_lease_expires" in plan, plan
