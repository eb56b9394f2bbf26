"""Many real `mlscope worker` processes finishing evaluations into one store at once, PostgreSQL and
SQLite (WAL), while `mlscope api` creates evaluations for clients submitting side by side and serves
reads all along: every evaluation stored once, each with exactly its measurements, the comparison
(compare_keys, kept by every finish) counting every run once, and no read refused meanwhile.

The workers run side by side (--shared-host) and measure in their own process (runner inline), so
their store writes overlap as on a farm of many machines sharing one store.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from mlscope.store import open_store
from tests.fixtures.services import unavailable
from tests.integration.farm import REDIS_URL, Farm, empty_redis_db

MODEL = "test_tiny_mlp"
WORKERS = 3
JOBS = 12
BATCH_SIZES = [1, 2]
QUICK = {"warmup_count": 2, "warmup_seconds": 0.0, "min_count": 10, "min_seconds": 0.2, "max_seconds": 5}


@pytest.fixture(params=["postgresql", "sqlite"])
def shared_store_farm(request: pytest.FixtureRequest, tmp_path: Path, shared_cache: Path) -> Iterator[Farm]:
    """A farm on Redis whose api and workers share one store: the session's PostgreSQL database, or
    a SQLite file of the test's own."""
    import redis

    if request.param == "postgresql":
        store_url = request.getfixturevalue("postgres_url")
    else:
        store_url = f"sqlite:///{tmp_path / 'store.db'}"
        open_store(store_url).close()  # the schema, before four processes open it
    try:
        empty_redis_db()
    except redis.RedisError as exc:
        unavailable(f"Redis at 127.0.0.1:6379 is unreachable: {exc}")
    farm = Farm(broker_url=REDIS_URL, store_url=store_url, tmp=tmp_path, cache_dir=shared_cache)
    try:
        yield farm
    finally:
        farm.stop()


class Reader(threading.Thread):
    """Reads the list, the comparison and a history series over HTTP until stopped, keeping every
    failure (a refused or failed read is what this test must not see)."""

    def __init__(self, farm: Farm, since: datetime) -> None:
        super().__init__(daemon=True)
        self.farm, self.since = farm, since
        self.stopping = threading.Event()
        self.reads = 0
        self.failures: list[str] = []

    def run(self) -> None:
        client = self.farm.client
        while not self.stopping.is_set():
            for read in (
                lambda: client.evaluations(since=self.since, limit=50),
                lambda: client.compare(models=[MODEL]),
                lambda: client.evaluations(model=MODEL, status="succeeded", limit=5),
            ):
                try:
                    read()
                    self.reads += 1
                except Exception as exc:  # every kind of failure is what the test reports
                    self.failures.append(f"{type(exc).__name__}: {exc}")


def test_workers_writing_at_once_store_every_evaluation_once(shared_store_farm: Farm) -> None:
    # Given an api and three workers side by side on one capability, sharing one store
    farm = shared_store_farm
    since = datetime.now(timezone.utc)
    farm.start_api()
    capability = farm.capability("busy")
    agents = [f"busy{index}-{farm.tag}" for index in range(WORKERS)]
    for agent in agents:
        farm.start_worker(agent, capability, extra=("--shared-host",))
    reader = Reader(farm, since)
    reader.start()

    # When twelve evaluations are submitted by four clients at once, and all of them run
    request = {
        "model": MODEL,
        "framework": "pytorch",
        "target": capability,
        "runner": "inline",
        "batch_sizes": BATCH_SIZES,
        "measure": QUICK,
    }
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda _: farm.client.submit(request), range(JOBS)))
    ids = [answer["id"] for answer in answers]
    try:
        results = farm.client.wait(ids, timeout_s=300)
    finally:
        reader.stopping.set()
        reader.join(timeout=60)

    # Then each one succeeded, once, with exactly one measurement per batch size
    assert len(set(ids)) == JOBS
    assert [r["status"] for r in results] == ["succeeded"] * JOBS, [r["error"] for r in results]
    for result in results:
        assert sorted(m["batch_size"] for m in result["measurements"]) == BATCH_SIZES, result["id"]
    ran_on = Counter(r["system"]["agent"]["id"] for r in results)
    assert set(ran_on) <= set(agents) and len(ran_on) >= 2, ran_on  # the writes did overlap

    # and the store holds those twelve and nothing more: listed once each, page after page
    listed: list[str] = []
    page: dict[str, Any] = farm.client.evaluations(since=since, limit=5)
    while True:
        listed += [item["id"] for item in page["items"]]
        if page["next_cursor"] is None:
            break
        page = farm.client.evaluations(since=since, limit=5, cursor=page["next_cursor"])
    assert sorted(listed) == sorted(ids) and page["total"] == JOBS

    # and the comparison, from the counts every finish kept, counts each run once per system
    rows = [r for r in farm.client.compare(models=[MODEL])["rows"] if r["agent_id"] in agents]
    runs = Counter()
    for row in rows:
        runs[(row["agent_id"], row["batch_size"])] += row["runs"]
    assert runs == Counter({(agent, size): ran_on[agent] for agent in ran_on for size in BATCH_SIZES})
    # the same as counting the evaluations themselves
    by_ids = farm.client.compare(ids=ids)["rows"]
    assert sum(row["runs"] for row in by_ids) == JOBS * len(BATCH_SIZES)

    # and every read served meanwhile was answered
    assert reader.reads > 0 and reader.failures == [], reader.failures[:5]
