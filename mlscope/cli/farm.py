"""The farm's verbs: `api`, `worker`, `submit`, `agents`, `compare`.

`submit`, `agents` and `compare` talk to the API through mlscope.client, as any script would.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mlscope.cli.render import (
    console,
    err_console,
    measurement_table,
    print_json_line,
    short_id,
    validity_notes,
)
from mlscope.contract.errors import UserError
from mlscope.contract.settings import Settings, load_settings

if TYPE_CHECKING:
    from mlscope.client import Client

__all__ = [
    "agents_command",
    "api_command",
    "compare_command",
    "compare_table",
    "submit_command",
    "worker_command",
]

_ENDED = ("succeeded", "failed", "cancelled")


def _log_to_stderr(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def api_command(host: str, port: int, threads: int) -> None:
    from mlscope.api import serve

    _log_to_stderr("INFO")
    serve(load_settings(), host=host, port=port, threads=threads)


def worker_command(
    *,
    agent_id: str | None,
    capabilities: list[str],
    frameworks: list[str],
    runners: list[str],
    heartbeat_ttl_s: float,
    exclusive: bool,
    loglevel: str,
) -> None:
    from mlscope.workers.worker import Worker

    _log_to_stderr(loglevel)
    worker = Worker(
        load_settings(),
        agent_id=agent_id,
        capabilities=capabilities or None,
        frameworks=frameworks or None,
        runners=runners or ("process", "inline"),
        heartbeat_ttl_s=heartbeat_ttl_s,
        exclusive=exclusive,
    )
    worker.run(loglevel=loglevel.upper())


def _follow(client: Client, ids: list[str], timeout_s: float | None) -> list[dict[str, Any]]:
    """Poll until every evaluation has ended, with one progress bar for all of them."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[states]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err_console, transient=False) as progress:
        task = progress.add_task("evaluations", total=len(ids), states="queued")

        def update(current: dict[str, dict[str, Any]]) -> None:
            counts: dict[str, int] = {}
            for evaluation in current.values():
                counts[evaluation["status"]] = counts.get(evaluation["status"], 0) + 1
            done = sum(counts.get(s, 0) for s in _ENDED)
            states = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            progress.update(task, completed=done, states=states)

        return client.wait(ids, timeout_s=timeout_s, on_update=update)


def submit_command(document: dict[str, Any], *, wait: bool, timeout_s: float | None, as_json: bool) -> int:
    from mlscope.client import Client

    client = Client(settings=load_settings())
    answer = client.submit(document)
    for warning in answer.get("warnings", []):
        err_console.print(f"[yellow]warning:[/yellow] {warning}")
    if not wait:
        if as_json:
            print_json_line(answer)
        else:
            console.print(f"{answer['id']} queued on {answer['queue']}")
        return 0
    (result,) = _follow(client, [answer["id"]], timeout_s)
    if as_json:
        print_json_line(result)
    else:
        console.print(measurement_table([result]))
        for note in validity_notes([result]):
            err_console.print(f"[yellow]note:[/yellow] {note}")
        if result["error"]:
            err_console.print(f"[red]{result['status']}[/red]: {result['error']['message']}")
    return 0 if result["status"] == "succeeded" else 1


def agents_command(*, as_json: bool) -> None:
    from mlscope.client import Client

    agents = Client(settings=load_settings()).agents()
    if as_json:
        for agent in agents:
            print_json_line(agent)
        return
    if not agents:
        console.print("no live agents: start one with `mlscope worker`")
        return
    table = Table(title="live agents", title_justify="left")
    for column in ("agent", "host", "capabilities", "frameworks", "runners", "job", "done", "beat"):
        table.add_column(column)
    for agent in agents:
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


def _cell(value: Any, column: str) -> str:
    if value is None:
        return "-"
    if column.endswith("_ms"):
        return f"{value:.3f}" if value < 10 else f"{value:.2f}"
    if column == "throughput":
        return f"{value:,.1f}"
    if column == "valid":
        return "yes" if value else "[red]NO[/red]"
    return str(value)


def compare_table(rows: list[dict[str, Any]], title: str | None = None) -> Table:
    """The comparison as a table: one row per model × framework × system × batch size."""
    table = Table(title=title, title_justify="left")
    shown = (
        ("model", "model"),
        ("framework", "framework"),
        ("framework_version", "version"),
        ("agent_id", "agent"),
        ("system_id", "system"),
        ("scenario", "scenario"),
        ("batch_size", "batch"),
        ("median_ms", "median ms"),
        ("ci", "95% CI ms"),
        ("p90_ms", "p90 ms"),
        ("p99_ms", "p99 ms"),
        ("throughput", "samples/s"),
        ("valid", "valid"),
    )
    for key, header in shown:
        table.add_column(
            header,
            justify="right" if key.endswith(("_ms", "ci")) or key in ("batch_size", "throughput") else "left",
        )
    for row in rows:
        cells = []
        for key, _ in shown:
            if key == "ci":
                low, high = row.get("ci_low_ms"), row.get("ci_high_ms")
                cells.append("-" if low is None else f"{_cell(low, '_ms')}–{_cell(high, '_ms')}")
            elif key == "system_id":
                cells.append((row[key] or "-")[:8])
            else:
                cells.append(_cell(row.get(key), key))
        table.add_row(*cells)
    return table


def compare_command(
    body: dict[str, Any],
    *,
    output: str | None,
    timeout_s: float | None,
    as_json: bool,
    now: Callable[[], float] = time.time,
) -> int:
    from mlscope.client import Client

    settings: Settings = load_settings()
    prefix = Path(output or time.strftime("mlscope-compare-%Y%m%d-%H%M%S", time.gmtime(now())))
    # Checked before anything is submitted: a comparison's results must have somewhere to go.
    try:
        prefix.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        message = f"-o {output}: cannot make the folder {prefix.parent}: {exc.strerror}"
        raise UserError(message, field="output") from None
    client = Client(settings=settings)
    answer = client.submit_batch(body)
    for skipped in answer.get("skipped", []):
        err_console.print(
            f"[yellow]skipped[/yellow] {skipped['model']} on {skipped['framework']}: {skipped['reason']}"
        )
    for warning in answer.get("warnings", []):
        err_console.print(f"[yellow]warning:[/yellow] {warning}")
    for item in answer["evaluations"]:
        for warning in item.get("warnings", []):
            err_console.print(f"[yellow]warning:[/yellow] {short_id(item['id'])}: {warning}")
    ids = [item["id"] for item in answer["evaluations"]]
    labels = {
        item["id"]: f"{item['model']}/{item['framework']}@{item['target']}" for item in answer["evaluations"]
    }
    err_console.print(f"submitted {len(ids)} evaluation(s)")
    results = _follow(client, ids, timeout_s)
    for result in results:
        if result["status"] != "succeeded":
            error = result.get("error") or {}
            err_console.print(
                f"[red]{result['status']}[/red] {short_id(result['id'])} {labels.get(result['id'], '')}: "
                f"{error.get('message', '')}"
            )
    comparison = client.compare(ids=ids)
    rows = comparison["rows"]
    csv_path, json_path = prefix.with_suffix(".csv"), prefix.with_suffix(".json")
    csv_path.write_text(_csv(comparison["columns"], rows))
    json_path.write_text(json.dumps({"evaluations": ids, **comparison}, indent=2) + "\n")
    if as_json:
        for row in rows:
            print_json_line(row)
    else:
        console.print(compare_table(rows, title=f"comparison of {len(ids)} evaluation(s)"))
        for row in rows:
            for reason in row["reasons"]:
                where = (
                    f"{row['framework']} on {row['agent_id'] or row['hostname']} batch {row['batch_size']}"
                )
                err_console.print(f"[yellow]note:[/yellow] {where}: {reason}")
    err_console.print(f"wrote {csv_path} and {json_path}")
    failed = sum(1 for r in results if r["status"] != "succeeded")
    if failed:
        err_console.print(f"[red]{failed} of {len(ids)} evaluation(s) did not succeed[/red]")
    return 1 if failed else 0


def _csv(columns: list[str], rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, "reasons": "; ".join(row.get("reasons") or [])})
    return buffer.getvalue()
