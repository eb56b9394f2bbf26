"""A runner's lease is renewed while its evaluation runs, and the renewals stop when it is taken over
(a real SQLite store; workers.leases.kept and workers.periodic.every)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from mlscope.store import open_store
from mlscope.workers.leases import Lease, kept
from mlscope.workers.periodic import every
from tests.contract.builders import submit


def test_every_calls_its_step_until_the_step_says_stop_or_the_block_ends() -> None:
    # Given a step that asks to stop on its third call, and one that never does
    calls: list[str] = []

    def stops_at_three() -> bool:
        calls.append("a")
        return calls.count("a") < 3

    # When both run every 20 ms for 0.3 s
    with every(0.02, stops_at_three, name="a"), every(0.02, lambda: calls.append("b"), name="b"):
        time.sleep(0.3)
    after = len(calls)
    time.sleep(0.1)

    # Then the first stopped after three calls, the second went on until the block ended, and neither
    # is called once the block is over
    assert calls.count("a") == 3
    assert calls.count("b") >= 5
    assert len(calls) == after


def test_a_lease_is_renewed_while_its_evaluation_runs_and_not_once_another_runner_holds_it(
    tmp_path: Path,
) -> None:
    # Given a running evaluation whose 0.3 s lease worker-a holds
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        evaluation_id = submit(store, queue="pytorch@cpu")
        store.start_evaluation(evaluation_id, lease_owner="worker-a", lease_s=0.3)
        lease = Lease("worker-a", seconds=0.3)

        # When worker-a keeps it through 1 s of work
        with kept(store, evaluation_id, lease):
            time.sleep(1.0)
            # Then it never expired meanwhile
            assert store.expired_leases(now=datetime.now(timezone.utc)) == []

        # And once worker-b has taken the evaluation over, worker-a's renewals stop at once
        store.start_evaluation(evaluation_id, lease_owner="worker-b", lease_s=0.3)
        with kept(store, evaluation_id, lease):
            time.sleep(0.5)
        [expired] = store.expired_leases(now=datetime.now(timezone.utc) + timedelta(seconds=0.1))
        assert expired["lease_owner"] == "worker-b"
    finally:
        store.close()
