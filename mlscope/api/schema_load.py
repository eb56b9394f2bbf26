"""The OpenAPI description of a measurement, its `load` section spelled out (docs/design.md, "Result
sections"). Descriptions only: measurements are served as stored, a newer runtime's extra keys
included, so nothing here drops or checks a key.
"""

from __future__ import annotations

from typing import Any

from mlscope.api.schema_generation import GENERATION_SECTION

__all__ = ["MEASUREMENT_PROPERTIES"]


def _number(description: str, *, nullable: bool = False, low: float | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {"type": "number", "description": description}
    if nullable:
        document["nullable"] = True
    if low is not None:
        document["minimum"] = low
    return document


def _integer(description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "description": description}


def _spread(description: str, names: tuple[str, ...]) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "properties": {name: _number(name, low=0) for name in names},
    }


_PROBE = {
    "type": "object",
    "properties": {
        "target_qps": _number("the rate this probe issued at", low=0),
        "achieved_qps": _number("queries issued per second, as measured", low=0),
        "queries": _integer("queries issued"),
        "duration_s": _number("how long the probe ran", low=0),
        "p50_ms": _number("median latency", nullable=True),
        "p90_ms": _number("90th percentile latency", nullable=True),
        "p99_ms": _number("99th percentile latency", nullable=True),
        "percentile_ms": _number("the searched percentile's latency", nullable=True),
        "certified": {"type": "boolean", "description": "enough queries for the early-stopping certificate"},
        "passed": {"type": "boolean", "description": "the percentile met the latency bound"},
        "reason": {"type": "string", "description": "why it passed or failed"},
    },
}

_LOAD_SECTION: dict[str, Any] = {
    "type": "object",
    "description": "how the queries were issued and what the point certifies (docs/load.md); absent "
    "when the runtime did not report it",
    "properties": {
        "certified": {
            "type": "object",
            "description": "the early-stopping certificate of the point's percentile (every scenario)",
            "properties": {
                "percentile": _number("the percentile certified, e.g. 99"),
                "confidence": _number("the certificate's confidence, e.g. 0.99"),
                "ok": {"type": "boolean", "description": "the percentile is certified"},
                "queries": _integer("queries the certificate counts"),
                "queries_needed": _integer("more queries it would need; 0 when ok"),
                "estimate_ms": _number("the certified percentile's latency", nullable=True),
                "bound_ms": _number("the latency bound it was held to", nullable=True),
                "over_bound": {"type": "integer", "nullable": True, "description": "queries over the bound"},
            },
        },
        "target_qps": _number(
            "server: the rate asked for; multi_stream: 1000 / interval_ms (null back to back)", nullable=True
        ),
        "scheduled_qps": _number("the rate of the drawn schedule"),
        "achieved_qps": _number("queries issued per second, as measured"),
        "completed_qps": _number("queries completed per second"),
        "issue_lateness_ms": _spread(
            "how late queries were issued against their schedule", ("mean", "p50", "p99", "max")
        ),
        "queries": _integer("queries issued"),
        "late": _integer("queries issued late beyond the generator's tolerance"),
        "queued": _integer("queries that waited for a free slot (max_in_flight)"),
        "unfinished": _integer("queries not finished when the point ended"),
        "max_in_flight": _integer("queries the model ran at once"),
        "seed": _integer("the arrival times' seed"),
        "in_flight": {
            "type": "object",
            "description": (
                "samples in the system: as arrivals found them, as a time average, by Little's law "
                "(rate × latency), and the time average over Little's law"
            ),
            "properties": {
                name: _number(name) for name in ("observed", "time_average", "littles_law", "ratio")
            },
        },
        "generator": {
            "type": "object",
            "description": "the issuing process: its scheduling priority and its share of one CPU",
            "properties": {
                "process": {"type": "string"},
                "priority": {"type": "string"},
                "cpu_share": _number("the issuing process's CPU time over its wall time"),
                "idle_start_ms": _spread(
                    "queries that found the model idle: how long after their due time they started",
                    ("p50", "p99", "max"),
                ),
            },
        },
        "service_ms": _spread("the model's time per query, queueing left out", ("median", "p90", "p99")),
        "serving_gap_ms": _spread(
            "queries that waited for a model thread: from the completion that freed it to their start",
            ("p50", "p99", "max"),
        ),
        "samples_per_query": _integer("multi_stream: samples in each query"),
        "back_to_back": {
            "type": "boolean",
            "description": "multi_stream: each query issued when the previous one completed (no interval)",
        },
        "interval_ms": _number(
            "multi_stream: the interval between queries; null back to back", nullable=True
        ),
        "overruns": _integer(
            "multi_stream: queries still running when the next was due (absent back to back)"
        ),
        "search": {
            "type": "object",
            "description": "server with find_max_qps: the search for the highest QPS meeting the bound",
            "properties": {
                "latency_bound_ms": _number("the bound"),
                "percentile": _number("the percentile held to it"),
                "max_qps": _number("the answer; null when no probe passed", nullable=True),
                "probes": {"type": "array", "items": _PROBE},
            },
        },
    },
}

MEASUREMENT_PROPERTIES: dict[str, Any] = {
    "scenario": {
        "type": "string",
        "description": "single_stream, offline, server, multi_stream or generate",
    },
    "batch_size": {"type": "integer", "minimum": 1},
    "latency_ms": {"type": "object", "description": "the latency summary: count, mean, median, p90, ..."},
    "throughput": _number("samples per second (generate: successful requests per second)"),
    "validity": {
        "type": "object",
        "properties": {
            "valid": {"type": "boolean"},
            "reasons": {"type": "array", "items": {"type": "string"}},
        },
    },
    "load": _LOAD_SECTION,
    "generation": GENERATION_SECTION,
}
