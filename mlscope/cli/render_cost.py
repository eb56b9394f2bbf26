"""How the resource sections read (docs/cost.md): an evaluation's peak memory, each measurement's
energy and cost lines under `run` and `results show`, the cost cell of `compare`, and prices given at
read time (`--price-per-hour`) for results recorded without one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.markup import escape

from mlscope.contract.cost import check_price, cost_section
from mlscope.contract.errors import UserError

__all__ = [
    "PRICE_OPTION",
    "ReadTimePrices",
    "cost_cell",
    "memory_text",
    "parse_prices",
    "resource_lines",
]

PRICE_OPTION = "--price-per-hour"


def _money(value: float) -> str:
    """A cost with three significant digits at least, however small (a CPU inference costs 1e-6)."""
    return f"{value:.4g}" if value < 1000 else f"{value:,.0f}"


def _mb(value: Any) -> str:
    return f"{value / 1024:.2f} GiB" if value >= 1024 else f"{value:.1f} MiB"


def memory_text(memory: Mapping[str, Any]) -> str:
    """e.g. "peak RSS 412.3 MiB (this evaluation), device 1.20 GiB"; "device -" on a host device."""
    scope = "this evaluation" if memory.get("rss_scope") == "evaluation" else "the predictor process"
    device = memory.get("peak_device_mb")
    return f"peak RSS {_mb(memory['peak_rss_mb'])} ({scope}), device {'-' if device is None else _mb(device)}"


def _point(measurement: Mapping[str, Any]) -> str:
    return f"{measurement['scenario']} batch {measurement['batch_size']}"


def _cost_text(cost: Mapping[str, Any]) -> str:
    ci = cost.get("ci")
    interval = f" [{_money(ci[0])}–{_money(ci[1])}]" if ci else ""
    read_time = ", priced at read time" if cost.get("read_time") else ""
    return (
        f"{_money(cost['per_1k_inferences'])} per 1k inferences{interval} "
        f"at {cost['price_per_hour']:g}/hour{read_time}"
    )


def _energy_text(energy: Mapping[str, Any]) -> str:
    return f"{energy['joules_per_inference']:.4g} J per inference ({escape(str(energy.get('source')))})"


def resource_lines(result: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, text) of the result's memory, then each measurement's energy and cost; an energy
    reason shared by every measurement is said once."""
    lines: list[tuple[str, str]] = []
    if result.get("memory"):
        lines.append(("memory", memory_text(result["memory"])))
    measurements = result.get("measurements") or []
    reasons = {(m.get("energy") or {}).get("unavailable") for m in measurements if m.get("energy")}
    if len(reasons) == 1 and None not in reasons and all(m.get("energy") for m in measurements):
        lines.append(("energy", f"[yellow]unavailable[/yellow]: {escape(str(reasons.pop()))}"))
    else:
        for m in measurements:
            energy = m.get("energy")
            if energy:
                text = (
                    f"[yellow]unavailable[/yellow]: {escape(str(energy['unavailable']))}"
                    if "unavailable" in energy
                    else _energy_text(energy)
                )
                lines.append(("energy", f"{_point(m)}: {text}"))
    for m in measurements:
        if m.get("cost"):
            lines.append(("cost", f"{_point(m)}: {_cost_text(m['cost'])}"))
    return lines


def cost_cell(row: Mapping[str, Any]) -> str:
    """A comparison row's cost per 1k inferences with its interval, "-" without a price."""
    point = row.get("cost_per_1k")
    if point is None:
        return "-"
    low, high = row.get("cost_ci_low"), row.get("cost_ci_high")
    if low is None or high is None:
        return _money(point)
    return f"{_money(point)} [{_money(low)}–{_money(high)}]"


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

    def price_result(self, result: dict[str, Any]) -> dict[str, Any]:
        """The result with a cost section on each measurement that has none and can be priced."""
        price = self.price_for(result.get("system") or {})
        if price is None:
            return result
        measurements = [
            _priced(m, price) if not m.get("cost") else m for m in result.get("measurements") or []
        ]
        return {**result, "measurements": measurements}

    def price_rows(self, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Comparison rows, those without a cost priced from their throughput and latency interval."""
        priced = []
        for row in rows:
            price = self.price_for(row) if row.get("cost_per_1k") is None else None
            if price is not None:
                measurement = {
                    "scenario": row["scenario"],
                    "throughput": row.get("throughput"),
                    "latency_ms": {
                        "median": row.get("median_ms"),
                        "median_ci": [row.get("ci_low_ms"), row.get("ci_high_ms")],
                    },
                }
                section = cost_section(measurement, price)
                if section is not None:
                    ci = section["ci"] or [None, None]
                    row = {
                        **row,
                        "price_per_hour": price,
                        "cost_per_1k": section["per_1k_inferences"],
                        "cost_ci_low": ci[0],
                        "cost_ci_high": ci[1],
                    }
            priced.append(row)
        return priced


def _priced(measurement: dict[str, Any], price: float) -> dict[str, Any]:
    section = cost_section(measurement, price)
    return measurement if section is None else {**measurement, "cost": {**section, "read_time": True}}


def parse_prices(values: Sequence[str]) -> ReadTimePrices:
    """`--price-per-hour` values: "PRICE" for every system, "SYSTEM=PRICE" for one.

    Raises:
        UserError: naming --price-per-hour when a price is not a positive number or is given twice.
    """
    default: float | None = None
    by_system: dict[str, float] = {}
    for value in values:
        system, sep, price = value.rpartition("=")
        label = f"{PRICE_OPTION} {system}" if sep else PRICE_OPTION
        checked = check_price(price, "price_per_hour", label)
        if not sep:
            if default is not None:
                raise UserError(
                    f"{PRICE_OPTION} gives a price for every system twice", field="price_per_hour"
                )
            default = checked
        elif not system.strip():
            raise UserError(f"{PRICE_OPTION} {value!r}: expected SYSTEM=PRICE", field="price_per_hour")
        else:
            by_system[system.strip()] = checked
    return ReadTimePrices(default, by_system)
