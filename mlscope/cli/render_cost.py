"""How the resource sections read (docs/cost.md): an evaluation's peak memory, each measurement's
energy and cost lines under `run` and `results show`, the cost cell of `compare`, and prices given at
read time (`--price-per-hour`) for results recorded without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlscope.cli.consoles import escape
from mlscope.contract.cost import PRICE_OPTION, ReadTimePrices, parse_prices

__all__ = ["PRICE_OPTION", "ReadTimePrices", "cost_cell", "memory_text", "parse_prices", "resource_lines"]


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
    """A comparison row's cost per 1k inferences, e.g. "0.000279 ±2%" (the interval's farther bound
    from the point, so the column stays narrow; CSV and JSON carry both bounds), "-" without a price."""
    point = row.get("cost_per_1k")
    if point is None:
        return "-"
    low, high = row.get("cost_ci_low"), row.get("cost_ci_high")
    if low is None or high is None or point <= 0:
        return f"{point:.3g}"
    spread = max(point - low, high - point) / point * 100
    return f"{point:.3g} ±{spread:.0f}%" if spread >= 10 else f"{point:.3g} ±{spread:.2g}%"
