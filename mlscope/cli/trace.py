"""`mlscope trace ID`: an evaluation's trace from the store, as a summary, JSON, a Chrome/Perfetto trace
file, or tables of where its traced inferences spent their time (`--layers`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mlscope.cli.render import Column, console, err_console, new_table
from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["FORMATS", "trace", "trace_command"]

FORMATS = ("table", "json", "chrome")
# An APPLICATION timeline longer than this is cut, the rest counted: a table is read, not searched.
TIMELINE_ROWS = 60


def _write(text: str, output: str | None, default: str | None) -> None:
    """`text` to the file `output` (`default` when None), or to stdout for "-" or no file at all."""
    target = output or default
    if target is None or target == "-":
        sys.stdout.write(text + "\n")
        return
    path = Path(target)
    try:
        path.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {target}: {exc.strerror or exc}", field="output") from None
    err_console.print(f"wrote {path} ({path.stat().st_size:,} bytes)")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f}"


def _share(value: float) -> str:
    return f"{100 * value:.1f}%"


def _summary_tables(evaluation: Mapping[str, Any], summary: dict[str, Any]) -> list[str | Table]:
    headline = (
        f"trace of {evaluation['id']}: {evaluation['model']['name']} on {evaluation['framework']['name']}, "
        f"trace level {evaluation['trace_level']}, {summary['count']:,} spans"
    )
    levels = new_table("spans per level", ("level", ("spans", "right")))
    for level, count in summary["levels"].items():
        levels.add_row(level, f"{count:,}")
    timeline = new_table("APPLICATION timeline", ("span", "process", ("start ms", "right"), ("ms", "right")))
    for entry in summary["timeline"][:TIMELINE_ROWS]:
        timeline.add_row(
            "  " * entry["depth"] + entry["name"],
            entry["process"],
            _ms(entry["offset_ms"]),
            _ms(entry["duration_ms"]),
        )
    hidden = len(summary["timeline"]) - TIMELINE_ROWS
    if hidden > 0:
        timeline.caption = f"… and {hidden} more (--format json has them all)"
    return [headline, levels, timeline]


def _untraced_notes(spans: Iterable[Mapping[str, Any]]) -> list[str]:
    """The notes of the profiled passes the framework could not trace ("profile LEVEL" spans with
    `supported` false: it has no profiler for that level), each once: why a level has no spans."""
    notes = (
        span["attributes"].get("note")
        for span in spans
        if span["name"].startswith("profile ") and span["attributes"].get("supported") is False
    )
    return list(dict.fromkeys(note for note in notes if note))


def _table(title: str, columns: list[Column], rows: list[list[str]]) -> Table:
    table = new_table(title, columns)
    for row in rows:
        table.add_row(*row)
    return table


def _figure_rows(rows: list[dict[str, Any]], last: str | None, **match: Any) -> list[list[str]]:
    """The cells of the rows whose fields equal `match`: key, calls, total, mean, share, then the
    `last` figure (if any)."""
    return [
        [
            row["key"],
            str(row["calls"]),
            _ms(row["total_ms"]),
            _ms(row["mean_ms"]),
            _share(row["share"]),
            *([_ms(row[last])] if last else []),
        ]
        for row in rows
        if all(row[key] == value for key, value in match.items())
    ]


def _layer_tables(report: dict[str, Any]) -> list[Table]:
    tables = []
    figures: list[Column] = [
        ("calls", "right"),
        ("total ms", "right"),
        ("mean ms", "right"),
        ("share", "right"),
    ]
    for batch_size in dict.fromkeys(row["batch_size"] for row in report["rows"]):
        rows = _figure_rows(report["rows"], "per_inference_ms", batch_size=batch_size)
        title = f"FRAMEWORK pass, batch {batch_size}: time per {report['group_by']} (share of inference time)"
        columns: list[Column] = [report["group_by"], *figures, ("ms / inference", "right")]
        tables.append(_table(title, columns, rows))
    for batch_size in dict.fromkeys(row["batch_size"] for row in report["hotspots"]):
        rows = _figure_rows(report["hotspots"], "self_ms", batch_size=batch_size)
        title = f"{report['hotspot_level']} pass, batch {batch_size}: top {report['top']} by total time"
        tables.append(_table(title, ["name", *figures, ("self ms", "right")], rows))
    for batch_size in dict.fromkeys(row["batch_size"] for row in report["kernels"]):
        for by in ("kernel", "layer"):
            rows = _figure_rows(report["kernels"], None, batch_size=batch_size, by=by)
            title = f"kernels by {'name' if by == 'kernel' else by}, batch {batch_size}"
            columns = [by, *figures[:-1], ("share of kernels", "right")]
            tables.append(_table(title, columns, rows))
    return tables


@click.command()
@click.argument("evaluation_id", metavar="ID")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table: span counts and the APPLICATION timeline; json: every span; chrome: a trace file "
    "for Perfetto (ui.perfetto.dev) or chrome://tracing.",
)
@click.option(
    "-o",
    "--output",
    metavar="FILE",
    help="Write json or chrome here ('-': stdout) [default: stdout for json, ID.trace.json for chrome].",
)
@click.option("--layers", is_flag=True, help="Where inference time went: per layer, top operators, kernels.")
@click.option(
    "--group-by",
    type=click.Choice(["layer_type", "name", "layer"]),
    default="layer_type",
    show_default=True,
    help="With --layers: group layers by type (Conv2d), by name or by layer path.",
)
@click.option(
    "--top", type=click.IntRange(min=1), default=10, show_default=True, help="With --layers: hotspots shown."
)
def trace(
    evaluation_id: str, output_format: str, output: str | None, layers: bool, group_by: str, top: int
) -> None:
    """Show or export the trace of one evaluation (ID or a unique prefix of it)."""
    trace_command(
        evaluation_id, output_format=output_format, output=output, layers=layers, group_by=group_by, top=top
    )


def trace_command(
    evaluation_id: str,
    *,
    output_format: str,
    output: str | None,
    layers: bool,
    group_by: str,
    top: int,
) -> None:
    """Show or write an evaluation's trace.

    Args:
        evaluation_id: the id or a unique prefix of it.
        output_format: table (a summary, or with `layers` the tables), json (the spans, or with
            `layers` the report the API's /layers answers) or chrome (a trace file for Perfetto).
        output: the file to write json or chrome to ("-": stdout); chrome defaults to
            "<id>.trace.json", json to stdout.
        layers: the layer breakdown, hotspots and kernels instead of the trace itself.
        group_by: the layer breakdown's grouping.
        top: hotspots per batch size.

    Raises:
        UserError: an unknown id, or options that do not go together.
    """
    if output_format not in FORMATS:
        raise UserError(f"--format {output_format!r} is not one of {', '.join(FORMATS)}", field="format")
    if layers and output_format == "chrome":
        raise UserError("--layers shows tables or JSON: use --format table or json", field="layers")
    if output is not None and output_format == "table":
        raise UserError(
            "-o/--output writes --format json or chrome; a table goes to the terminal", field="output"
        )
    from mlscope.analysis.timeline import chrome_trace, trace_summary
    from mlscope.analysis.traces import layers_report
    from mlscope.store import iter_spans, open_store

    with open_store(load_settings().store_url) as store:
        evaluation = store.get_evaluation(evaluation_id)
        full_id = evaluation["id"]
        levels = ("MODEL", "FRAMEWORK", "LIBRARY") if layers else (None,)
        spans = [span for level in levels for span in iter_spans(store, full_id, level)]
        notes = _untraced_notes(iter_spans(store, full_id, "APPLICATION")) if layers else []
    if layers:
        report = {
            "evaluation_id": full_id,
            "trace_level": evaluation["trace_level"],
            **layers_report(spans, group_by=group_by, top=top),
        }
        if output_format == "json":
            _write(json.dumps(report, indent=2), output, None)
            return
        tables = _layer_tables(report)
        if not tables:
            console.print(
                f"{full_id} has no FRAMEWORK or LIBRARY spans (trace level {evaluation['trace_level']})"
            )
        for table in tables:
            console.print(table)
        for line in notes:
            console.print(f"[yellow]note[/yellow] {line}")
        return
    if output_format == "chrome":
        document = chrome_trace(evaluation, spans)
        _write(json.dumps(document, separators=(",", ":")), output, f"{full_id}.trace.json")
        if output != "-":
            err_console.print("open it at https://ui.perfetto.dev or chrome://tracing")
        return
    if output_format == "json":
        page = {
            "evaluation_id": full_id,
            "trace_id": evaluation.get("trace_id"),
            "trace_level": evaluation["trace_level"],
            "count": len(spans),
            "spans": spans,
        }
        _write(json.dumps(page, indent=2), output, None)
        return
    for part in _summary_tables(evaluation, trace_summary(spans)):
        console.print(part)
