"""`mlscope agents`: the live agents (workers) of the farm, as the API lists them."""

from __future__ import annotations

import click

from mlscope.cli.options import json_flag
from mlscope.cli.remote import api_client
from mlscope.cli.render import console, new_table, print_json_lines, short_id

__all__ = ["agents"]

_COLUMNS = ("agent", "host", "capabilities", "frameworks", "runners", "job", "done", "beat")


@click.command()
@json_flag("Print one JSON line per agent.")
def agents(as_json: bool) -> None:
    """List the live agents (workers) of the farm."""
    live = api_client().agents()
    if as_json:
        print_json_lines(live)
        return
    if not live:
        console.print("no live agents: start one with `mlscope worker`")
        return
    table = new_table("live agents", _COLUMNS)
    for agent in live:
        frameworks = ", ".join(f"{k} {v}" for k, v in sorted(agent["frameworks"].items()))
        job = short_id(agent["current_job"]) if agent.get("current_job") else "idle"
        beat = f"{agent.get('seconds_since_heartbeat', 0):.0f} s ago"
        table.add_row(
            agent["id"],
            agent["hostname"],
            ", ".join(agent["capabilities"]),
            frameworks,
            ", ".join(agent["runners"]),
            job,
            str(agent["jobs_done"]),
            beat,
        )
    console.print(table)
