"""The MongoDB aggregation pipelines of history series, run by the server: one series' latest points
(`history_pipeline`), and the series a filter selects, each counted by one $group
(`series_keys_pipeline`); and their output formatted as records.history's points and summaries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mlscope.store.mongo.codec import to_datetime
from mlscope.store.mongo.pipelines import created_between, measurement_figures
from mlscope.store.records.history import HistoryFilter, SeriesFilter, history_point, series_summary

__all__ = [
    "history_pipeline",
    "history_row",
    "series_keys_pipeline",
    "series_keys_row",
    "stacks_of",
    "stacks_pipeline",
]

# records.history.SERIES_KEY_FIELDS as fields of an evaluation document, its measurement unwound.
_EVALUATION_KEYS = {
    "model": "model_name",
    "manifest_sha256": "manifest_sha256",
    "framework": "framework_name",
    "framework_version": "framework_version",
    "machine_id": "machine_id",
    "stack_id": "stack_id",
    "device": "device",
}
# The (machine id, stack id) pairs a filter's system id was measured on (Store reads them first).
Stacks = Sequence[tuple[str | None, str | None]]


def stacks_pipeline(system_id: str) -> list[dict[str, Any]]:
    """The (machine id, stack id) pairs of the evaluations of system `system_id`, for `stacks_of`."""
    return [
        {"$match": {"system_id": system_id}},
        {"$group": {"_id": {"machine_id": "$machine_id", "stack_id": "$stack_id"}}},
    ]


def stacks_of(found: Sequence[Mapping[str, Any]]) -> list[tuple[str | None, str | None]]:
    """The pairs of the stacks pipeline's output."""
    return [(row["_id"].get("machine_id"), row["_id"].get("stack_id")) for row in found]


_MEASUREMENT_KEYS = {"scenario": "measurements.scenario", "batch_size": "measurements.batch_size"}


def _evaluation_match(where: SeriesFilter, stacks: Stacks | None) -> dict[str, Any]:
    """The succeeded evaluations `where` selects, by the key values it gives, on `stacks` (those of
    its system id) and in its time bounds."""
    match: dict[str, Any] = {"status": "succeeded"}
    for name, field in _EVALUATION_KEYS.items():
        if getattr(where, name) is not None:
            match[field] = getattr(where, name)
    if where.system_id is not None:
        pairs = [{"machine_id": machine, "stack_id": stack} for machine, stack in stacks or ()]
        match["$or"] = pairs or [{"_id": {"$in": []}}]
    match.update(created_between(where.since, where.until))
    return match


def _measurement_match(where: SeriesFilter) -> dict[str, Any]:
    """The measurements `where` selects, by scenario and batch size, once unwound."""
    return {
        field: getattr(where, name)
        for name, field in _MEASUREMENT_KEYS.items()
        if getattr(where, name) is not None
    }


def history_pipeline(
    where: HistoryFilter, *, limit: int, stacks: Stacks | None = None
) -> list[dict[str, Any]]:
    """The latest `limit` points of a history series over `evaluations`, latest first, for
    `history_row`; `stacks` are the filter's system id's (`stacks_pipeline`)."""
    match = {
        **_evaluation_match(where, stacks),
        "measurements": {"$elemMatch": {"scenario": where.scenario, "batch_size": where.batch_size}},
    }
    return [
        {"$match": match},
        {"$sort": {"created_at": -1, "_id": -1}},
        {"$limit": limit},
        {"$unwind": "$measurements"},
        {"$match": _measurement_match(where)},
        {
            "$project": {
                "created_at": 1,
                "system_id": 1,
                "machine_id": 1,
                "stack_id": 1,
                "device": 1,
                "manifest_sha256": 1,
                "framework_version": 1,
                "workload_key": "$measurements.workload_key",
                **measurement_figures("$measurements"),
            }
        },
    ]


def history_row(found: Mapping[str, Any]) -> dict[str, Any]:
    """One point of a series from the history pipeline's output."""
    created_at = to_datetime(found["created_at"])
    assert created_at is not None
    return history_point(
        evaluation_id=found["_id"],
        created_at=created_at,
        system_id=found.get("system_id"),
        device=found["device"],
        manifest_sha256=found.get("manifest_sha256"),
        framework_version=found.get("framework_version"),
        median_ms=found.get("median_ms"),
        ci_low_ms=found.get("ci_low_ms"),
        ci_high_ms=found.get("ci_high_ms"),
        p99_ms=found.get("p99_ms"),
        throughput=found.get("throughput"),
        valid=found.get("valid"),
        workload_key=found.get("workload_key"),
        machine_id=found.get("machine_id"),
        stack_id=found.get("stack_id"),
    )


def series_keys_pipeline(where: SeriesFilter, stacks: Stacks | None = None) -> list[dict[str, Any]]:
    """Per series with points `where` selects: its key (`_id`), how many (`points`), the first and
    last created_at and its greatest system id, for `series_keys_row`; `stacks` as history_pipeline's."""
    measured = _measurement_match(where)
    key = {
        **{name: {"$ifNull": [f"${field}", None]} for name, field in _EVALUATION_KEYS.items()},
        **{name: f"${field}" for name, field in _MEASUREMENT_KEYS.items()},
    }
    return [
        {"$match": _evaluation_match(where, stacks)},
        {"$unwind": "$measurements"},
        *([{"$match": measured}] if measured else []),
        {
            "$group": {
                "_id": key,
                "points": {"$sum": 1},
                "first_at": {"$min": "$created_at"},
                "last_at": {"$max": "$created_at"},
                "system_id": {"$max": "$system_id"},
            }
        },
    ]


def series_keys_row(found: Mapping[str, Any]) -> dict[str, Any]:
    """One series from the series pipeline's output, as records.history.series_summary."""
    first_at, last_at = to_datetime(found["first_at"]), to_datetime(found["last_at"])
    assert first_at is not None and last_at is not None
    key = found["_id"]
    return series_summary(
        tuple(key.get(name) for name in (*_EVALUATION_KEYS, *_MEASUREMENT_KEYS)),
        points=found["points"],
        first_at=first_at,
        last_at=last_at,
        system_id=found.get("system_id"),
    )
