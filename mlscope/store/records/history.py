"""History series: how one model on one framework performed over time at one scenario and batch size.
The filter a series is drawn with, its check, the bounds of its length, and one point in the public
shape every backend returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from mlscope.contract.errors import UserError

from .values import check_aware, check_int, check_optional_text, check_text

__all__ = [
    "DEFAULT_HISTORY_POINTS",
    "HISTORY_FIELDS",
    "MAX_HISTORY_POINTS",
    "HistoryFilter",
    "check_history",
    "history_point",
]

DEFAULT_HISTORY_POINTS = 1000
MAX_HISTORY_POINTS = 10_000
# The keys of a point, in the order every backend returns them.
HISTORY_FIELDS: tuple[str, ...] = (
    "evaluation_id",
    "created_at",
    "system_id",
    "device",
    "median_ms",
    "ci_low_ms",
    "ci_high_ms",
    "p99_ms",
    "throughput",
    "valid",
)


@dataclass(frozen=True)
class HistoryFilter:
    """Which succeeded evaluations a series is drawn from; None means "any". `since` is inclusive,
    `until` exclusive, both on created_at."""

    model: str
    framework: str
    scenario: str
    batch_size: int
    system_id: str | None = None
    device: str | None = None
    since: datetime | None = None
    until: datetime | None = None


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
        system_id=check_optional_text(system_id, "system_id"),
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
    median_ms: float | None,
    ci_low_ms: float | None,
    ci_high_ms: float | None,
    p99_ms: float | None,
    throughput: float | None,
    valid: bool | None,
) -> dict[str, Any]:
    """One point of a series, its keys in HISTORY_FIELDS order, created_at as UTC ISO 8601."""
    return {
        "evaluation_id": evaluation_id,
        "created_at": created_at.astimezone(timezone.utc).isoformat(),
        "system_id": system_id,
        "device": device,
        "median_ms": median_ms,
        "ci_low_ms": ci_low_ms,
        "ci_high_ms": ci_high_ms,
        "p99_ms": p99_ms,
        "throughput": throughput,
        "valid": valid,
    }
