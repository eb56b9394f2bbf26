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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from mlscope.contract.errors import UserError

# A result, typed or not: pricing it keeps its type.
R = TypeVar("R", bound=Mapping[str, Any])

__all__ = [
    "CLOSED_LOOP_SCENARIOS",
    "PRICE_OPTION",
    "ReadTimePrices",
    "check_price",
    "cost_section",
    "parse_prices",
]

# Scenarios whose throughput follows from their latencies (the interval carries through).
CLOSED_LOOP_SCENARIOS = ("single_stream", "offline")
_SECONDS_PER_HOUR = 3600.0
_PER = 1000.0
# The CLI's option for prices given at read time (`results show`, `compare`).
PRICE_OPTION = "--price-per-hour"


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
    # The ratio first: a bound equal to the median scales the point by exactly 1, and one below (above)
    # it by a ratio below (above) 1, so the interval holds the point to the last digit.
    return [point * (float(ci[0]) / float(median)), point * (float(ci[1]) / float(median))]


def cost_section(measurement: Mapping[str, Any], price_per_hour: float) -> dict[str, Any] | None:
    """The `cost` section of a measurement at `price_per_hour`: {"per_1k_inferences",
    "per_1m_tokens", "price_per_hour", "ci"}; `ci` is the interval of per_1k_inferences (see the
    module's docstring), `per_1m_tokens` the price of a million output tokens where the measurement
    generated tokens (the generate scenario), else null.

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
    tokens_per_s = (measurement.get("generation") or {}).get("output_tokens_per_s")
    per_1m_tokens = None
    if isinstance(tokens_per_s, (int, float)) and not isinstance(tokens_per_s, bool) and tokens_per_s > 0:
        # A generated token's price: the machine's time per output token (a request is an inference).
        per_1m_tokens = price_per_hour / _SECONDS_PER_HOUR * 1_000_000 / float(tokens_per_s)
    return {
        "per_1k_inferences": point,
        "per_1m_tokens": per_1m_tokens,
        "price_per_hour": price_per_hour,
        "ci": ci,
    }


class ReadTimePrices:
    """Prices given at read time: one for every system ("0.17"), or per system ("SYSTEM=0.17", where
    SYSTEM is an agent id, an instance type, a hostname or a system id prefix). They price only what
    was recorded without a price: a recorded price is the one the result was measured under."""

    def __init__(self, default: float | None, by_system: Mapping[str, float]) -> None:
        self.default = default
        self.by_system = dict(by_system)

    def __bool__(self) -> bool:
        return self.default is not None or bool(self.by_system)

    def price_for(self, system: Mapping[str, Any]) -> float | None:
        """The price that applies to a system (or a comparison row's system columns)."""
        names = (
            system.get("agent_id") or (system.get("agent") or {}).get("id"),
            system.get("instance_type"),
            system.get("hostname"),
        )
        system_id = system.get("system_id") or system.get("id") or ""
        for key, price in self.by_system.items():
            if key in names or (system_id and system_id.startswith(key)):
                return price
        return self.default

    def price_result(self, result: R) -> R:
        """The result with a cost section on each measurement that has none and can be priced."""
        price = self.price_for(result.get("system") or {})
        if price is None:
            return result
        measurements = [
            _priced(m, price) if not m.get("cost") else m for m in result.get("measurements") or []
        ]
        return cast(R, {**result, "measurements": measurements})

    def price_rows(self, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Comparison rows, those without a cost priced from their throughput and latency interval."""
        return [
            _priced_row(row, price)
            if row.get("cost_per_1k") is None and (price := self.price_for(row)) is not None
            else row
            for row in rows
        ]


def _priced_row(row: dict[str, Any], price: float) -> dict[str, Any]:
    """A comparison row with the cost columns of its figures at `price` (unchanged when it has no
    throughput to price)."""
    measurement = {
        "scenario": row["scenario"],
        "throughput": row.get("throughput"),
        "latency_ms": {
            "median": row.get("median_ms"),
            "median_ci": [row.get("ci_low_ms"), row.get("ci_high_ms")],
        },
    }
    section = cost_section(measurement, price)
    if section is None:
        return row
    low, high = section["ci"] or (None, None)
    return {
        **row,
        "price_per_hour": price,
        "cost_per_1k": section["per_1k_inferences"],
        "cost_ci_low": low,
        "cost_ci_high": high,
    }


def _priced(measurement: dict[str, Any], price: float) -> dict[str, Any]:
    section = cost_section(measurement, price)
    return measurement if section is None else {**measurement, "cost": {**section, "read_time": True}}


def parse_prices(values: Sequence[str], option: str = PRICE_OPTION) -> ReadTimePrices:
    """Prices given at read time: "PRICE" for every system, "SYSTEM=PRICE" for one.

    Args:
        option: how messages name where they came from (the CLI's --price-per-hour, the API's
            price_per_hour query parameter).

    Raises:
        UserError: with field "price_per_hour", naming `option`, when a price is not a positive
            number, a SYSTEM is empty, or a price for every system is given twice.
    """
    default: float | None = None
    by_system: dict[str, float] = {}
    for value in values:
        system, sep, price = value.rpartition("=")
        label = f"{option} {system}" if sep else option
        checked = check_price(price, "price_per_hour", label)
        if not sep:
            if default is not None:
                raise UserError(f"{option} gives a price for every system twice", field="price_per_hour")
            default = checked
        elif not system.strip():
            raise UserError(f"{option} {value!r}: expected SYSTEM=PRICE", field="price_per_hour")
        else:
            by_system[system.strip()] = checked
    return ReadTimePrices(default, by_system)
