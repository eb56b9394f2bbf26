"""The MongoDB aggregation pipelines the store runs where the data is: the comparison table (the latest
succeeded evaluation per key, how many share it, and the table's order, computed by the server) and the
layer breakdown's totals; and the comparison pipeline's output formatted as records.compare_row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..records import CompareFilter, compare_row
from .codec import decode, micros, to_datetime

__all__ = ["compare_pipeline", "layer_totals_pipeline", "model_total_pipeline", "pipeline_row"]


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
    created: dict[str, Any] = {}
    if where.since is not None:
        created["$gte"] = micros(where.since)
    if where.until is not None:
        created["$lt"] = micros(where.until)
    if created:
        match["created_at"] = created
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
        "scenario": "$measurements.scenario",
        "batch_size": "$measurements.batch_size",
    }
    latest = {
        "evaluation_id": "$_id",
        "finished_at": "$finished_at",
        "framework_version": "$framework_version",
        "measurement": "$measurements",
    }
    median = "$latest.measurement.latency_ms.median"
    pipeline: list[dict[str, Any]] = [
        {"$match": match},
        {"$unwind": "$measurements"},
        *([{"$match": measured}] if measured else []),
        # Latest first: compare_rows keeps the greatest (finished_at, evaluation id) of each key.
        {"$sort": {"finished_at": -1, "_id": -1}},
        {"$group": {"_id": key, "latest": {"$first": latest}, "runs": {"$sum": 1}}},
        {
            "$project": {
                "_id": 0,
                **{name: f"$_id.{name}" for name in key},
                "latest": 1,
                "runs": 1,
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
                "scenario": 1,
                "batch_size": 1,
                "no_median": 1,
                "median": 1,
                "framework": 1,
                "system_id": 1,
                "device": 1,
            }
        },
    ]
    return pipeline


def pipeline_row(found: Mapping[str, Any]) -> dict[str, Any]:
    """One row of the comparison table from the pipeline's output, formatted as compare_rows does."""
    latest = found["latest"]
    m = latest["measurement"]
    finished_at = to_datetime(latest.get("finished_at"))
    return compare_row(
        model=found["model"],
        framework=found["framework"],
        framework_version=latest.get("framework_version"),
        system_id=found.get("system_id"),
        system=decode(found["system"][0]["data"]) if found["system"] else {},
        device=found["device"],
        measurement={
            "scenario": found["scenario"],
            "batch_size": found["batch_size"],
            "latency_ms": decode(m.get("latency_ms") or {}),
            "throughput": m.get("throughput"),
            "validity": decode(m.get("validity") or {}),
        },
        runs=found["runs"],
        evaluation_id=latest["evaluation_id"],
        finished_at=None if finished_at is None else finished_at.isoformat(),
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
