"""Nothing lost, nothing stuck: the farm's workers and `mlscope run` against their own deaths.

Real worker processes on the real brokers (the `farm` fixture: Redis and RabbitMQ), the real
PostgreSQL store, and `mlscope run` processes on a SQLite store, killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from mlscope.broker.app import make_celery
from mlscope.contract.settings import Settings
from mlscope.store import open_store
from mlscope.workers.leases import LEASE_S
from mlscope.workers.sweeper import Sweeper
from tests.fixtures.private_redis import PrivateRedis
from tests.integration.farm import REPO, RUNTIME_MANIFESTS, Farm, wait_until

pytestmark = pytest.mark.slow

MODEL = "test_tiny_mlp"
QUICK = {"warmup_count": 2, "warmup_seconds": 0.0, "min_count": 10, "min_seconds": 0.2, "max_seconds": 5}
SLOW = {**QUICK, "min_seconds": 5.0, "max_seconds": 20}


def _request(target: str, measure: dict[str, Any]) -> dict[str, Any]:
    return {"model": MODEL, "framework": "pytorch", "target": target, "measure": measure}


def test_two_workers_started_without_an_agent_id_get_one_each(farm: Farm) -> None:
    capability = farm.capability("u")
    first = farm.start_worker("first", capability, name_itself=True)
    second = farm.start_worker("second", capability, name_itself=True)

    host = socket.gethostname()
    assert first.id != second.id
    assert {first.id, second.id} <= {a.id for a in farm.registry.live()}
    assert second.id == f"{first.id}-2", (first.id, second.id, host)
    assert f"agent@{second.id}" in second.queues
    assert "is taken by a live agent" in farm.log("second")


def test_an_explicit_agent_id_already_live_is_refused(farm: Farm) -> None:
    capability = farm.capability("x")
    farm.start_worker("taken", capability)
    process = subprocess.run(
        [sys.executable, "-m", "mlscope", "worker", "--agent-id", "taken", "--capability", capability],
        env=farm.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 2, process.stderr
    assert "agent id 'taken' is already live" in process.stderr
    assert "Traceback" not in process.stderr


def test_a_worker_waiting_for_the_host_turn_holds_no_job_and_its_death_loses_none(farm: Farm) -> None:
    farm.start_api()
    capability = farm.capability("t")
    farm.start_worker("left", capability)
    farm.start_worker("right", capability)
    first = farm.client.submit(_request(capability, SLOW))["id"]

    def measuring() -> str | None:
        for name in ("left", "right"):
            info = farm.registry.get(name)
            if info is not None and info.current_job == first and farm.status(first) == "running":
                return name
        return None

    busy = wait_until(measuring, 90, "the slow job to run")
    idle = "right" if busy == "left" else "left"
    # Submitted once the slow job holds the host's turn: before that, the other agent could take it and
    # run it whole while the slow job is still loading its model.
    second = farm.client.submit(_request(capability, QUICK))["id"]
    # The other agent of this host may have taken the second job and given it back: it holds nothing
    # while the turn is taken, and the job waits on its queue.
    wait_until(lambda: "not taking jobs until it is done" in farm.log(idle), 30, "the idle agent to stop")
    idle_info = farm.registry.get(idle)
    assert idle_info is not None and idle_info.current_job is None
    assert farm.status(second) == "queued"
    farm.signal(idle, signal.SIGKILL)
    farm.wait_exit(idle)

    results = farm.client.wait([first, second], timeout_s=120)
    assert [r["status"] for r in results] == ["succeeded", "succeeded"], [r["error"] for r in results]
    assert {r["system"]["agent"]["id"] for r in results} == {busy}
    assert [r["attempts"] for r in results] == [1, 1]


def _run_process(tmp_path: Path, store_url: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "MLSCOPE_STORE_URL": store_url,
        "MLSCOPE_MANIFESTS": str(RUNTIME_MANIFESTS),
        "MLSCOPE_CACHE_DIR": str(tmp_path / "cache"),
        "MLSCOPE_SETTINGS": str(tmp_path / "no-settings.toml"),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "mlscope", "run", MODEL, "--framework", "pytorch", "--min-seconds", "30"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )


def test_a_sigkilled_mlscope_run_ends_interrupted_instead_of_running_forever(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'mlscope.db'}"
    run = _run_process(tmp_path, store_url)
    with open_store(store_url) as store:

        def running() -> str | None:
            if run.poll() is not None:
                raise AssertionError(f"mlscope run exited with {run.returncode}")
            try:
                items = store.list_evaluations(status="running")
            except Exception:
                return None  # the store is not created yet
            return items[0]["id"] if items else None

        evaluation_id = wait_until(running, 120, "mlscope run to start its evaluation")
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        assert store.get_evaluation(evaluation_id)["status"] == "running"

        # While its lease is current nothing changes; once it has lapsed, a sweep resolves it.
        assert not Sweeper(store).sweep()
        later = datetime.now(timezone.utc) + timedelta(seconds=LEASE_S + 1)
        report = Sweeper(store).sweep(now=later)
        result = store.get_evaluation(evaluation_id)

    assert report.failed == [evaluation_id]
    assert result["status"] == "failed"
    assert result["error"]["type"] == "Interrupted"
    assert result["error"]["message"].startswith("interrupted: its process died")
    assert result["attempts"] == 1


def test_a_job_started_too_many_times_fails_with_that_reason(tmp_path: Path) -> None:
    broker = PrivateRedis(tmp_path / "redis")
    broker.start()
    try:
        app = make_celery(Settings(broker_url=broker.url, store_url=f"sqlite:///{tmp_path / 'db.sqlite'}"))
        with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
            evaluation_id = store.create_evaluation(
                model={"name": MODEL, "version": "1", "manifest_sha256": "a" * 64},
                manifest={"name": MODEL},
                framework={"name": "pytorch", "version": None},
                runner="process",
                device="cpu",
                request={"model": MODEL, "framework": "pytorch"},
                queue="pytorch@cpu",
            )
            for attempt in range(1, 4):
                started = store.start_evaluation(evaluation_id, lease_owner=f"dead-{attempt}", lease_s=1)
                assert started == attempt
            later = datetime.now(timezone.utc) + timedelta(seconds=5)
            report = Sweeper(store, app=app).sweep(now=later)
            result = store.get_evaluation(evaluation_id)
    finally:
        broker.stop()
    assert report.failed == [evaluation_id]
    assert result["status"] == "failed"
    assert result["error"]["type"] == "TooManyAttempts"
    assert "started 3 times and never ended" in result["error"]["message"]


@pytest.mark.parametrize("farm", ["rabbitmq"], indirect=True)
def test_a_job_redelivered_while_its_dead_worker_still_looks_live_is_not_lost(farm: Farm) -> None:
    """RabbitMQ redelivers a dead worker's message as soon as its connection drops. An idle worker
    that takes it while the dead one's registry entry has not lapsed yet (a 20 s heartbeat here)
    declines it as a second copy of a running job; the job must still come back, through the sweep
    of its expired lease, and run once."""
    farm.start_api()
    capability = farm.capability("r")
    farm.start_worker("doomed", capability, heartbeat_ttl_s=20)
    evaluation_id = farm.client.submit(_request(capability, SLOW))["id"]
    wait_until(
        lambda: (info := farm.registry.get("doomed")) is not None and info.current_job == evaluation_id,
        90,
        "the job to run on the doomed worker",
    )
    farm.start_worker("idle", capability, heartbeat_ttl_s=20)

    farm.signal("doomed", signal.SIGKILL)
    farm.wait_exit("doomed")
    wait_until(lambda: "not starting it twice" in farm.log("idle"), 30, "the idle worker to decline it")

    # Two heartbeat lifetimes of lease (40 s) and a sweep later, the job runs on the idle worker
    [result] = farm.client.wait([evaluation_id], timeout_s=150)
    assert result["status"] == "succeeded", result["error"]
    assert result["system"]["agent"]["id"] == "idle"
    assert result["attempts"] == 2
