"""The agent registry: which workers are alive, what they can serve and what they are doing.

Each worker keeps one Redis key, `mlscope:agent:<id>`, holding its description as JSON and
expiring `ttl_s` after its last heartbeat; a worker that dies simply stops renewing it and drops out
of `live()` within `ttl_s`. The set `mlscope:agents` indexes the keys (entries whose key expired are
pruned on read), and `mlscope:queues` remembers every queue a job was ever sent to, for queue depths.
`mlscope:job:<evaluation id>` names the agents that published it as their current job (`running`).

The counter `mlscope:agents:generation` changes whenever the set of agents or what one serves
changes: an agent registers, unregisters, or publishes another description (AgentInfo.DESCRIPTION:
everything but its status, which heartbeats and jobs renew). `LiveCache` reads that one counter
instead of every agent's key, so routing a job does not cost a read of the whole fleet. Each agent's
`mlscope:agentdigest:<id>` (the digest of its description, expiring with its key) is what a
registration compares against.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import redis

from mlscope.contract.errors import UserError

__all__ = [
    "DEFAULT_MAX_AGE_S",
    "DEFAULT_TTL_S",
    "AgentInfo",
    "AgentRegistry",
    "LiveCache",
    "LiveSnapshot",
    "RegistryUnavailable",
]

DEFAULT_TTL_S = 15.0
# How long LiveCache reuses a read while the generation stands still: an agent that died without
# unregistering leaves its view at most this long after its key expired.
DEFAULT_MAX_AGE_S = 1.0
_PREFIX = "mlscope:agent:"
_DIGESTS = "mlscope:agentdigest:"
_INDEX = "mlscope:agents"
_GENERATION = "mlscope:agents:generation"
_JOBS = "mlscope:job:"
_QUEUES = "mlscope:queues"
_LOCKS = "mlscope:lock:"

# Bumping the generation: a counter that is gone (its database emptied) restarts at a random value,
# so it does not climb back to one a cache holds while the agents behind it are others.
_BUMP = """
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SET', KEYS[1], ARGV[1]) end
return redis.call('INCR', KEYS[1])
"""
# KEYS: the agent's key, its digest's key, the index, the generation, its current job's set of agents.
# ARGV: the JSON, the description's digest, the lifetime (ms), the id, a seed for _BUMP, "1" for NX,
# the current job ("" for none).
# Returns 1 when published (0: NX and the id is live); bumps when the digest is not the live one's.
_PUBLISH = """
if ARGV[6] == '1' then
  if not redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3], 'NX') then
    redis.call('SADD', KEYS[3], ARGV[4])
    return 0
  end
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
end
redis.call('SADD', KEYS[3], ARGV[4])
local old = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
if old ~= ARGV[2] then
  if redis.call('EXISTS', KEYS[4]) == 0 then redis.call('SET', KEYS[4], ARGV[5]) end
  redis.call('INCR', KEYS[4])
end
if ARGV[7] ~= '' then
  redis.call('SADD', KEYS[5], ARGV[4])
  redis.call('PEXPIRE', KEYS[5], ARGV[3])
end
return 1
"""


def _seed() -> str:
    return str(secrets.randbelow(2**52))


class RegistryUnavailable(UserError):
    """The registry's Redis cannot be reached."""


@dataclass(frozen=True)
class AgentInfo:
    """One live worker.

    Attributes:
        id: the agent id (default: the hostname).
        hostname: the machine's name.
        capabilities: dotted capabilities, as detected or given by flag.
        frameworks: installed framework name → version.
        runners: the runners it can use (inline, process, docker).
        queues: the queues it consumes.
        system: a short description of the machine (cpu, gpus, memory, os, python).
        pid: the worker's process id.
        version: the mlscope version it runs.
        started_at, heartbeat_at: wall-clock seconds.
        current_job: the evaluation id it is running, or None when idle.
        jobs_done: how many jobs it has ended since it started.
        spooled: evaluations whose results it keeps in its spool until the store is reachable.

    Its status (STATUS: heartbeat_at, current_job, jobs_done, spooled) changes with every heartbeat
    and job; the rest, its description (what routing reads), only when the worker restarts.
    """

    STATUS: ClassVar[frozenset[str]] = frozenset({"heartbeat_at", "current_job", "jobs_done", "spooled"})

    id: str
    hostname: str
    capabilities: tuple[str, ...]
    frameworks: dict[str, str]
    runners: tuple[str, ...]
    queues: tuple[str, ...]
    system: dict[str, Any] = field(default_factory=dict)
    pid: int = 0
    version: str = ""
    started_at: float = field(default_factory=time.time)
    heartbeat_at: float = field(default_factory=time.time)
    current_job: str | None = None
    jobs_done: int = 0
    spooled: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Its fields as JSON-ready values: lists for tuples, copies of its dicts (one level deep: what
        `system` nests is shared, to be read). Not `dataclasses.asdict`, whose deep copy cost as much as
        reading the agent from Redis: an agent listing makes one per live agent."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["capabilities"] = list(self.capabilities)
        data["runners"] = list(self.runners)
        data["queues"] = list(self.queues)
        data["spooled"] = list(self.spooled)
        data["frameworks"] = dict(self.frameworks)
        data["system"] = dict(self.system)
        return data

    def digest(self) -> str:
        """A digest of its description (everything but STATUS): equal digests, same description."""
        data = {k: v for k, v in self.to_dict().items() if k not in self.STATUS}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentInfo:
        return cls(
            **{
                **data,
                "capabilities": tuple(data["capabilities"]),
                "runners": tuple(data["runners"]),
                "queues": tuple(data["queues"]),
                "spooled": tuple(data.get("spooled", ())),
            }
        )


class AgentRegistry:
    """Live workers in Redis, with heartbeats that expire."""

    def __init__(self, url: str, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.url = url
        self.ttl_s = ttl_s
        self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._publish = self._redis.register_script(_PUBLISH)
        self._bump = self._redis.register_script(_BUMP)

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except redis.RedisError as exc:
            raise RegistryUnavailable(f"agent registry at {self.url}: cannot {what} ({exc})") from None

    def ping(self) -> None:
        """Raises RegistryUnavailable when Redis does not answer."""
        self._call("ping", self._redis.ping)

    def _put(self, what: str, info: AgentInfo, *, nx: bool) -> bool:
        data = json.dumps({**info.to_dict(), "heartbeat_at": time.time()})
        job = info.current_job or ""
        keys = [_PREFIX + info.id, _DIGESTS + info.id, _INDEX, _GENERATION, _JOBS + job]
        ttl_ms = int(self.ttl_s * 1000)
        args: list[str | int] = [data, info.digest(), ttl_ms, info.id, _seed(), "1" if nx else "0", job]
        return bool(self._call(what, lambda: self._publish(keys=keys, args=args)))

    def register(self, info: AgentInfo) -> None:
        """Publish (or refresh) an agent's description; it expires `ttl_s` after this call. The
        generation moves when the agent was not live or its description changed (one atomic script)."""
        self._put("register an agent", info, nx=False)

    def claim(self, info: AgentInfo) -> bool:
        """Publish `info` only if no live agent holds its id (one atomic SET NX); True when claimed.

        Two workers starting at once on one host both see the host name free; only one claims it."""
        return self._put("claim an agent id", info, nx=True)

    def _next_generation(self) -> None:
        self._call("bump the registry's generation", lambda: self._bump(keys=[_GENERATION], args=[_seed()]))

    def generation(self) -> int | None:
        """The registry's generation: it changes whenever an agent registers, unregisters or changes
        its description (never on a heartbeat alone); None before any registration."""
        raw = self._call("read the registry's generation", self._redis.get, _GENERATION)
        return int(raw) if raw is not None else None

    def try_lock(self, name: str, holder: str, ttl_s: float) -> bool:
        """Take (or renew, for the same holder) a farm-wide lock that expires after `ttl_s`: one sweeper at
        a time, whatever the number of workers and API processes."""
        key = _LOCKS + name
        taken = self._call("take a lock", lambda: self._redis.set(key, holder, px=int(ttl_s * 1000), nx=True))
        if taken:
            return True
        current = self._call("read a lock", self._redis.get, key)
        if current is not None and current.decode() == holder:
            self._call("renew a lock", self._redis.pexpire, key, int(ttl_s * 1000))
            return True
        return False

    def heartbeat(self, info: AgentInfo) -> AgentInfo:
        """Renew the agent's key with its current state; returns the state as published."""
        updated = replace(info, heartbeat_at=time.time())
        self.register(updated)
        return updated

    def unregister(self, agent_id: str) -> None:
        pipe = self._redis.pipeline()
        pipe.delete(_PREFIX + agent_id, _DIGESTS + agent_id)
        pipe.srem(_INDEX, agent_id)
        self._call("unregister an agent", pipe.execute)
        self._next_generation()

    def get(self, agent_id: str) -> AgentInfo | None:
        raw = self._call("read an agent", self._redis.get, _PREFIX + agent_id)
        return AgentInfo.from_dict(json.loads(raw)) if raw else None

    def live(self) -> list[AgentInfo]:
        """Every agent whose heartbeat has not expired, ordered by id."""
        ids = sorted(i.decode() for i in self._call("list agents", self._redis.smembers, _INDEX))
        if not ids:
            return []
        raws = self._call("read agents", self._redis.mget, [_PREFIX + i for i in ids])
        gone = [i for i, raw in zip(ids, raws, strict=True) if raw is None]
        if gone and self._call("prune expired agents", self._redis.srem, _INDEX, *gone):
            self._next_generation()
        return [AgentInfo.from_dict(json.loads(raw)) for raw in raws if raw is not None]

    def running(self, evaluation_id: str) -> list[AgentInfo]:
        """The live agents whose current job is `evaluation_id`, ordered by id.

        Each publish of an agent with a current job adds it to that job's set (`mlscope:job:<id>`,
        expiring with the agent's key); the set may still name agents that moved on, so their records
        are read and checked. Reads the job's few agents, not the fleet: a worker asks before each job."""
        ids = sorted(
            i.decode() for i in self._call("list a job's agents", self._redis.smembers, _JOBS + evaluation_id)
        )
        if not ids:
            return []
        raws = self._call("read agents", self._redis.mget, [_PREFIX + i for i in ids])
        agents = [AgentInfo.from_dict(json.loads(raw)) for raw in raws if raw is not None]
        return [agent for agent in agents if agent.current_job == evaluation_id]

    def note_queue(self, queue: str) -> None:
        """Remember that a job was sent to `queue`."""
        self._call("record a queue", self._redis.sadd, _QUEUES, queue)

    def known_queues(self) -> set[str]:
        """Every queue a job was sent to, and every queue a live agent consumes."""
        noted = {q.decode() for q in self._call("list queues", self._redis.smembers, _QUEUES)}
        return noted | {q for agent in self.live() for q in agent.queues}

    def reference_time(self) -> float:
        """The registry server's clock, seconds since the epoch: the one clock the API and every
        worker reach, against which parts of a split load start together (docs/farm.md)."""
        seconds, micros = self._call("read the registry's clock", self._redis.time)
        return int(seconds) + int(micros) / 1e6

    def clock_offset(self, samples: int = 8) -> tuple[float, float]:
        """This machine's clock against the registry's, as NTP estimates it: the reference minus the
        midpoint of the round trip, from the sample with the shortest round trip.

        Returns:
            (offset_s, rtt_s): add offset_s to this clock's time to get the reference's; the offset
            is uncertain by at most rtt_s / 2.
        """
        best: tuple[float, float] | None = None
        for _ in range(samples):
            sent = time.time()
            reference = self.reference_time()
            received = time.time()
            rtt = received - sent
            if best is None or rtt < best[1]:
                best = (reference - (sent + received) / 2, rtt)
        assert best is not None
        return best

    def close(self) -> None:
        self._redis.close()


@dataclass(frozen=True)
class LiveSnapshot:
    """The live agents as one read found them, with what routing asks of them indexed.

    Attributes:
        agents: the live agents, ordered by id.
        by_queue: queue → ids of the agents consuming it.
    """

    agents: tuple[AgentInfo, ...] = ()
    by_queue: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, agents: tuple[AgentInfo, ...]) -> LiveSnapshot:
        by_queue: dict[str, list[str]] = {}
        for agent in agents:
            for queue in dict.fromkeys(agent.queues):
                by_queue.setdefault(queue, []).append(agent.id)
        return cls(agents, {queue: tuple(ids) for queue, ids in by_queue.items()})


class LiveCache:
    """The live agents for routing, without reading the whole fleet each time.

    A read of `registry.live()` is reused while the registry's generation is the one read with it and
    the read is younger than `max_age_s`; so each use costs one GET of the generation. An agent that
    registers, unregisters or changes its description moves the generation, so it is seen at once; one
    that dies without unregistering leaves within its key's lifetime plus `max_age_s`. The agents'
    status (AgentInfo.STATUS: heartbeat, current job) may be up to `max_age_s` old: read `live()`
    where it matters (agent listings, the sweeper). Safe to share between threads.

    Args:
        registry: the agent registry.
        max_age_s: the longest a read is reused.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        registry: AgentRegistry,
        *,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()  # guards the three below
        self._refresh = threading.Lock()  # one re-read at a time; the others then take its result
        self._snapshot: LiveSnapshot | None = None
        self._generation: int | None = None
        self._read_at = 0.0

    def _fresh(self, generation: int | None, now: float) -> LiveSnapshot | None:
        with self._lock:
            if (
                self._snapshot is not None
                and generation is not None
                and generation == self._generation
                and now - self._read_at < self.max_age_s
            ):
                return self._snapshot
            return None

    def snapshot(self) -> LiveSnapshot:
        """The live agents, read again only when the generation moved or the last read is too old.

        Raises:
            RegistryUnavailable: Redis does not answer.
        """
        now = self._clock()
        generation = self.registry.generation()
        found = self._fresh(generation, now)
        if found is not None:
            return found
        with self._refresh:
            # Another thread re-read while this one waited, at the generation this one saw: take its read.
            found = self._fresh(generation, now)
            if found is not None:
                return found
            # The generation, then the agents: a change between the two moves the generation past
            # the one kept, so the next use reads again.
            now = self._clock()
            generation = self.registry.generation()
            snapshot = LiveSnapshot.of(tuple(self.registry.live()))
            with self._lock:
                self._snapshot, self._generation, self._read_at = snapshot, generation, now
            return snapshot

    def live(self) -> tuple[AgentInfo, ...]:
        """The live agents, ordered by id (see `snapshot`)."""
        return self.snapshot().agents
