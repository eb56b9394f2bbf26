"""The MongoDB aggregation pipelines the store runs where the data is: the comparison table (the latest
succeeded evaluation per key, how many share it, and the table's order, computed by the server) and the
layer breakdown's totals (history series are in series.py); and their output formatted as
records.compare_row. Measurements are read through their schema-2 summary fields where
present, and through latency_ms and validity where not (measurement_figures).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mlscope.store.mongo.codec import decode, micros, to_datetime
from mlscope.store.records import COMPARE_COLUMNS, CompareFilter, compare_row

__all__ = [
    "compare_pipeline",
    "created_between",
    "layer_totals_pipeline",
    "measurement_figures",
    "model_total_pipeline",
    "pipeline_row",
]


def created_between(since: datetime | None, until: datetime | None) -> dict[str, Any]:
    """The match on created_at for [since, until) ({} when neither bounds it)."""
    created: dict[str, Any] = {}
    if since is not None:
        created["$gte"] = micros(since)
    if until is not None:
        created["$lt"] = micros(until)
    return {"created_at": created} if created else {}


def compare_pipeline(where: CompareFilter) -> list[dict[str, Any]]:
    """records.compare_rows as one aggregation over `evaluations`, its output rows for `pipeline_row`."""
    match: dict[str, Any] = {"status": "succeeded"}
    for name, values in (
        ("_id", where.ids),
        ("model_name", where.models),
        ("framework_name", where.frameworks),
        ("system_id", where.system_ids),
    ):
        if values:
            match[name] = {"$in": list(values)}
    match.update(created_between(where.since, where.until))
    measured: dict[str, Any] = {}
    if where.scenarios:
        measured["measurements.scenario"] = {"$in": list(where.scenarios)}
    if where.batch_sizes:
        measured["measurements.batch_size"] = {"$in": list(where.batch_sizes)}
    key = {
        "model": "$model_name",
        "framework": "$framework_name",
        "system_id": "$system_id",
        "device": "$device",
        "scenario": "$scenario",
        "batch_size": "$batch_size",
        "workload_key": "$workload_key",
    }
    latest = {
        "evaluation_id": "$_id",
        "finished_at": "$finished_at",
        "framework_version": "$framework_version",
        "display_name": "$display_name",
        **{name: f"${name}" for name in _COMPARED},
        **{name: f"${name}" for name in _SECTION_FIGURES},
        **{name: f"${name}" for name in _EXTRA_FIGURES},
    }
    median = "$latest.median_ms"
    pipeline: list[dict[str, Any]] = [
        {"$match": match},
        {"$unwind": "$measurements"},
        *([{"$match": measured}] if measured else []),
        # Only what a row shows goes on: the figures, not the whole latency summary.
        {
            "$project": {
                **dict.fromkeys(_EVALUATION_FIELDS, 1),
                **measurement_figures("$measurements"),
                # Schema version 3's fields (null, not missing, as below).
                "workload_key": {"$ifNull": ["$measurements.workload_key", None]},
                "display_name": {"$ifNull": ["$measurements.display_name", None]},
                **_SECTION_FIGURES,
                # Null, not missing, as _SECTION_FIGURES (mongomock builds `latest` of them).
                **{name: {"$ifNull": [path, None]} for name, path in _EXTRA_FIGURES.items()},
            }
        },
        # Latest first: compare_rows keeps the greatest (finished_at, evaluation id) of each key.
        {"$sort": {"finished_at": -1, "_id": -1}},
        {"$group": {"_id": key, "latest": {"$first": latest}, "runs": {"$sum": 1}}},
        {
            "$project": {
                "_id": 0,
                **{name: f"$_id.{name}" for name in key},
                "latest": 1,
                "runs": 1,
                "display_name": "$latest.display_name",
                # compare_rows sorts a missing median last; MongoDB sorts null first.
                "no_median": {"$cond": [{"$eq": [{"$ifNull": [median, None]}, None]}, 1, 0]},
                "median": median,
            }
        },
        {
            "$lookup": {
                "from": "systems",
                "localField": "system_id",
                "foreignField": "_id",
                "as": "system",
            }
        },
        {
            "$sort": {
                "model": 1,
                "display_name": 1,
                "scenario": 1,
                "batch_size": 1,
                "no_median": 1,
                "median": 1,
                "framework": 1,
                "system_id": 1,
                "device": 1,
                "workload_key": 1,
            }
        },
    ]
    return pipeline


# The evaluation's fields a comparison row reads, and the figures `measurement_figures` computes.
_EVALUATION_FIELDS = (
    "model_name",
    "framework_name",
    "framework_version",
    "system_id",
    "device",
    "finished_at",
)
# The comparison table's columns a measurement gives (scenario … reasons), read from the table itself,
# but for the figures of its load and cost sections (_EXTRA_FIGURES).
_EXTRA_FIGURES = {
    "target_qps": "$measurements.extra.load.target_qps",
    "achieved_qps": "$measurements.extra.load.achieved_qps",
    "max_qps": "$measurements.extra.load.search.max_qps",
    "price_per_hour": "$measurements.extra.cost.price_per_hour",
    "cost_per_1k": "$measurements.extra.cost.per_1k_inferences",
    "cost_ci": "$measurements.extra.cost.ci",
}
# compare_row splits the cost interval (cost_ci) into these two.
_SPLIT_BY_ROW = ("cost_ci_low", "cost_ci_high")
_COMPARED = tuple(
    name
    for name in COMPARE_COLUMNS[COMPARE_COLUMNS.index("scenario") : COMPARE_COLUMNS.index("reasons") + 1]
    if name not in _EXTRA_FIGURES and name not in _SPLIT_BY_ROW
)
# What a row shows of the evaluation's result sections (records.sections), read by the server with the
# rest of the row; compare_row turns a different parity into an invalid row. Null, not missing, when
# an evaluation has no such section: the row's `latest` object is built of them, and mongomock cannot
# build one from a missing field.
_SECTION_FIGURES = {
    name: {"$ifNull": [path, None]}
    for name, path in (
        ("top1", "$accuracy.top1"),
        ("top5", "$accuracy.top5"),
        ("parity_verdict", "$parity.verdict"),
        ("parity_against", "$parity.against"),
    )
}


def _summary(measurement: str, field: str, fallback: Any) -> dict[str, Any]:
    # Measurements written since schema 2 carry their summary in fields of their own; older ones only
    # in latency_ms and validity.
    return {"$ifNull": [f"{measurement}.{field}", fallback]}


def _ci(measurement: str, index: int) -> dict[str, Any]:
    ci = f"{measurement}.latency_ms.median_ci"
    return {"$cond": [{"$isArray": ci}, {"$arrayElemAt": [ci, index]}, None]}


def measurement_figures(measurement: str) -> dict[str, Any]:
    """The figures comparisons and history series read of the measurement at the field path
    `measurement` ("$measurements"): the schema-2 summary fields where present, else the same values
    from latency_ms and validity."""
    latency = f"{measurement}.latency_ms"
    return {
        "scenario": f"{measurement}.scenario",
        "batch_size": f"{measurement}.batch_size",
        "median_ms": _summary(measurement, "median_ms", f"{latency}.median"),
        "p90_ms": _summary(measurement, "p90_ms", f"{latency}.p90"),
        "p99_ms": _summary(measurement, "p99_ms", f"{latency}.p99"),
        "ci_low_ms": _summary(measurement, "ci_low_ms", _ci(measurement, 0)),
        "ci_high_ms": _summary(measurement, "ci_high_ms", _ci(measurement, 1)),
        "throughput": f"{measurement}.throughput",
        "count": _summary(measurement, "sample_count", f"{latency}.count"),
        "valid": _summary(measurement, "valid", f"{measurement}.validity.valid"),
        "reasons": f"{measurement}.validity.reasons",
    }


def pipeline_row(found: Mapping[str, Any]) -> dict[str, Any]:
    """One row of the comparison table from the pipeline's output, formatted as compare_rows does."""
    latest = found["latest"]
    finished_at = to_datetime(latest.get("finished_at"))
    return compare_row(
        model=found["model"],
        display_name=found.get("display_name") or found["model"],
        workload_key=found["workload_key"],
        framework=found["framework"],
        framework_version=latest.get("framework_version"),
        system_id=found.get("system_id"),
        system=decode(found["system"][0]["data"]) if found["system"] else {},
        device=found["device"],
        measurement={
            "scenario": found["scenario"],
            "batch_size": found["batch_size"],
            "latency_ms": {
                "median": latest.get("median_ms"),
                "p90": latest.get("p90_ms"),
                "p99": latest.get("p99_ms"),
                "median_ci": [latest.get("ci_low_ms"), latest.get("ci_high_ms")],
                "count": latest.get("count"),
            },
            "throughput": latest.get("throughput"),
            "validity": {"valid": latest.get("valid"), "reasons": decode(latest.get("reasons"))},
            "load": {
                "target_qps": latest.get("target_qps"),
                "achieved_qps": latest.get("achieved_qps"),
                "search": {"max_qps": latest.get("max_qps")},
            },
            "cost": {
                "price_per_hour": latest.get("price_per_hour"),
                "per_1k_inferences": latest.get("cost_per_1k"),
                "ci": decode(latest.get("cost_ci")),
            },
        },
        runs=found["runs"],
        evaluation_id=latest["evaluation_id"],
        finished_at=None if finished_at is None else finished_at.isoformat(),
        accuracy={"top1": latest.get("top1"), "top5": latest.get("top5")},
        parity={"verdict": latest.get("parity_verdict"), "against": latest.get("parity_against")},
    )


def _duration() -> dict[str, Any]:
    return {"$subtract": ["$end_ns", "$start_ns"]}


def layer_totals_pipeline(evaluation_id: str, *, level: str, group_by: str) -> list[dict[str, Any]]:
    """The spans of one level of an evaluation grouped as span_group_key groups them: per group its
    key (`_id`), `calls` and `total_ns`."""
    key: Any = "$name" if group_by == "name" else {"$ifNull": ["$attributes.layer_type", "$name"]}
    return [
        {"$match": {"evaluation": evaluation_id, "level": level}},
        {"$group": {"_id": key, "calls": {"$sum": 1}, "total_ns": {"$sum": _duration()}}},
    ]


def model_total_pipeline(evaluation_id: str) -> list[dict[str, Any]]:
    """An evaluation's MODEL-level spans as one group: how many (`spans`) and their summed duration
    (`total_ns`)."""
    return [
        {"$match": {"evaluation": evaluation_id, "level": "MODEL"}},
        {"$group": {"_id": None, "spans": {"$sum": 1}, "total_ns": {"$sum": _duration()}}},
    ]
