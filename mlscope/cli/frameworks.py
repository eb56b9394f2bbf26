"""`mlscope frameworks`: the frameworks mlscope knows and whether each can run here."""

from __future__ import annotations

from typing import TypedDict

import click

from mlscope.cli.consoles import escape
from mlscope.cli.options import json_flag
from mlscope.cli.render import console, new_table, print_json_lines

__all__ = ["FrameworkRow", "frameworks"]


class FrameworkRow(TypedDict):
    """One framework, as `--json` prints it."""

    name: str
    display: str
    installed: str | None  # the installed version
    available: bool
    reason: str | None  # why it cannot run here; None when it can
    sources: list[str]  # the manifest source kinds it runs
    options: list[str]  # the framework-specific options it takes (`--option compile=...`)


def _rows() -> list[FrameworkRow]:
    from mlscope.runtime.frameworks import FRAMEWORKS, installed_version
    from mlscope.runtime.system import gpu_facts

    rows = []
    for name in sorted(FRAMEWORKS):
        spec = FRAMEWORKS[name]
        version = installed_version(spec) if spec.unavailable is None else None
        reason = None if version else f"not installed ({spec.install_hint})"
        if spec.unavailable is not None:
            reason = f"unavailable: {spec.unavailable}"
        elif spec.needs_gpu and not gpu_facts():
            # The GPU first: installing the framework would not make it run here.
            reason = "needs an NVIDIA GPU; this machine has none that NVML can see"
        rows.append(
            FrameworkRow(
                name=name,
                display=spec.display,
                installed=version,
                available=reason is None,
                reason=reason,
                sources=sorted(spec.sources),
                options=sorted(spec.options),
            )
        )
    return rows


@click.command()
@json_flag("Print JSON.")
def frameworks(as_json: bool) -> None:
    """List the frameworks mlscope knows and whether each can run here."""
    rows = _rows()
    if as_json:
        print_json_lines(rows)
        return
    table = new_table(None, ("framework", "name", "installed", "runs sources", "options", "note"))
    for row in rows:
        table.add_row(
            row["name"],
            row["display"],
            row["installed"] or "-",
            ", ".join(row["sources"]),
            ", ".join(row["options"]) or "-",
            escape(row["reason"] or ""),
        )
    console.print(table)
