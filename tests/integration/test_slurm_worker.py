"""ops/slurm/mlscope-worker.sbatch with real `mlscope worker`s, the real Redis (the hand-back on
RabbitMQ too) and PostgreSQL, and an allocation faked by its environment (there is no Slurm here):
the signals Slurm sends at the end of an allocation are sent to the script by hand, and `scontrol`
is a stand-in that records its arguments.

The time limit's notice (SIGUSR1) lets the running job finish, or hands it back once
MLSCOPE_SLURM_FINISH_S has passed, then requeues the Slurm job; SIGTERM (scancel, preemption) hands
the running job back at once, and another worker finishes it, once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlscope.registry.agents import AgentInfo
from tests.contract.conftest import emptied_postgres, postgres_url  # noqa: F401 - a fixture, used by name
from tests.integration.farm import REDIS_URL, Farm, empty_redis_db, wait_until
from tests.integration.test_farm import QUICK

SCRIPT = Path(__file__).resolve().parents[2] / "ops" / "slurm" / "mlscope-worker.sbatch"
MODEL = "test_tiny_mlp"
JOB_ID = "4242"

pytestmark = pytest.mark.redis


@pytest.fixture
def redis_farm(request: pytest.FixtureRequest, tmp_path: Path, shared_cache: Path) -> Iterator[Farm]:
    """An api's farm on Redis database FARM_REDIS_DB (emptied) and the session's PostgreSQL (`farm`,
    the suite's, is on either broker)."""
    import redis

    try:
        empty_redis_db()
    except redis.RedisError as exc:
        pytest.fail(f"Redis at {REDIS_URL} is unreachable: {exc}", pytrace=False)
    with emptied_postgres(request.getfixturevalue("postgres_url")) as store_url:
        made = Farm(broker_url=REDIS_URL, store_url=store_url, tmp=tmp_path, cache_dir=shared_cache)
        try:
            yield made
        finally:
            made.stop()


class Allocation:
    """The script, started as sbatch would in a CPU allocation on partition `partition`."""

    def __init__(self, farm: Farm, partition: str, **settings: str) -> None:
        bin_dir = farm.tmp / "bin"
        bin_dir.mkdir(exist_ok=True)
        self.scontrol_log = farm.tmp / "scontrol.log"
        scontrol = bin_dir / "scontrol"
        scontrol.write_text(f'#!/bin/sh\necho "$*" >> {self.scontrol_log}\n')
        scontrol.chmod(0o755)
        env = {k: v for k, v in farm.env.items() if not k.startswith(("SLURM_", "CUDA_VISIBLE"))}
        env.update(
            PATH=f"{bin_dir}{os.pathsep}{env['PATH']}",
            SLURM_JOB_ID=JOB_ID,
            SLURM_JOB_PARTITION=partition,
            MLSCOPE_SLURM_WORKER=f"{sys.executable} -m mlscope",
            MLSCOPE_SLURM_WORKER_ARGS="--heartbeat-ttl 3 -f pytorch",
        )
        env.update(settings)
        self.log_path = farm.tmp / "sbatch.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                ["bash", str(SCRIPT)], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=farm.tmp
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def requeued(self) -> list[str]:
        return self.scontrol_log.read_text().splitlines() if self.scontrol_log.exists() else []

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def allocations() -> Iterator[list[Allocation]]:
    made: list[Allocation] = []
    yield made
    for allocation in made:
        allocation.stop()


def _worker_of(farm: Farm, allocation: Allocation, capability: str) -> AgentInfo:
    def live() -> AgentInfo | None:
        assert allocation.process.poll() is None, f"the script exited:\n{allocation.log()}"
        return next((a for a in farm.registry.live() if capability in a.capabilities), None)

    info: AgentInfo = wait_until(live, 90, "the allocation's worker to be live")
    return info


def _submit_running(farm: Farm, capability: str, agent_id: str, seconds: float) -> str:
    measure: dict[str, Any] = {**QUICK, "min_seconds": seconds, "max_seconds": seconds + 30}
    request = {"model": MODEL, "framework": "pytorch", "target": capability, "measure": measure}
    answer = farm.client.submit(request)
    evaluation_id: str = answer["id"]

    def running() -> bool:
        info = farm.registry.get(agent_id)
        return bool(info and info.current_job == evaluation_id and farm.status(evaluation_id) == "running")

    wait_until(running, 90, "the job to run on the allocation's worker")
    return evaluation_id


def test_the_time_limits_notice_lets_the_job_finish_then_requeues_the_slurm_job(
    redis_farm: Farm, allocations: list[Allocation]
) -> None:
    redis_farm.start_api()
    partition = f"notice{redis_farm.tag}"
    capability = f"slurm.{partition}"
    allocation = Allocation(redis_farm, partition, MLSCOPE_SLURM_FINISH_S="60")
    allocations.append(allocation)
    agent = _worker_of(redis_farm, allocation, capability)
    evaluation_id = _submit_running(redis_farm, capability, agent.id, seconds=3)

    allocation.process.send_signal(signal.SIGUSR1)  # Slurm: --signal=B:USR1@180

    assert allocation.process.wait(timeout=60) == 0, allocation.log()
    result = redis_farm.client.evaluation(evaluation_id)
    assert result["status"] == "succeeded", result["error"]
    assert result["system"]["agent"]["id"] == agent.id  # it finished where it ran
    assert allocation.requeued() == [f"requeue {JOB_ID}"]
    assert redis_farm.registry.get(agent.id) is None  # the worker said goodbye to the registry


def test_a_job_that_outlasts_the_notice_is_handed_back_and_the_slurm_job_still_requeued(
    redis_farm: Farm, allocations: list[Allocation]
) -> None:
    redis_farm.start_api()
    partition = f"outlast{redis_farm.tag}"
    capability = f"slurm.{partition}"
    allocation = Allocation(redis_farm, partition, MLSCOPE_SLURM_FINISH_S="2")
    allocations.append(allocation)
    agent = _worker_of(redis_farm, allocation, capability)
    evaluation_id = _submit_running(redis_farm, capability, agent.id, seconds=60)

    sent = time.monotonic()
    allocation.process.send_signal(signal.SIGUSR1)

    assert allocation.process.wait(timeout=30) == 0, allocation.log()
    assert time.monotonic() - sent < 15, allocation.log()  # 2 s to finish, then handed back
    assert "handing the running jobs back" in allocation.log()
    assert allocation.requeued() == [f"requeue {JOB_ID}"]
    assert redis_farm.status(evaluation_id) in ("running", "queued")  # not failed: back on its queue
    # (test_sigterm_... below follows a handed-back job to its end on another worker.)


def test_sigterm_hands_the_running_job_back_and_another_worker_finishes_it_once(
    farm: Farm, allocations: list[Allocation]
) -> None:
    farm.start_api()
    partition = f"term{farm.tag}"
    capability = f"slurm.{partition}"
    allocation = Allocation(farm, partition)
    allocations.append(allocation)
    agent = _worker_of(farm, allocation, capability)
    evaluation_id = _submit_running(farm, capability, agent.id, seconds=6)

    sent = time.monotonic()
    allocation.process.send_signal(signal.SIGTERM)  # Slurm: scancel, or preemption

    assert allocation.process.wait(timeout=30) == 0, allocation.log()
    assert time.monotonic() - sent < 15, allocation.log()  # well inside Slurm's KillWait (30 s)
    assert allocation.requeued() == []  # a cancelled job is not requeued by the script
    assert farm.status(evaluation_id) in ("running", "queued")  # not failed, not lost
    assert "handed back to its queue" in allocation.log()
    farm.start_worker("rescuer", capability)
    [result] = farm.client.wait([evaluation_id], timeout_s=180)
    assert result["status"] == "succeeded", result["error"]
    assert result["system"]["agent"]["id"] == "rescuer"
    assert sorted(m["batch_size"] for m in result["measurements"]) == [1]  # one set, not two


def test_a_worker_that_cannot_start_ends_the_script_with_its_status_and_no_requeue(
    redis_farm: Farm, allocations: list[Allocation]
) -> None:
    allocation = Allocation(redis_farm, "broken", MLSCOPE_SLURM_WORKER_ARGS="-f no-such-framework")
    allocations.append(allocation)

    assert allocation.process.wait(timeout=90) == 2, allocation.log()
    assert "no-such-framework not installed" in allocation.log()
    assert allocation.requeued() == []
