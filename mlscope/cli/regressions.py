"""`mlscope regressions --since DATE`: the history series whose median latency shifted up since a
date, by more than a threshold; exit code 1 when there are any, so that a nightly job can gate on it."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from mlscope.cli.consoles import escape
from mlscope.cli.history import change_text, detection_options, parse_moment, series_label
from mlscope.cli.options import json_flag
from mlscope.cli.render import Column, console, new_table, note, short_id, warn
from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings

__all__ = ["parse_threshold", "regressions"]


def parse_threshold(text: str) -> float:
    """`2%` or `0.02` as the fraction 0.02.

    Raises:
        UserError: naming --threshold, when `text` is neither a percentage nor a fraction below 1.
    """
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise UserError(
            f"--threshold {text!r} is not a percentage or a fraction below 1: expected e.g. 2% or 0.02",
            field="threshold",
        )
    return value


@click.command()
@click.option("--since", required=True, metavar="DATE", help="Shifts at or after (ISO 8601; UTC if no zone).")
@click.option("--until", metavar="DATE", help="Only points created before.")
@click.option("--threshold", default="2%", show_default=True, help="The smallest rise counted: 2% or 0.02.")
@click.option("-m", "--model", help="Only this model's series.")
@click.option("-f", "--framework", help="Only this framework's series.")
@click.option(
    "--system", "system_id", metavar="ID", help="Only this system's series (its id or a unique prefix)."
)
@click.option(
    "--allow-different",
    is_flag=True,
    help="Count a rise whose runs before and after measured different workloads (load or generation "
    "settings, predictor options) as a regression, the differences listed.",
)
@detection_options
@json_flag("Print the answer as one JSON document.")
def regressions(
    since: str,
    until: str | None,
    threshold: str,
    model: str | None,
    framework: str | None,
    system_id: str | None,
    allow_different: bool,
    significance: float,
    min_segment: int,
    valid_only: bool,
    as_json: bool,
) -> None:
    """The series that got slower since DATE: every series with points since then, read whole, whose
    change points since then raised the median latency by more than --threshold.

    A series' key does not hold its load or generation settings: a rise between a run before the
    change point and the latest run that measured different workloads is listed apart, each
    difference named, and not counted, unless --allow-different.

    Exit code 0 when there is none, 1 when there are some.
    """
    from mlscope.analysis.changepoints import DetectionSettings
    from mlscope.analysis.history import regressions as find_regressions
    from mlscope.store import open_store

    settings = DetectionSettings(significance=significance, min_segment=min_segment, valid_only=valid_only)
    start = parse_moment(since, "--since")
    assert start is not None
    with open_store(load_settings().store_url) as store:
        found = find_regressions(
            store,
            since=start,
            until=parse_moment(until, "--until"),
            threshold=parse_threshold(threshold),
            model=model,
            framework=framework,
            system_id=store.resolve_system_id(system_id) if system_id else None,
            settings=settings,
            allow_different=allow_different,
        )
    if as_json:
        print(json.dumps(found, indent=2))
    else:
        _print_regressions(found)
    sys.exit(1 if found["regressions"] else 0)


_COLUMNS: tuple[Column, ...] = (
    "series",
    "from",
    "evaluation",
    ("before → now ms", "right"),
    ("shift", "right"),
    "change points (shift, confidence)",
)


def _label(regression: dict[str, Any]) -> str:
    """The series' label, its model by the display name of its latest run (options in brackets)."""
    series = regression["series"]
    return escape(series_label({**series, "model": regression.get("display_name") or series["model"]}))


def _print_regressions(found: dict[str, Any]) -> None:
    since = found["since"][:19].replace("T", " ")
    regressed = found["regressions"]
    if regressed:
        table = new_table(
            f"{len(regressed)} regression(s) since {since} (rise > {found['threshold'] * 100:g}%)",
            _COLUMNS,
        )
        for regression in regressed:
            first = regression["change_points"][0]
            table.add_row(
                _label(regression),
                first["created_at"][:19].replace("T", " "),
                short_id(first["evaluation_id"]),
                f"{regression['median_before_ms']:.3f} → {regression['median_after_ms']:.3f}",
                f"[red]{regression['shift_pct']:+.1f}%[/red]",
                "; ".join(change_text(change) for change in regression["change_points"]),
            )
        console.print(table)
    else:
        console.print(f"no regression since {since} in {found['series']} series")
    for regression in found["regressions"]:
        for difference in regression.get("differences") or []:
            warn(
                f"{_label(regression)}: different workloads, compared as asked: {escape(difference['text'])}"
            )
    for refused in found.get("refused") or []:
        differences = escape("; ".join(difference["text"] for difference in refused["differences"]))
        note(
            f"{_label(refused)}: {refused['shift_pct']:+.1f}% not counted: the runs before and after "
            f"measured different workloads ({differences}); --allow-different counts it"
        )
    if found["too_short"]:
        short = found["too_short"]
        named = "; ".join(f"{series_label(s)} needs {s['needed']} more point(s)" for s in short[:5])
        more = "; ..." if len(short) > 5 else ""
        note(f"{len(short)} of {found['series']} series too short to tell: {named}{more}")
