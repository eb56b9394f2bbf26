"""`mlscope results list|show|prune`: read what the store holds, and bound what it keeps."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import click

from mlscope.cli.consoles import escape
from mlscope.cli.options import json_flag
from mlscope.cli.render import (
    Column,
    console,
    measurement_table,
    moment_text,
    new_table,
    print_json_lines,
    print_sections,
    print_validity_notes,
    ran_on,
    short_id,
    status_cell,
    top1_cell,
    variant_text,
)
from mlscope.cli.render_cost import PRICE_OPTION, parse_prices
from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings
from mlscope.contract.workload import display_name

if TYPE_CHECKING:
    from mlscope.contract.result import EvaluationResult
    from mlscope.store import Store

__all__ = ["results"]


@click.group()
def results() -> None:
    """Read stored evaluation results."""


def _resolve_dead_runs(store: Store) -> None:
    """Mark failed ("interrupted: its process died") what a killed `mlscope run` left running, so a
    listing never shows a dead run as running. Jobs of a farm's queues are its sweepers' (workers,
    api): left alone here. A read must not fail for it: a store that refuses the write is read as is."""
    from mlscope.workers.sweeper import Sweeper

    try:
        Sweeper(store).sweep()
    except Exception as exc:
        click.echo(f"mlscope: note: could not resolve dead runs: {exc}", err=True)


def _headline(result: Mapping[str, Any]) -> str:
    if result["status"] != "succeeded" or not result.get("measurements"):
        error = result.get("error") or {}
        return f"{error.get('type', '')}: {error.get('message', '')}"[:80] if error else ""
    first = result["measurements"][0]
    return f"b{first['batch_size']} {first['latency_ms']['median']:.2f} ms {first['throughput']:,.1f}/s"


def _settings_of(framework: Mapping[str, Any]) -> str:
    """The framework's effective settings, e.g. `(threads 2, providers CPUExecutionProvider)`."""
    shown = {k: v for k, v in framework.items() if k not in ("name", "version", "libraries", "device")}
    parts = [f"{k} {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in shown.items()]
    return f"({'; '.join(parts)})" if parts else ""


def _listing(
    url: str,
    model: str | None,
    framework: str | None,
    status: str | None,
    system_id: str | None,
    limit: int,
    offset: int,
) -> tuple[list[EvaluationResult], int]:
    """The page of evaluations `results list` shows and how many match. A SQLite store is read with
    sqlite3 when it can be (store/sql/listing.py: the same documents without importing SQLAlchemy);
    a system prefix to resolve, or anything that reader leaves to the store, opens the store."""
    from mlscope.store.sql.listing import list_sqlite

    if system_id is None:
        read = list_sqlite(url, model=model, framework=framework, status=status, limit=limit, offset=offset)
        if read is not None:
            return read
    from mlscope.store import open_store

    with open_store(url) as store:
        _resolve_dead_runs(store)
        filters: dict[str, Any] = {
            "model": model,
            "framework": framework,
            "status": status,
            "system_id": store.resolve_system_id(system_id) if system_id else None,
        }
        found = store.list_evaluations(**filters, limit=limit, offset=offset)
        return found, store.count_evaluations(**filters)


# "started": when it ran, not when it was submitted (a queued one has not started); "ran on": the farm
# agent that ran it, or the host of a local run.
_LIST_COLUMNS: tuple[Column, ...] = (
    "id",
    "started (UTC)",
    "model",
    "framework",
    "device",
    "status",
    "batch sizes",
    "first point (median, rate)",
    "ran on",
    "system",
)


@results.command("list")
@click.option("-m", "--model", help="Only this model.")
@click.option("-f", "--framework", help="Only this framework.")
@click.option("--status", help="Only this status: queued, running, succeeded, failed, cancelled.")
@click.option(
    "--system", "system_id", metavar="ID", help="Only results from this system (its id or a unique prefix)."
)
@click.option("-n", "--limit", type=int, default=20, show_default=True, help="How many.")
@click.option("--offset", type=int, default=0, show_default=True, help="Skip this many (newest first).")
@json_flag("Print JSON lines.")
def results_list(
    model: str | None,
    framework: str | None,
    status: str | None,
    system_id: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """List stored evaluations, newest first."""
    settings = load_settings()
    found, total = _listing(settings.store_url, model, framework, status, system_id, limit, offset)
    if as_json:
        print_json_lines(found)
        return
    # A top-1 column only when some evaluation shown measured accuracy.
    with_top1 = any(r.get("accuracy") for r in found)
    columns = (*_LIST_COLUMNS[:-2], ("top-1", "right"), *_LIST_COLUMNS[-2:]) if with_top1 else _LIST_COLUMNS
    table = new_table(f"{len(found)} of {total} evaluations in {settings.store_url}", columns)
    for r in found:
        sizes = ",".join(str(s) for s in r.get("request", {}).get("batch_sizes", []))
        cells = [
            short_id(r["id"]),
            moment_text(r.get("started_at")),
            escape(display_name(r)),
            # The variant too (`quantize=int8`): its row and the plain one's sit side by side.
            " ".join(filter(None, (r["framework"]["name"], r["framework"].get("version"), variant_text(r)))),
            r["device"],
            status_cell(r),
            sizes,
            _headline(r),
            *([top1_cell(r)] if with_top1 else []),
            escape(ran_on(r)),
            ((r.get("system") or {}).get("id") or "-"),
        ]
        table.add_row(*cells)
    console.print(table)


@results.command("show")
@click.argument("evaluation_id", metavar="ID")
@json_flag("Print the result as JSON.")
@click.option("--raw", is_flag=True, help="With --json: include every raw latency (ns).")
@click.option(
    PRICE_OPTION,
    "prices",
    multiple=True,
    metavar="[SYSTEM=]PRICE",
    help="Price measurements recorded without a price at this price per hour (any currency).",
)
def results_show(evaluation_id: str, as_json: bool, raw: bool, prices: tuple[str, ...]) -> None:
    """Show one evaluation (ID or a unique prefix of it)."""
    from mlscope.store import open_store

    read_time = parse_prices(prices)
    settings = load_settings()
    with open_store(settings.store_url) as store:
        _resolve_dead_runs(store)
        result = read_time.price_result(
            store.get_evaluation(store.resolve_id(evaluation_id), include_raw=raw)
        )
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    console.print(measurement_table([result], title=f"evaluation {result['id']} ({status_cell(result)})"))
    print_validity_notes([result])
    print_sections(result)
    system = result.get("system") or {}
    cpu = system.get("cpu") or {}
    model = result["model"]
    memory_gib = (system.get("memory_bytes") or 0) / 2**30
    # A worker's result always has its manifest's hash; the store allows one without.
    sha = model.get("manifest_sha256")
    facts = {
        "model": f"{model['name']} {model['version']}" + (f" (manifest {sha[:12]})" if sha else ""),
        "framework": f"{result['framework']['name']} {result['framework'].get('version')} "
        + _settings_of(result["framework"]),
        "runner / device": f"{result['runner']} / {result['device']}",
        "system": f"{system.get('id', '-')} {system.get('hostname', '')}{_instance(system)}: "
        f"{cpu.get('model', '?')}, "
        f"{cpu.get('logical_cores', '?')} logical cores, {memory_gib:.1f} GiB",
        "cold start": ", ".join(f"{k} {v}" for k, v in (result.get("cold_start") or {}).items()),
        "created / started / finished": " / ".join(
            str(result[key]) for key in ("created_at", "started_at", "finished_at")
        ),
    }
    e = result.get("error")
    if e:
        facts["error"] = f"{e['type']} in {e['phase']}: {e['message']}"
    for key, value in facts.items():
        console.print(f"[bold]{key}[/bold]: {value}")


def _instance(system: dict[str, Any]) -> str:
    """ " (c7i.large)": the user's name for the machine (MLSCOPE_INSTANCE_TYPE), when it has one."""
    return f" ({system['instance_type']})" if system.get("instance_type") else ""


_AGE = re.compile(r"^(\d+)\s*([dhw])$")
_AGE_UNITS = {"h": 3600, "d": 86400, "w": 7 * 86400}


def _older_than(text: str) -> datetime:
    """`30d`, `12h`, `2w` → the moment that long ago (aware UTC)."""
    match = _AGE.match(text.strip().lower())
    if not match or int(match.group(1)) == 0:
        raise UserError(
            f"--older-than {text!r} is not an age: expected a whole number of hours, days or weeks, "
            "e.g. 12h, 30d, 2w",
            field="older_than",
        )
    return datetime.now(timezone.utc) - timedelta(seconds=int(match.group(1)) * _AGE_UNITS[match.group(2)])


@results.command("prune")
@click.option("--older-than", "older_than", required=True, metavar="AGE", help="e.g. 30d, 12h, 2w.")
@click.option(
    "--keep-summaries/--delete-evaluations",
    default=True,
    show_default=True,
    help="Drop raw latencies and spans only (every summary, comparison and history stays), or delete "
    "the evaluations whole.",
)
@click.option("--yes", is_flag=True, help="Delete evaluations without asking (with --delete-evaluations).")
@json_flag("Print what was removed as JSON.")
def prune(older_than: str, keep_summaries: bool, yes: bool, as_json: bool) -> None:
    """Bound the store: remove the raw data of evaluations that ended more than AGE ago.

    Queued and running evaluations are never touched.
    """
    from mlscope.store import open_store

    before = _older_than(older_than)
    if not keep_summaries and not yes:
        click.confirm(
            f"Delete every evaluation that ended before {before:%Y-%m-%d %H:%M} UTC, summaries included?",
            abort=True,
        )
    with open_store(load_settings().store_url) as store:
        report = store.prune(before=before, keep_summaries=keep_summaries)
    if as_json:
        print(json.dumps({"before": before.isoformat(), **report.to_dict()}))
        return
    what = "deleted" if report.deleted else "kept their summaries; raw data removed from"
    console.print(
        f"{report.evaluations} evaluation(s) that ended before {before:%Y-%m-%d %H:%M} UTC {what}: "
        f"{report.raw_latencies} measurement(s)' raw latencies, {report.spans} span(s)"
    )
