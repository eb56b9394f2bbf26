"""Load settings: how the server and multi_stream scenarios issue queries, and what a latency search
looks for. Defined once: the request validates a `load` document with `LoadSettings.from_dict`, and
the predictor runtime's load generator reads the same dataclass.

Scenario defaults follow MLPerf LoadGen: the percentile a point certifies is the 90th for
single_stream, the 99th for server and multi_stream, and the median for offline (whose figure is a
throughput); a multi_stream query holds 8 samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from mlscope.contract.bounds import Bound
from mlscope.contract.errors import UserError
from mlscope.contract.interactive import parse_sweep
from mlscope.contract.section import SettingsSection

__all__ = ["DEFAULT_INTERVAL_MS", "DEFAULT_PERCENTILES", "LOAD_SCENARIOS", "MAX_QPS", "LoadSettings"]

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

    def __post_init__(self) -> None:
        self._check_bounds()
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
