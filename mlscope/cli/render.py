"""Tables and text for results, shared by `run` and `results`."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["console", "err_console", "measurement_table", "print_json_line", "short_id"]

# Piped output (logs, files, CI) is not cut to 80 columns: a results table must stay readable.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def short_id(evaluation_id: str) -> str:
    return evaluation_id[:8]


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.2f}" if value < 1000 else f"{value:,.0f}"


def _validity(validity: dict[str, Any]) -> str:
    if validity.get("valid"):
        return "yes" + (" (!)" if validity.get("reasons") else "")
    return "[red]NO[/red]"


def measurement_table(results: list[dict[str, Any]], title: str | None = None) -> Table:
    """One row per (evaluation, scenario, batch size): latency percentiles in ms and throughput."""
    table = Table(title=title, title_justify="left")
    for column, justify in (
        ("model", "left"),
        ("framework", "left"),
        ("scenario", "left"),
        ("batch", "right"),
        ("median ms", "right"),
        ("95% CI", "right"),
        ("p90", "right"),
        ("p99", "right"),
        ("cv", "right"),
        ("samples/s", "right"),
        ("n", "right"),
        ("valid", "left"),
        ("id", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for result in results:
        name, framework = result["model"]["name"], result["framework"]["name"]
        if result["status"] != "succeeded":
            error = result.get("error") or {}
            table.add_row(
                name,
                framework,
                "-",
                "-",
                f"[red]{result['status']}[/red]",
                error.get("type", ""),
                "",
                "",
                "",
                "",
                "",
                "",
                short_id(result["id"]),
            )
            continue
        for m in result["measurements"]:
            lat = m["latency_ms"]
            lo, hi = lat.get("median_ci") or (None, None)
            table.add_row(
                name,
                framework,
                m["scenario"],
                str(m["batch_size"]),
                _ms(lat["median"]),
                f"{_ms(lo)}–{_ms(hi)}",
                _ms(lat["p90"]),
                _ms(lat["p99"]),
                f"{lat['cv']:.3f}",
                f"{m['throughput']:,.1f}",
                str(lat["count"]),
                _validity(m["validity"]),
                short_id(result["id"]),
            )
    return table


def validity_notes(results: list[dict[str, Any]]) -> list[str]:
    """One line per measurement whose verdict has reasons."""
    notes = []
    for result in results:
        for m in result.get("measurements") or []:
            for reason in m["validity"].get("reasons") or []:
                notes.append(
                    f"{result['framework']['name']} {m['scenario']} batch {m['batch_size']}: {reason}"
                )
    return notes


def print_json_line(document: Any) -> None:
    print(json.dumps(document, separators=(",", ":"), default=str), flush=True)
