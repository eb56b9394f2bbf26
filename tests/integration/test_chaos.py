"""Chaos: a farm keeps every job through the deaths of its workers, its broker and its store.

Real `mlscope api` and `mlscope worker` processes, a Redis server and a PostgreSQL server of the
test's own (tests.fixtures: they are killed and restarted, which the machine's shared servers must
never be). In one run:

1. N jobs are submitted to three workers of this host (they take turns measuring);
2. the worker measuring is SIGKILLed mid-job, and so is one that waits for its turn;
3. two workers are started without an agent id (each picks a free one);
4. Redis is SIGKILLed and restarted (its append-only file keeps every acknowledged write);
5. PostgreSQL is taken away (immediate shutdown) for OUTAGE_S, longer than the worker's old retry
   budget (five tries ten seconds apart), while a job runs, then brought back.

Every job must end `succeeded`, exactly once (one set of measurements, one evaluation per job),
within BOUND_S of the store's return; the killed worker's job ran twice (attempts 2) and its result is
the second run's.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from mlscope.client import ApiError
from tests.fixtures.private_postgres import PrivatePostgres, private_postgres  # noqa: F401 - fixture
from tests.fixtures.private_redis import PrivateRedis
from tests.integration.farm import Farm, wait_until

pytestmark = pytest.mark.slow

MODEL = "test_tiny_mlp"
JOBS = 8
# Each job measures for about a second after its predictor process starts.
MEASURE = {"warmup_count": 2, "warmup_seconds": 0.0, "min_count": 10, "min_seconds": 1.0, "max_seconds": 5}
# The workers' heartbeat lifetime: a dead worker's lease (two lifetimes) lapses 12 s after its death.
HEARTBEAT_TTL_S = 6.0
OUTAGE_S = 55.0
# Every job has ended this long after the store came back (the last fault).
BOUND_S = 120.0


@pytest.fixture
def chaos_farm(tmp_path: Path, private_postgres: PrivatePostgres) -> Iterator[tuple[Farm, PrivateRedis]]:  # noqa: F811
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (ops/ci/services.sh installs it)")
    broker = PrivateRedis(tmp_path / "redis")
    broker.start()
    farm = Farm(
        broker_url=broker.url,
        store_url=private_postgres.create_database("chaos"),
        tmp=tmp_path,
        cache_dir=tmp_path / "cache",
        registry_url=broker.url,
        visibility_timeout_s=None,  # the default two hours: recovery must not come from it
    )
    try:
        yield farm, broker
    finally:
        farm.stop()
        broker.stop()


def _request(target: str) -> dict[str, Any]:
    return {"model": MODEL, "framework": "pytorch", "target": target, "measure": MEASURE}


def _measuring(farm: Farm, ids: list[str]) -> tuple[str, str] | None:
    """(worker, job) of the job being measured now, if any: a worker names the job as its current one
    before the store records the start (the attempt), so the store must say `running` too (a worker
    killed in between had not started it: its job's attempts would not count that try)."""
    for agent in farm.registry.live():
        if agent.current_job in ids and farm.status(agent.current_job) == "running":
            return agent.id, agent.current_job
    return None


def test_every_job_ends_succeeded_once_through_worker_broker_and_store_deaths(
    chaos_farm: tuple[Farm, PrivateRedis],
    private_postgres: PrivatePostgres,  # noqa: F811
) -> None:
    farm, broker = chaos_farm
    farm.start_api()
    capability = farm.capability("c")
    for name in ("w1", "w2", "w3"):
        farm.start_worker(name, capability, heartbeat_ttl_s=HEARTBEAT_TTL_S)
    ids = [farm.client.submit(_request(capability))["id"] for _ in range(JOBS)]

    # 2. The measuring worker dies mid-job; so does one waiting for its turn.
    killed, killed_job = wait_until(lambda: _measuring(farm, ids), 120, "a job to be measured")
    waiting = next(name for name in ("w1", "w2", "w3") if name != killed)
    for name in (killed, waiting):
        farm.signal(name, signal.SIGKILL)
        farm.wait_exit(name)
    # 3. Two more workers, started the obvious way.
    for name in ("r1", "r2"):
        farm.start_worker(name, capability, name_itself=True, heartbeat_ttl_s=HEARTBEAT_TTL_S)

    # 4. The broker dies and comes back.
    broker.restart()

    # 5. The store goes away while a job is measured, longer than the old retry budget.
    wait_until(lambda: _measuring(farm, ids), 120, "a job to be measured after the broker's restart")
    private_postgres.stop()
    try:
        with pytest.raises(ApiError) as down:
            farm.client.evaluation(ids[0])
        assert down.value.status == 503
        time.sleep(OUTAGE_S)
    finally:
        private_postgres.start()
    back = time.monotonic()

    results = farm.client.wait(ids, timeout_s=BOUND_S)
    took = time.monotonic() - back
    assert [r["status"] for r in results] == ["succeeded"] * JOBS, [
        (r["id"], r["status"], r.get("error")) for r in results
    ]
    assert took <= BOUND_S
    for result in results:
        assert [m["batch_size"] for m in result["measurements"]] == [1], result["id"]
    by_id = {r["id"]: r for r in results}
    assert by_id[killed_job]["attempts"] >= 2
    assert by_id[killed_job]["system"]["agent"]["id"] != killed
    with psycopg.connect(private_postgres.database_url("chaos"), connect_timeout=5) as connection:
        (stored,) = connection.execute("SELECT count(*) FROM evaluations").fetchone() or (0,)
    assert stored == JOBS
    logs = "".join(farm.log(name) for name in ("api", "w1", "w2", "w3", "r1", "r2"))
    assert "back on" in logs or "back on its queue" in logs  # the sweeper gave the killed job back
