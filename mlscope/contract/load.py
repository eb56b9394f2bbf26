"""Load settings: how the server and multi_stream scenarios issue queries, and what a latency search
looks for. Defined once: the request validates a `load` document with `LoadSettings.from_dict`, and
the predictor runtime's load generator reads the same dataclass.

Scenario defaults follow MLPerf LoadGen: the percentile a point certifies is the 90th for
single_stream, the 99th for server and multi_stream, and the median for offline (whose figure is a
throughput); a multi_stream query holds 8 samples.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from mlscope.contract.bounds import Bound
from mlscope.contract.errors import UserError, check_known_keys
from mlscope.contract.interactive import parse_sweep
from mlscope.contract.section import SettingsSection

__all__ = [
    "DEFAULT_INTERVAL_MS",
    "DEFAULT_PERCENTILES",
    "LOAD_SCENARIOS",
    "MAX_AGENTS",
    "MAX_QPS",
    "SHARDED_SCENARIOS",
    "LoadSettings",
    "Shard",
]

# The scenarios a load generator drives (the others issue back to back).
LOAD_SCENARIOS = ("server", "multi_stream")
# The percentile each scenario certifies unless `percentile` says otherwise.
# The generate scenario certifies its SLO metrics' 90th percentile: LoadGen's LLM benchmarks hold
# TTFT and TPOT to the 99th, which needs 662 requests; `--percentile 99` asks for that.
DEFAULT_PERCENTILES = {
    "single_stream": 90.0,
    "offline": 50.0,
    "server": 99.0,
    "multi_stream": 99.0,
    "generate": 90.0,
}
# No single Python load generator issues more than this; a target above it is a typo, refused at
# once. What this machine's generator really sustains is measured when the run starts.
MAX_QPS = 100_000.0
# multi_stream's interval between queries unless `interval_ms` says otherwise.
DEFAULT_INTERVAL_MS = 50.0
# The most agents one schedule is split across (`agents`).
MAX_AGENTS = 256
# The scenarios whose schedule can be split across agents: open-loop arrivals at a rate.
SHARDED_SCENARIOS = ("server", "generate")


@dataclass(frozen=True)
class Shard:
    """One agent's part of a schedule split across `count` agents (docs/farm.md, "Load from many
    hosts"): set by the API on each agent's evaluation, never by a user.

    Attributes:
        group: the evaluation that holds the merged result.
        index: this agent's part, 0-based: it issues the queries the split assigns to `index`.
        count: agents the schedule is split across.
        start_at: when every agent starts its schedule, seconds since the epoch on the reference
            clock (the agent registry's server, which the API and every worker reach).
        ids: every part's evaluation id, in part order (the merge reads them).
        clock_offset_s: the reference clock minus this agent's clock, measured by the worker before
            the run (None until then, or where the reference could not be read).
        clock_rtt_s: the round trip of the best of those measurements: the offset's uncertainty
            is at most half of it.
    """

    group: str
    index: int
    count: int
    start_at: float
    ids: tuple[str, ...]
    clock_offset_s: float | None = None
    clock_rtt_s: float | None = None

    @classmethod
    def from_dict(cls, data: Any) -> Shard:
        """A shard from its document.

        Raises:
            UserError: not a mapping, an unknown or missing key, or a value out of range (field
                `shard`).
        """
        known = [f.name for f in fields(cls)]
        check_known_keys(data, known, "load.shard", field="shard")
        missing = [name for name in ("group", "index", "count", "start_at", "ids") if name not in data]
        if missing:
            raise UserError(f"load.shard lacks {', '.join(missing)}", field="shard")
        shard = cls(**{**data, "ids": tuple(data["ids"]) if isinstance(data["ids"], list | tuple) else ()})
        counted = all(isinstance(v, int) and not isinstance(v, bool) for v in (shard.index, shard.count))
        if not (counted and 2 <= shard.count <= MAX_AGENTS and 0 <= shard.index < shard.count):
            raise UserError(
                f"load.shard index {shard.index!r} of {shard.count!r} is invalid: expected 0 ≤ index < "
                f"count, 2 ≤ count ≤ {MAX_AGENTS}",
                field="shard",
            )
        if len(shard.ids) != shard.count or not all(isinstance(i, str) and i for i in shard.ids):
            raise UserError("load.shard ids must name one evaluation per part", field="shard")
        if not isinstance(shard.start_at, int | float) or isinstance(shard.start_at, bool):
            raise UserError(f"load.shard start_at={shard.start_at!r} is not a time in seconds", field="shard")
        return shard

    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)
        document["ids"] = list(self.ids)
        return document

    @staticmethod
    def part_ids(group: str, count: int) -> tuple[str, ...]:
        """The evaluation ids of a group's `count` parts: derived from the group's, so whoever holds
        the group (a cancel, a listing) finds its parts without a record of them."""
        return tuple(hashlib.sha256(f"{group}:{index}".encode()).hexdigest()[:32] for index in range(count))


@dataclass(frozen=True)
class LoadSettings(SettingsSection):
    """How queries are issued under load, validated on construction.

    Attributes:
        qps: the server scenario's target arrival rate, queries per second (Poisson arrivals);
            with find_max_qps, where the search starts (None: from the model's single-stream speed).
        max_in_flight: 1. Queries the model runs at once; the others wait in a queue, and their
            wait counts in their latency (as a server with that many model instances).
        samples_per_query: 8. multi_stream: samples in each query (each an input of the point's
            batch size), issued together; the query's latency is its slowest sample's.
        interval_ms: 50. multi_stream: a query is issued every interval_ms.
        back_to_back: multi_stream: issue each query when the previous one completes (LoadGen ≥ 1.0's
            MultiStream) instead of every interval_ms, which then does not apply.
        find_max_qps: server: search for the highest QPS whose certified percentile latency meets
            latency_bound_ms.
        latency_bound_ms: the latency the percentile must stay under (server; needed by
            find_max_qps). Queries over it count against the early-stopping certificate.
        percentile: the percentile a point certifies, in (0, 100); None for the scenario's
            default (DEFAULT_PERCENTILES).
        confidence: 0.99. Confidence of the early-stopping certificate (LoadGen's).
        seed: 0. Seeds the arrival times, so two runs issue the same schedule.
        resolution: 0.05. The search stops when its bracket is narrower than this fraction.
        sweep: generate: one point per value of a setting, "concurrency=1,2,4,8" (closed loop) or
            "qps=1,2,4" (Poisson arrivals), or {"setting": ..., "values": [...]}; the points are
            kept as one measurement's generation.sweep with their throughput-latency Pareto front
            (docs/generate.md, "Sweeps"). Not with qps or find_max_qps, which set one load.
        agents: 1. With a farm target, the agents one seeded Poisson schedule at qps is split
            across: each issues an independent part (the split thins the schedule, so the parts
            superpose to it exactly), all start at one instant, and the percentiles, goodput and
            certificates are computed on every request of every part (docs/farm.md, "Load from many
            hosts").
        shard: this agent's part of such a split (`Shard`), set by the API; None otherwise.
    """

    SECTION: ClassVar[str] = "load"
    BOUNDS: ClassVar[dict[str, Bound]] = {
        "qps": Bound(
            low=0,
            low_open=True,
            high=MAX_QPS,
            note="(no single load generator issues more queries per second)",
        ),
        "max_in_flight": Bound(integer=True, low=1, high=1024),
        "samples_per_query": Bound(integer=True, low=1, high=1024),
        "interval_ms": Bound(low=0, low_open=True),
        "latency_bound_ms": Bound(low=0, low_open=True),
        "percentile": Bound(low=0, low_open=True, high=100, high_open=True),
        "confidence": Bound(low=0.5, low_open=True, high=1, high_open=True),
        "seed": Bound(integer=True, low=0, high=2**63 - 1),
        "resolution": Bound(low=0, low_open=True, high=0.5),
        "agents": Bound(integer=True, low=1, high=MAX_AGENTS),
    }

    qps: float | None = None
    max_in_flight: int = 1
    samples_per_query: int = 8
    interval_ms: float = DEFAULT_INTERVAL_MS
    back_to_back: bool = False
    find_max_qps: bool = False
    latency_bound_ms: float | None = None
    percentile: float | None = None
    confidence: float = 0.99
    seed: int = 0
    resolution: float = 0.05
    sweep: Any = None
    agents: int = 1
    shard: Any = None

    def __post_init__(self) -> None:
        self._check_bounds()
        if self.shard is not None:
            object.__setattr__(self, "shard", Shard.from_dict(self.shard).to_dict())
        if self.agents > 1 and (self.qps is None or self.find_max_qps or self.sweep is not None):
            raise UserError(
                f"agents={self.agents} splits one schedule at a fixed rate across agents: give qps "
                "(e.g. --qps 200), without find_max_qps or a sweep",
                field="agents",
            )
        if self.sweep is not None:
            object.__setattr__(self, "sweep", parse_sweep(self.sweep))
            if self.qps is not None or self.find_max_qps:
                flag = "qps" if self.qps is not None else "find_max_qps"
                raise UserError(
                    f"a sweep measures one point per {self.sweep['setting']} value: drop {flag} "
                    f"(--{flag.replace('_', '-')})",
                    field="sweep",
                )
        for name in ("find_max_qps", "back_to_back"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(
                    f"load setting {name}={getattr(self, name)!r} is invalid: expected true or false",
                    field=name,
                )
        # An interval of 50 cannot be told from the default, so only another one is refused.
        if self.back_to_back and self.interval_ms != DEFAULT_INTERVAL_MS:
            raise UserError(
                f"interval_ms={self.interval_ms:g} does not apply with back_to_back (each query is issued "
                "when the previous one completes): give one or the other",
                field="interval_ms",
            )

    @functools.cached_property
    def part(self) -> Shard | None:
        """This agent's part of a split schedule, or None (read once: the scenario, the driver and
        the generator each ask)."""
        return None if self.shard is None else Shard.from_dict(self.shard)

    def percentile_for(self, scenario: str) -> float:
        """The percentile `scenario` certifies: this setting's, or the scenario's default."""
        return self.percentile if self.percentile is not None else DEFAULT_PERCENTILES.get(scenario, 90.0)

    def check_scenarios(self, scenarios: tuple[str, ...] | list[str]) -> None:
        """Whether these settings make sense for the scenarios asked for.

        Raises:
            UserError: the server scenario has neither qps nor find_max_qps, or find_max_qps without
                latency_bound_ms; latency_bound_ms without the server scenario; qps or find_max_qps
                without the server or generate scenario; back_to_back without multi_stream.
        """
        if self.agents > 1 and not set(scenarios) <= set(SHARDED_SCENARIOS):
            others = sorted(set(scenarios) - set(SHARDED_SCENARIOS))
            raise UserError(
                f"agents={self.agents} splits the arrivals of the server and generate scenarios; "
                f"{', '.join(others)} issues no schedule to split: ask for those apart",
                field="agents",
            )
        if self.back_to_back and "multi_stream" not in scenarios:
            raise UserError(
                "back_to_back applies only to the multi_stream scenario (--scenario multi_stream)",
                field="back_to_back",
            )
        if "server" in scenarios:
            if self.qps is None and not self.find_max_qps:
                raise UserError(
                    "the server scenario needs a target rate: qps (e.g. --qps 20), or find_max_qps with "
                    "latency_bound_ms to search for the highest one",
                    field="qps",
                )
            if self.find_max_qps and self.latency_bound_ms is None:
                raise UserError(
                    "find_max_qps needs latency_bound_ms: the latency the percentile must stay under "
                    "(e.g. --latency-bound-ms 50)",
                    field="latency_bound_ms",
                )
            return
        if self.latency_bound_ms is not None:
            raise UserError(
                "latency_bound_ms applies only to the server scenario (--scenario server; the generate "
                "scenario's bounds are its slo)",
                field="latency_bound_ms",
            )
        if self.sweep is not None and "generate" not in scenarios:
            raise UserError(
                "sweep applies only to the generate scenario (--scenario generate)", field="sweep"
            )
        if "generate" in scenarios:
            return  # qps: Poisson arrivals of requests; find_max_qps: against the slo (checked with it)
        where = "the server scenario (--scenario server) and the generate scenario"
        if self.qps is not None:
            raise UserError(f"qps applies only to {where}", field="qps")
        if self.find_max_qps:
            raise UserError(f"find_max_qps applies only to {where}", field="find_max_qps")
