"""`mlscope compare`: models × frameworks × systems × batch sizes on the farm, side by side, as a
table and as PREFIX.csv and PREFIX.json."""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mlscope.cli.consoles import escape
from mlscope.cli.options import evaluation_options, json_flag, plot_option, request_fields, split_csv
from mlscope.cli.remote import api_client, follow, upload_local_dataset, upload_local_models
from mlscope.cli.render import console, err_console, new_table, note, print_json_lines, short_id, warn
from mlscope.cli.render_cost import PRICE_OPTION, ReadTimePrices, cost_cell, parse_prices
from mlscope.contract.errors import UserError

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["compare", "compare_command", "compare_table"]


@click.command()
@click.option("-m", "--models", required=True, metavar="NAMES", help="Comma-separated models.")
@click.option("-f", "--frameworks", required=True, metavar="NAMES", help="Comma-separated frameworks.")
@click.option(
    "--on",
    "targets",
    default="cpu",
    show_default=True,
    metavar="TARGETS",
    help="Comma-separated capabilities or agent:<id>; each capability fans out to every live agent "
    "that has it (one system per agent).",
)
@click.option(
    "--fan-out/--no-fan-out",
    default=True,
    show_default=True,
    help="Run a capability target on every live matching agent, or once on any of them.",
)
@evaluation_options
@click.option(
    "-o",
    "--output",
    metavar="PREFIX",
    help="Write PREFIX.csv and PREFIX.json [default: mlscope-compare-<UTC time>].",
)
@click.option("--wait-timeout", type=float, help="Give up waiting after this many seconds.")
@click.option(
    PRICE_OPTION,
    "prices",
    multiple=True,
    metavar="[SYSTEM=]PRICE",
    help="Price rows recorded without a price: PRICE per hour for every system, or SYSTEM=PRICE for "
    "one (an agent id, instance type, hostname or system id prefix); repeatable.",
)
@plot_option(
    "Also write the comparison as a chart (.png, .svg, .html): median per model @ batch, one bar per "
    "framework × system, its interval as whiskers."
)
@json_flag("Print the comparison rows as JSON lines.")
def compare(
    models: str,
    frameworks: str,
    targets: str,
    fan_out: bool,
    output: str | None,
    wait_timeout: float | None,
    prices: tuple[str, ...],
    plot_file: str | None,
    as_json: bool,
    **fields: Any,
) -> None:
    """Compare models × frameworks × systems × batch sizes on the farm, side by side (.onnx files
    among the models are uploaded first)."""
    body = {
        "models": split_csv(models),
        "frameworks": split_csv(frameworks),
        "targets": split_csv(targets),
        "fan_out": fan_out,
        **request_fields(**fields),
    }
    read_time = parse_prices(prices)  # checked before anything is submitted
    sys.exit(
        compare_command(
            body,
            output=output,
            timeout_s=wait_timeout,
            as_json=as_json,
            prices=read_time,
            plot_file=plot_file,
        )
    )


def _cell(value: Any, column: str) -> str:
    if value is None:
        return "-"
    if column.endswith("_ms"):
        return f"{value:.3f}" if value < 10 else f"{value:.2f}"
    if column == "throughput":
        return f"{value:,.1f}"
    if column == "valid":
        return "yes" if value else "[red]NO[/red]"
    if column == "top1":
        return f"{value * 100:.1f}%"
    return str(value)


# (row key, header) of the comparison table's columns.
_SHOWN = (
    ("display_name", "model"),
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
    ("cost", "cost / 1k"),
    ("qps", "qps"),
    ("top1", "top-1"),
    ("valid", "valid"),
)
_RIGHT = ("batch_size", "throughput", "cost", "qps", "top1")


def compare_table(rows: list[dict[str, Any]], title: str | None = None) -> Table:
    """The comparison as a table: one row per model × framework × system × batch size × workload, the
    model shown by its display name (`hf:gpt2[n_layer=2]`); a top-1 column
    when some row's evaluation measured accuracy, a qps column (target → achieved, or a search's
    max) when some row is a server or multi_stream point, a cost column (per 1,000 inferences, its
    interval as ±%, "-" where no price is known) when some row has a price. A row whose parity
    was different shows as invalid (the store made it so), its reason among the notes."""
    with_top1 = any(row.get("top1") is not None for row in rows)
    with_qps = any(row.get("achieved_qps") is not None or row.get("max_qps") is not None for row in rows)
    with_cost = any(row.get("cost_per_1k") is not None for row in rows)
    hidden = {
        name for name, shown in (("top1", with_top1), ("qps", with_qps), ("cost", with_cost)) if not shown
    }
    shown = [(key, header) for key, header in _SHOWN if key not in hidden]
    table = new_table(
        title,
        (
            (header, "right" if key.endswith(("_ms", "ci")) or key in _RIGHT else "left")
            for key, header in shown
        ),
    )
    for row in rows:
        cells = []
        for key, _ in shown:
            if key == "ci":
                low, high = row.get("ci_low_ms"), row.get("ci_high_ms")
                cells.append("-" if low is None else f"{_cell(low, '_ms')}–{_cell(high, '_ms')}")
            elif key == "system_id":
                cells.append((row[key] or "-")[:8])
            elif key == "display_name":  # the bare name from an API that has no display names
                # escaped: `hf:gpt2[n_layer=2]` would read as rich markup
                cells.append(escape(_cell(row.get(key) or row.get("model"), key)))
            elif key == "qps":
                cells.append(_qps_cell(row))
            elif key == "cost":
                cells.append(cost_cell(row))
            else:
                cells.append(_cell(row.get(key), key))
        table.add_row(*cells)
    return table


def _qps_cell(row: dict[str, Any]) -> str:
    if row.get("max_qps") is not None:
        return f"max {row['max_qps']:,.1f}"
    target, achieved = row.get("target_qps"), row.get("achieved_qps")
    if achieved is None:
        return "-"
    return f"{achieved:,.1f}" if target is None else f"{target:,.1f} → {achieved:,.1f}"


def compare_command(
    body: dict[str, Any],
    *,
    output: str | None,
    timeout_s: float | None,
    as_json: bool,
    now: Callable[[], float] = time.time,
    prices: ReadTimePrices | None = None,
    plot_file: str | None = None,
) -> int:
    """Submit the comparison, follow it, write PREFIX.csv and PREFIX.json and show the rows.

    Args:
        prices: prices given at read time, for rows recorded without one.
        plot_file: where to write the rows as a chart (compare bars), or None.

    Returns: the exit code (0 every evaluation succeeded, 1 some did not).
    """
    client = api_client()
    prefix = Path(output or time.strftime("mlscope-compare-%Y%m%d-%H%M%S", time.gmtime(now())))
    # Checked before anything is submitted: a comparison's results must have somewhere to go.
    try:
        prefix.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        message = f"-o {output}: cannot make the folder {prefix.parent}: {exc.strerror}"
        raise UserError(message, field="output") from None
    body = upload_local_dataset(client, body)
    answer = client.submit_batch({**body, "models": upload_local_models(client, list(body["models"]))})
    for skipped in answer.get("skipped", []):
        err_console.print(
            f"[yellow]skipped[/yellow] {skipped['model']} on {skipped['framework']}: {skipped['reason']}"
        )
    for warning in answer.get("warnings", []):
        warn(warning)
    for item in answer["evaluations"]:
        for warning in item.get("warnings", []):
            warn(f"{short_id(item['id'])}: {warning}")
    ids = [item["id"] for item in answer["evaluations"]]
    labels = {
        item["id"]: f"{item['model']}/{item['framework']}@{item['target']}" for item in answer["evaluations"]
    }
    err_console.print(f"submitted {len(ids)} evaluation(s)")
    results = follow(client, ids, timeout_s, quiet=as_json)
    for result in results:
        if result["status"] != "succeeded":
            error = result.get("error") or {}
            err_console.print(
                f"[red]{result['status']}[/red] {short_id(result['id'])} {labels.get(result['id'], '')}: "
                f"{error.get('message', '')}"
            )
    comparison = client.compare(ids=ids)
    rows = comparison["rows"] = (prices or ReadTimePrices(None, {})).price_rows(comparison["rows"])
    csv_path, json_path = prefix.with_suffix(".csv"), prefix.with_suffix(".json")
    csv_path.write_text(_csv(comparison["columns"], rows))
    json_path.write_text(json.dumps({"evaluations": ids, **comparison}, indent=2) + "\n")
    if as_json:
        print_json_lines(rows)
    else:
        _print_whole(compare_table(rows, title=f"comparison of {len(ids)} evaluation(s)"))
        for row in rows:
            for reason in row["reasons"]:
                where = (
                    f"{row['framework']} on {row['agent_id'] or row['hostname']} batch {row['batch_size']}"
                )
                note(f"{where}: {reason}")
    err_console.print(f"wrote {csv_path} and {json_path}")
    if plot_file is not None:
        _write_plot(rows, plot_file)
    failed = sum(1 for r in results if r["status"] != "succeeded")
    if failed:
        err_console.print(f"[red]{failed} of {len(ids)} evaluation(s) did not succeed[/red]")
    return 1 if failed else 0


def _write_plot(rows: list[dict[str, Any]], plot_file: str) -> None:
    """The rows as compare bars at `plot_file`; a warning, not a failure, when no row has a median (the
    table and files are written already)."""
    from mlscope.cli.plot import results_chart, write_plot

    try:
        chart = results_chart([], rows)
    except UserError as exc:
        warn(f"no plot written to {plot_file}: {exc.message}")
        return
    write_plot(chart, plot_file)


def _print_whole(table: Table) -> None:
    """Print the table; piped (a file, a log), as wide as its cells need: with a cost column its
    columns outgrow the 160 of other piped output, and a cut cell is a lost figure."""
    if console.is_terminal:
        console.print(table)
        return
    piped = console.width
    console.width = max(piped, console.measure(table, options=console.options.update_width(1000)).maximum)
    try:
        console.print(table)
    finally:
        console.width = piped


def _csv(columns: list[str], rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, "reasons": "; ".join(row.get("reasons") or [])})
    return buffer.getvalue()
