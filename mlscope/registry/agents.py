"""The agent registry: which workers are alive, what they can serve and what they are doing.

Each worker keeps one Redis key, `mlscope:agent:<id>`, holding its description as JSON and
expiring `ttl_s` after its last heartbeat; a worker that dies simply stops renewing it and drops out
of `live()` within `ttl_s`. The set `mlscope:agents` indexes the keys (entries whose key expired are
pruned on read), and `mlscope:queues` remembers every queue a job was ever sent to, for queue depths.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import redis

from mlscope.contract.errors import UserError

__all__ = ["DEFAULT_TTL_S", "AgentInfo", "AgentRegistry", "RegistryUnavailable"]

DEFAULT_TTL_S = 15.0
_PREFIX = "mlscope:agent:"
_INDEX = "mlscope:agents"
_QUEUES = "mlscope:queues"
_LOCKS = "mlscope:lock:"


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
    """

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
        data = asdict(self)
        data["capabilities"] = list(self.capabilities)
        data["runners"] = list(self.runners)
        data["queues"] = list(self.queues)
        data["spooled"] = list(self.spooled)
        return data

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

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except redis.RedisError as exc:
            raise RegistryUnavailable(f"agent registry at {self.url}: cannot {what} ({exc})") from None

    def ping(self) -> None:
        """Raises RegistryUnavailable when Redis does not answer."""
        self._call("ping", self._redis.ping)

    def register(self, info: AgentInfo) -> None:
        """Publish (or refresh) an agent's description; it expires `ttl_s` after this call."""
        data = json.dumps({**info.to_dict(), "heartbeat_at": time.time()})
        pipe = self._redis.pipeline()
        pipe.set(_PREFIX + info.id, data, px=int(self.ttl_s * 1000))
        pipe.sadd(_INDEX, info.id)
        self._call("register an agent", pipe.execute)

    def claim(self, info: AgentInfo) -> bool:
        """Publish `info` only if no live agent holds its id (one atomic SET NX); True when claimed.

        Two workers starting at once on one host both see the host name free; only one claims it."""
        data = json.dumps({**info.to_dict(), "heartbeat_at": time.time()})
        pipe = self._redis.pipeline()
        pipe.set(_PREFIX + info.id, data, px=int(self.ttl_s * 1000), nx=True)
        pipe.sadd(_INDEX, info.id)
        claimed, _ = self._call("claim an agent id", pipe.execute)
        return bool(claimed)

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
        pipe.delete(_PREFIX + agent_id)
        pipe.srem(_INDEX, agent_id)
        self._call("unregister an agent", pipe.execute)

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
        if gone:
            self._call("prune expired agents", self._redis.srem, _INDEX, *gone)
        return [AgentInfo.from_dict(json.loads(raw)) for raw in raws if raw is not None]

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
