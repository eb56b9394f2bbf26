"""What a measurement costs: a system's price per hour turned into the `cost` section.

One formula, used where a price is recorded with a result (the evaluation pipeline, from
MLSCOPE_PRICE_PER_HOUR) and where one is given at read time (`--price-per-hour` on `results show`
and `compare`), so both agree to the last digit:

    per_1k_inferences = price_per_hour / 3600 × 1000 / throughput      (an inference is one sample)

The interval is carried through from the measurement's median interval: the cost of an inference is
proportional to the time it takes, so the point is scaled by the median interval's bounds relative
to the median, [point × low / median, point × high / median]. That holds for the back-to-back
scenarios (single_stream, offline), whose throughput the latency sets; under a load generator
(server, multi_stream) the throughput is the rate issued, not a latency, and `ci` is null.
Prices are currency-neutral: the section is in whatever currency the price was given in.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from mlscope.contract.errors import UserError

__all__ = ["CLOSED_LOOP_SCENARIOS", "check_price", "cost_section"]

# Scenarios whose throughput follows from their latencies (the interval carries through).
CLOSED_LOOP_SCENARIOS = ("single_stream", "offline")
_SECONDS_PER_HOUR = 3600.0
_PER = 1000.0


def check_price(value: Any, field: str, label: str | None = None) -> float:
    """`value` as a price per hour: a finite number > 0 (a string holding one is read as one).

    Args:
        field: the setting or option it came from ("price_per_hour", "price_per_hour[SYSTEM]").
        label: how the message names it, when not as `field` ("setting price_per_hour",
            "--price-per-hour").

    Raises:
        UserError: naming `field` when it is not a positive number.
    """
    number: float | None = None
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value)
    if number is None or not math.isfinite(number) or number <= 0:
        raise UserError(
            f"{label or field}={value!r} is not a price: expected a positive number per hour (e.g. 0.17)",
            field=field,
        )
    return number


def _scaled_interval(point: float, latency_ms: Mapping[str, Any]) -> list[float] | None:
    median, ci = latency_ms.get("median"), latency_ms.get("median_ci")
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or None in ci or not median:
        return None
    return [point * float(ci[0]) / float(median), point * float(ci[1]) / float(median)]


def cost_section(measurement: Mapping[str, Any], price_per_hour: float) -> dict[str, Any] | None:
    """The `cost` section of a measurement at `price_per_hour`: {"per_1k_inferences",
    "per_1m_tokens", "price_per_hour", "ci"}; `ci` is the interval of per_1k_inferences (see the
    module's docstring), `per_1m_tokens` null until a result reports tokens.

    Args:
        measurement: {"scenario", "throughput", "latency_ms": {"median", "median_ci"}, ...}.
        price_per_hour: a checked price (`check_price`).

    Returns:
        The section, or None when the measurement has no positive throughput to price.
    """
    throughput = measurement.get("throughput")
    if not isinstance(throughput, (int, float)) or isinstance(throughput, bool) or not throughput > 0:
        return None
    point = price_per_hour / _SECONDS_PER_HOUR * _PER / float(throughput)
    closed_loop = measurement.get("scenario") in CLOSED_LOOP_SCENARIOS
    ci = _scaled_interval(point, measurement.get("latency_ms") or {}) if closed_loop else None
    return {"per_1k_inferences": point, "per_1m_tokens": None, "price_per_hour": price_per_hour, "ci": ci}
