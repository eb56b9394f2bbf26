"""The registry's generation and the API's cached view of live agents (LiveCache), on the real Redis.

A submission routes from `LiveCache`: one read of the generation, the agents' keys only when it
moved or the last read is older than the cache's max age. These tests hold it to the registry's
truth: a new agent is seen at once, an unregistered one is gone at once, one that dies without
unregistering is gone within its key's lifetime plus the max age, and heartbeats alone never make the
cache read the fleet again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from mlscope.contract.queues import queues_for
from mlscope.registry.agents import AgentInfo, AgentRegistry, LiveCache
from tests.fixtures.services import emptied_redis
from tests.integration.farm import REDIS_URL


@pytest.fixture
def redis_db() -> Iterator[redis.Redis]:
    yield from emptied_redis(REDIS_URL)


@pytest.fixture
def workers(redis_db: redis.Redis) -> Iterator[AgentRegistry]:
    """The registry as the workers write it."""
    made = AgentRegistry(REDIS_URL, ttl_s=60)
    yield made
    made.close()


class Reads:
    """The API's registry, its MGETs of agent keys counted (the real Redis answers them)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.registry = AgentRegistry(REDIS_URL, ttl_s=60)
        self.mgets = 0
        real = self.registry._redis.mget

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.mgets += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(self.registry._redis, "mget", counted)


@pytest.fixture
def reads(redis_db: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    made = Reads(monkeypatch)
    yield made
    made.registry.close()


class Clock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def agent(agent_id: str, capability: str = "cpu.x86_64") -> AgentInfo:
    return AgentInfo(
        id=agent_id,
        hostname=f"{agent_id}.example",
        capabilities=(capability,),
        frameworks={"pytorch": "2.3.0"},
        runners=("process",),
        queues=tuple(queues_for(["pytorch"], [capability], agent_id)),
    )


def ids(cache: LiveCache) -> list[str]:
    return [a.id for a in cache.live()]


def test_a_registered_agent_is_seen_at_once_and_an_unregistered_one_is_gone_at_once(
    workers: AgentRegistry, reads: Reads
) -> None:
    # Given a cache that has read one live agent, and a clock that does not move (no max age passes)
    clock = Clock()
    cache = LiveCache(reads.registry, max_age_s=60, clock=clock)
    workers.register(agent("a"))
    assert ids(cache) == ["a"]
    # When a second agent registers, then it is in the very next view, and routes by its queues
    workers.register(agent("b", "cpu.aarch64"))
    assert ids(cache) == ["a", "b"]
    assert cache.snapshot().by_queue["agent@b"] == ("b",)
    assert cache.snapshot().by_queue["pytorch@cpu"] == ("a", "b")
    # When the first unregisters (a worker that stops), then it is gone from the very next view
    workers.unregister("a")
    assert ids(cache) == ["b"]
    # When an agent publishes another description under its id (a worker restarted with other
    # capabilities), then the next view has the new one
    workers.register(agent("b", "cpu.x86_64"))
    assert cache.live()[0].capabilities == ("cpu.x86_64",)
    # And a claim (the worker's first registration) is seen at once too
    assert workers.claim(agent("c"))
    assert ids(cache) == ["b", "c"]


def test_heartbeats_and_job_changes_alone_never_make_the_cache_read_the_agents(
    workers: AgentRegistry, reads: Reads
) -> None:
    # Given three live agents and a cache that read them once
    clock = Clock()
    cache = LiveCache(reads.registry, max_age_s=1.0, clock=clock)
    fleet = [workers.heartbeat(agent(name)) for name in ("a", "b", "c")]
    generation = reads.registry.generation()
    assert ids(cache) == ["a", "b", "c"] and reads.mgets == 1
    # When every agent heartbeats many times, and takes and ends jobs (status, not description)
    for round_ in range(5):
        for info in fleet:
            workers.heartbeat(info)
            workers.register(AgentInfo.from_dict({**info.to_dict(), "current_job": f"job-{round_}"}))
            workers.register(
                AgentInfo.from_dict({**info.to_dict(), "jobs_done": round_ + 1, "spooled": ["x"]})
            )
        # Then each use of the cache within its max age reads only the generation, which stood still
        clock.now += 0.1
        assert ids(cache) == ["a", "b", "c"]
    assert reads.registry.generation() == generation
    assert reads.mgets == 1
    # When the max age passes, then the next use reads the agents again, once
    clock.now += 1.0
    assert ids(cache) == ["a", "b", "c"]
    assert ids(cache) == ["a", "b", "c"]
    assert reads.mgets == 2


def test_an_agent_that_dies_without_unregistering_leaves_within_its_lifetime_and_the_max_age(
    redis_db: redis.Redis, reads: Reads
) -> None:
    # Given an agent whose key lives 0.5 s and is never renewed (its worker was killed), beside one
    # that keeps heartbeating, and a cache on the real clock with a max age of 0.5 s
    ttl_s, max_age_s = 0.5, 0.5
    dying = AgentRegistry(REDIS_URL, ttl_s=ttl_s)
    alive = AgentRegistry(REDIS_URL, ttl_s=60)
    try:
        cache = LiveCache(reads.registry, max_age_s=max_age_s)
        alive.register(agent("alive"))
        dying.register(agent("dying"))
        registered = time.monotonic()
        assert ids(cache) == ["alive", "dying"]
        # When only the living one heartbeats
        gone_after = None
        while time.monotonic() - registered < 3.0:
            alive.register(agent("alive"))
            if ids(cache) == ["alive"]:
                gone_after = time.monotonic() - registered
                break
            time.sleep(0.02)
        # Then the dead one left the view within its lifetime plus the max age
        assert gone_after is not None, "the dead agent never left the cached view"
        assert gone_after <= ttl_s + max_age_s + 0.4, gone_after  # slack: a busy machine's scheduling
    finally:
        dying.close()
        alive.close()


def test_the_generation_survives_an_emptied_database_without_coming_back_to_a_cached_value(
    redis_db: redis.Redis, workers: AgentRegistry, reads: Reads
) -> None:
    # Given a cache that read agent "a" at some generation
    cache = LiveCache(reads.registry, max_age_s=60, clock=Clock())
    workers.register(agent("a"))
    assert ids(cache) == ["a"]
    before = reads.registry.generation()
    # When the database is emptied and another agent registers
    redis_db.flushdb()
    assert reads.registry.generation() is None
    workers.register(agent("z"))
    # Then the counter restarted elsewhere, and the cache shows the registry as it is now
    assert reads.registry.generation() not in (None, before)
    assert ids(cache) == ["z"]


def test_threads_that_find_the_cache_stale_at_once_read_the_agents_once(
    workers: AgentRegistry, reads: Reads
) -> None:
    # Given a cache that read two agents, and a third that registers
    cache = LiveCache(reads.registry, max_age_s=60, clock=Clock())
    workers.register(agent("a"))
    workers.register(agent("b"))
    assert ids(cache) == ["a", "b"] and reads.mgets == 1
    workers.register(agent("c"))
    # When twenty request threads use the cache at the same moment
    start = threading.Barrier(20)
    seen: list[list[str]] = []

    def request() -> None:
        start.wait()
        seen.append(ids(cache))

    threads = [threading.Thread(target=request) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then each sees the new agent, and the agents were read once for all of them
    assert seen == [["a", "b", "c"]] * 20
    assert reads.mgets == 2


def test_running_names_the_live_agents_whose_current_job_it_is_without_reading_the_fleet(
    workers: AgentRegistry, reads: Reads
) -> None:
    # Given a fleet of fifty agents, two of which publish job "e1" as their current job
    fleet = {name: workers.heartbeat(agent(name)) for name in (f"n{i:02d}" for i in range(50))}
    for name in ("n07", "n31"):
        workers.register(AgentInfo.from_dict({**fleet[name].to_dict(), "current_job": "e1"}))
    # When a worker asks who runs "e1", then both are named, from a read of those two agents only
    assert [a.id for a in reads.registry.running("e1")] == ["n07", "n31"]
    assert reads.registry.running("e2") == []
    # When one of them moves on to another job, then only the other still runs "e1"
    workers.register(AgentInfo.from_dict({**fleet["n07"].to_dict(), "current_job": "e2"}))
    assert [a.id for a in reads.registry.running("e1")] == ["n31"]
    assert [a.id for a in reads.registry.running("e2")] == ["n07"]
    # When the other stops, then nobody runs it
    workers.unregister("n31")
    assert reads.registry.running("e1") == []
    assert reads.mgets == 4
