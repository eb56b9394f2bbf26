"""History series: how one model performed over time on one framework, machine, software stack and
device, at one scenario and batch size. The filters series are drawn and listed with, their checks,
the bounds of a series' length, one point in the public shape every backend returns, and one series
key.

A series is keyed by (model name + manifest hash, framework name + version, machine + stack + device,
scenario, batch size): a new manifest or framework version starts a new series, so that a change
point marks a change nobody recorded, not one they did. The machine and stack ids
(contract.system_ids), not the system id: one machine measured by `mlscope run`, by a farm worker or
in a container is one series, though each gives it another system id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.series import DEFAULT_HISTORY_POINTS, MAX_HISTORY_POINTS, SERIES_KEY_FIELDS
from mlscope.store.records.values import check_aware, check_int, check_optional_text, check_text

__all__ = [
    "DEFAULT_HISTORY_POINTS",
    "HISTORY_FIELDS",
    "MAX_HISTORY_POINTS",
    "SERIES_KEY_FIELDS",
    "HistoryFilter",
    "SeriesFilter",
    "check_history",
    "check_series_filter",
    "history_point",
    "series_order",
    "series_summary",
]

# The keys of a point, in the order every backend returns them.
HISTORY_FIELDS: tuple[str, ...] = (
    "evaluation_id",
    "created_at",
    "system_id",
    "device",
    "manifest_sha256",
    "framework_version",
    "median_ms",
    "ci_low_ms",
    "ci_high_ms",
    "p99_ms",
    "throughput",
    "valid",
    "workload_key",
    "machine_id",
    "stack_id",
)


@dataclass(frozen=True)
class SeriesFilter:
    """Which succeeded measurements series are drawn from; None means "any". `since` is inclusive,
    `until` exclusive, both on created_at. The field names are SERIES_KEY_FIELDS', so that one
    translation to a backend's conditions serves this and HistoryFilter. `system_id`, not a key field,
    selects the series of that system's machine and stack (every system id they were measured under)."""

    model: str | None = None
    framework: str | None = None
    manifest_sha256: str | None = None
    framework_version: str | None = None
    machine_id: str | None = None
    stack_id: str | None = None
    system_id: str | None = None
    device: str | None = None
    scenario: str | None = None
    batch_size: int | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class HistoryFilter(SeriesFilter):
    """The conditions of one history series: a SeriesFilter whose model, framework, scenario and batch
    size are given."""

    model: str = ""
    framework: str = ""
    scenario: str = "single_stream"
    batch_size: int = 1


def check_series_filter(**conditions: Any) -> SeriesFilter:
    """SeriesFilter's conditions (its fields by name, each None or a value), checked.

    Raises:
        UserError: naming the invalid argument.
    """
    texts = {
        name: check_optional_text(conditions.get(name), name)
        for name in (*SERIES_KEY_FIELDS, "system_id")
        if name != "batch_size"
    }
    batch_size = conditions.get("batch_size")
    return SeriesFilter(
        **texts,
        batch_size=None if batch_size is None else check_int("batch_size", batch_size, 1),
        since=check_aware(conditions.get("since"), "since"),
        until=check_aware(conditions.get("until"), "until"),
    )


def check_history(
    *,
    model: Any,
    framework: Any,
    system_id: Any,
    device: Any,
    scenario: Any,
    batch_size: Any,
    since: Any,
    until: Any,
    limit: Any,
    manifest_sha256: Any = None,
    framework_version: Any = None,
    machine_id: Any = None,
    stack_id: Any = None,
) -> HistoryFilter:
    """The conditions of a history series, checked, with its length checked too.

    Raises:
        UserError: naming the invalid argument.
    """
    checked = HistoryFilter(
        model=check_text(model, "model"),
        framework=check_text(framework, "framework"),
        scenario=check_text(scenario, "scenario"),
        batch_size=check_int("batch_size", batch_size, 1),
        manifest_sha256=check_optional_text(manifest_sha256, "manifest_sha256"),
        framework_version=check_optional_text(framework_version, "framework_version"),
        system_id=check_optional_text(system_id, "system_id"),
        machine_id=check_optional_text(machine_id, "machine_id"),
        stack_id=check_optional_text(stack_id, "stack_id"),
        device=check_optional_text(device, "device"),
        since=check_aware(since, "since"),
        until=check_aware(until, "until"),
    )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_HISTORY_POINTS:
        raise UserError(f"limit={limit!r} must be an integer from 1 to {MAX_HISTORY_POINTS}", field="limit")
    return checked


def history_point(
    *,
    evaluation_id: str,
    created_at: datetime,
    system_id: str | None,
    device: str,
    manifest_sha256: str | None,
    framework_version: str | None,
    median_ms: float | None,
    ci_low_ms: float | None,
    ci_high_ms: float | None,
    p99_ms: float | None,
    throughput: float | None,
    valid: bool | None,
    workload_key: str | None = None,
    machine_id: str | None = None,
    stack_id: str | None = None,
) -> dict[str, Any]:
    """One point of a series, its keys in HISTORY_FIELDS order, created_at as UTC ISO 8601.
    `workload_key` is the measurement's (contract.workload.workload_key): the points of one series
    with different keys measured different workloads. `machine_id` and `stack_id` are the evaluation's
    (contract.system_ids); its `system_id` may differ from point to point of one series."""
    return {
        "evaluation_id": evaluation_id,
        "created_at": created_at.astimezone(timezone.utc).isoformat(),
        "system_id": system_id,
        "device": device,
        "manifest_sha256": manifest_sha256,
        "framework_version": framework_version,
        "median_ms": median_ms,
        "ci_low_ms": ci_low_ms,
        "ci_high_ms": ci_high_ms,
        "p99_ms": p99_ms,
        "throughput": throughput,
        "valid": valid,
        "workload_key": workload_key,
        "machine_id": machine_id,
        "stack_id": stack_id,
    }


def series_summary(
    key: tuple[Any, ...], *, points: int, first_at: datetime, last_at: datetime, system_id: str | None = None
) -> dict[str, Any]:
    """One series as `Store.history_series` lists it: its key (values in SERIES_KEY_FIELDS order), a
    system id it was measured under (the greatest: `system_id` selects the series again), how many
    points it has among those selected, and the first and last one's created_at (UTC ISO 8601)."""
    return {
        **dict(zip(SERIES_KEY_FIELDS, key, strict=True)),
        "system_id": system_id,
        "points": points,
        "first_at": first_at.astimezone(timezone.utc).isoformat(),
        "last_at": last_at.astimezone(timezone.utc).isoformat(),
    }


def series_order(series: dict[str, Any]) -> tuple[tuple[bool, Any], ...]:
    """The sort key of a listed series: its key's values in SERIES_KEY_FIELDS order, None first,
    strings by code point (as Python compares them, whatever the database's collation)."""
    return tuple((series[name] is not None, series[name] or "") for name in SERIES_KEY_FIELDS)
