"""`mlscope diff A B`: is B faster than A, by how much, and how sure; per point both measured, from the
raw latencies in the local store (as `mlscope results` reads it). The statistics and the verdict rule
are `mlscope.analysis.diff`'s; docs/verdicts.md explains them.

Exit code 0 for a completed diff whatever its verdicts ("slower" is an answer, not a failure); 2 for
a mistake (an unknown id, a filter nothing matches, no point in common, --same-system on two systems).
"""

from __future__ import annotations

import json
from typing import Any

import click

from mlscope.analysis.verdicts import (
    DEFAULT_CONFIDENCE,
    DEFAULT_THRESHOLD,
    FASTER,
    INCONCLUSIVE,
    MIN_OTHER_RUNS,
    NO_DIFFERENCE,
    SLOWER,
)
from mlscope.cli.consoles import escape
from mlscope.cli.options import json_flag, plot_option
from mlscope.cli.render import console, new_table, note, short_id
from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings

__all__ = ["change_text", "diff", "power_text", "print_differences", "print_report"]


@click.command()
@click.argument("a", metavar="A")
@click.argument("b", metavar="B", required=False)
@click.option(
    "--threshold",
    type=float,
    default=DEFAULT_THRESHOLD,
    show_default=True,
    help="The smallest relative difference that matters (0.02 = 2%).",
)
@click.option(
    "--confidence", type=float, default=DEFAULT_CONFIDENCE, show_default=True, help="Level of every interval."
)
@click.option(
    "--same-system",
    is_flag=True,
    help="Refuse to compare results from different machines or software stacks (docs/history.md).",
)
@click.option(
    "--allow-different",
    is_flag=True,
    help="Compare A and B even when they measured different workloads (model, model options, "
    "predictor options, load or generation settings); the differences are listed above the table.",
)
@click.option(
    "--against-history",
    is_flag=True,
    help="Judge A against its history series (the runs before it since the series' last change "
    "point) instead of against a B.",
)
@plot_option("Also write the ratios B / A with their intervals as a chart (.png, .svg or .html).")
@json_flag("Print the diff as JSON: per point ratio, ci, verdict, power and the rest.")
def diff(
    a: str,
    b: str | None,
    threshold: float,
    confidence: float,
    same_system: bool,
    allow_different: bool,
    against_history: bool,
    plot_file: str | None,
    as_json: bool,
) -> None:
    """Compare evaluation B with evaluation A at every (scenario, batch size) both measured, or with
    --against-history judge A against the earlier runs of its series.

    A and B are each an evaluation id (or a unique prefix), or a filter such as
    model=resnet18,framework=onnxruntime[,system=ID,device=cpu,scenario=single_stream,batch_size=1],
    which picks the latest succeeded evaluation matching it.

    A pair that measured different workloads (another model definition or model options, predictor
    options, load or generation settings) is refused, naming each difference, unless --allow-different.
    """
    from mlscope.analysis.diff_report import diff_evaluations
    from mlscope.store import open_store

    if against_history == (b is not None):
        raise UserError(
            "give B, or --against-history to judge A against its series, not both"
            if against_history
            else "missing B: the evaluation to compare with A (or --against-history)",
            field="b",
        )
    if plot_file is not None and against_history:
        raise UserError("--plot draws B against A: not with --against-history", field="plot")
    with open_store(load_settings().store_url) as store:
        if against_history:
            _against_history(store, a, threshold, as_json)
            return
        assert b is not None
        report = diff_evaluations(
            store,
            a,
            b,
            threshold=threshold,
            confidence=confidence,
            same_system=same_system,
            allow_different=allow_different,
        )
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    if plot_file is not None:
        from mlscope.analysis.chart_compare import diff_ratios
        from mlscope.cli.plot import write_plot

        write_plot(diff_ratios(report), plot_file)


def _against_history(store: Any, a: str, threshold: float, as_json: bool) -> None:
    """A judged against its series (mlscope.analysis.history.against_history), printed."""
    from mlscope.analysis.diff_report import pick_evaluation
    from mlscope.analysis.history import against_history

    picked = pick_evaluation(store, a, side="a")
    points = against_history(store, picked.evaluation["id"], threshold=threshold)
    if as_json:
        print(
            json.dumps({"a": picked.describe(), "threshold": threshold, "against_history": points}, indent=2)
        )
        return
    console.print(_side_line("A", picked.describe()))
    table = new_table(
        f"A against its series (threshold {threshold * 100:g}%)",
        (
            ("scenario", "left"),
            ("batch", "right"),
            ("median ms", "right"),
            ("series median ms", "right"),
            ("runs", "right"),
            ("A / series", "left"),
            ("verdict", "left"),
        ),
    )
    for point in points:
        segment = point["segment"]
        ratio, ci = point["ratio"], point["ci"]
        change = "-" if ratio is None else f"{ratio - 1:+.1%} (95% CI {ci[0] - 1:+.1%} to {ci[1] - 1:+.1%})"
        series_median = segment.get("median_ms")
        table.add_row(
            point["scenario"],
            str(point["batch_size"]),
            f"{point['median_ms']:.3f}",
            "-" if series_median is None else f"{series_median:.3f}",
            str(segment.get("points", 0)),
            change,
            point["verdict"],
        )
    console.print(table)
    for point in points:
        if point.get("other_workloads"):
            note(
                f"{point['scenario']} batch {point['batch_size']}: {point['other_workloads']} run(s) of the "
                "series measured another workload (load, generation or model settings) and are left out"
            )
        if point.get("needed"):
            note(
                f"{point['scenario']} batch {point['batch_size']}: the series needs {point['needed']} more "
                "run(s) before a verdict"
            )


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def change_text(point: dict[str, Any]) -> str:
    """The median's change with its interval, e.g. `slower by 10.2% (95% CI 9.1–11.3%)`; a
    difference that is not detected reads `+0.4% (95% CI −1.2% to +2.0%)`."""
    level = f"{point['confidence'] * 100:g}%"
    low, high = point["ci"]
    if point["verdict"] == SLOWER:
        return (
            f"slower by {_percent(point['ratio'] - 1)} ({level} CI {_percent(low - 1)}–{_percent(high - 1)})"
        )
    if point["verdict"] == FASTER:
        return (
            f"faster by {_percent(1 - point['ratio'])} ({level} CI {_percent(1 - high)}–{_percent(1 - low)})"
        )
    return f"{point['ratio'] - 1:+.1%} ({level} CI {low - 1:+.1%} to {high - 1:+.1%})"


def power_text(point: dict[str, Any]) -> str:
    """What the pair could detect, e.g. `no detectable difference; 3,000 more samples each would
    detect 2%` or `detects 1.1% or more (80% power)`; with no series known, what it could call at the
    assumed between-run spread (`_assumed_text`)."""
    power = point["power"]
    threshold = f"{point['threshold'] * 100:g}%"
    if not point.get("series_known", True):
        return _assumed_text(point)
    if power["samples_needed"] is None:
        spread = max(point["spread"][side]["between_runs"] for side in ("A", "B"))
        verdict = "no detectable difference; " if point["verdict"] == NO_DIFFERENCE else ""
        return (
            f"{verdict}smallest detectable {_percent(power['detectable'])}; no run length would detect "
            f"{threshold}: separate runs of this series differ by {_percent(spread)} (sd)"
        )
    if point["verdict"] == NO_DIFFERENCE:
        if power["more_samples"] > 0:
            return (
                f"no detectable difference; {power['more_samples']:,} more samples each would detect "
                f"{threshold} (smallest detectable now {_percent(power['detectable'])})"
            )
        return (
            f"no difference of {threshold} or more; this pair resolves {threshold} "
            f"(smallest change it calls: {_percent(power['detectable'])})"
        )
    return f"detects {_percent(power['detectable'])} or more ({power['power']:.0%} power)"


def _assumed_text(point: dict[str, Any]) -> str:
    """The power line of a pair with no between-run spread stored: the spread assumed (and where it
    came from), what the pair could call with it, and for an inconclusive pair the runs that would
    decide."""
    power = point["power"]
    sd = point.get("assumed_between_runs")
    assumed = point.get("assumed_spread") or {}
    if assumed.get("source") == "system":
        source = f"the spread of {assumed['series']} other series on this system"
    elif assumed.get("source") == "default":
        source = f"the default: no series on this system has {MIN_OTHER_RUNS} runs"
    else:
        source = "assumed"
    spread = f"separate runs taken to differ by {_percent(sd or 0.0)} (sd, {source})"
    could = f"this pair could call {_percent(power['detectable'])} or more ({power['power']:.0%} power)"
    if point["verdict"] == INCONCLUSIVE:
        runs = (point.get("inconclusive") or {}).get("runs_needed", MIN_OTHER_RUNS)
        return (
            f"inconclusive: {_percent(abs(point['ratio'] - 1))} is within what separate runs differ by; "
            f"fewer than {MIN_OTHER_RUNS} other runs of these series are stored, {spread}: {could}; "
            f"{runs} more runs of each series would decide"
        )
    verdict = "no detectable difference; " if point["verdict"] == NO_DIFFERENCE else ""
    return (
        f"{verdict}fewer than {MIN_OTHER_RUNS} other runs of these series are stored, {spread}: {could}; "
        f"{MIN_OTHER_RUNS} runs of each would say how much separate runs differ"
    )


def _side_line(label: str, side: dict[str, Any]) -> str:
    version = side.get("framework_version") or ""
    where = side.get("hostname") or (side.get("system_id") or "-")[:8]
    name = escape(side.get("display_name") or side["model"])
    return (
        f"{label}: {short_id(side['id'])} {name} on {side['framework']} {version} "
        f"({side['device']}, {where}, {side['created_at'][:19].replace('T', ' ')}) — {escape(side['picked'])}"
    )


def print_differences(differences: list[dict[str, Any]]) -> None:
    """The workload differences a diff was allowed to compare across, as a warning block: the
    verdicts below compare unlike workloads."""
    if not differences:
        return
    lines = "\n".join(f"  {escape(difference['text'])}" for difference in differences)
    console.print(
        "[bold yellow]warning: A and B measured different workloads (compared with --allow-different); "
        f"the verdicts below compare unlike things:[/bold yellow]\n{lines}",
        highlight=False,
    )


def print_report(report: dict[str, Any]) -> None:
    console.print(_side_line("A", report["a"]))
    console.print(_side_line("B", report["b"]))
    print_differences(report.get("differences") or [])
    table = new_table(
        f"B against A (threshold {report['threshold'] * 100:g}%)",
        (
            ("scenario", "left"),
            ("batch", "right"),
            ("median B/A", "left"),
            ("p90 B/A", "right"),
            ("p99 B/A", "right"),
            ("P(B faster)", "right"),
            ("verdict", "left"),
        ),
    )
    for point in report["points"]:
        quantiles = point["quantiles"]
        table.add_row(
            point["scenario"],
            str(point["batch_size"]),
            change_text(point),
            f"{quantiles['p90']['ratio']:.3f}",
            f"{quantiles['p99']['ratio']:.3f}",
            f"{point['superiority']:.2f}",
            point["verdict"],
        )
    console.print(table)
    for point in report["points"]:
        console.print(f"{point['scenario']} batch {point['batch_size']}: {power_text(point)}")
    for refused in report["refused"]:
        note(f"{refused['scenario']} batch {refused['batch_size']} not compared: {refused['reason']}")
    for unmatched in report["unmatched"]:
        note(
            f"{unmatched['scenario']} batch {unmatched['batch_size']} measured by {unmatched['side']} only: "
            "not compared"
        )
