"""Charts that compare: the comparison's grouped bars (`compare_bars`: models × frameworks × systems,
`mlscope compare --plot`, the dashboard's /compare) and a verdict's ratios (`diff_ratios`: is B faster
than A at each point both measured, `mlscope diff --plot`, the dashboard's /diff).

A verdict has one marker per compared point at the ratio of B's median to A's with its interval as whiskers,
grouped into a series per verdict (faster, slower, inconclusive, no detectable difference) so the legend
reads the answer; the threshold and the points not compared are said in notes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mlscope.analysis.chart_labels import INVALID, invalid_note, point_name
from mlscope.analysis.charts import Chart, Series
from mlscope.contract.errors import UserError

__all__ = ["compare_bars", "diff_ratios"]

# The order the verdicts' series are drawn and listed in.
_VERDICTS = ("faster", "slower", "inconclusive", "no detectable difference")


def _side(report: Mapping[str, Any], key: str) -> str:
    side = report.get(key) or {}
    version = f" {side['framework_version']}" if side.get("framework_version") else ""
    where = side.get("hostname") or (side.get("system_id") or "")[:8]
    label = f"{side.get('display_name') or side.get('model', '?')} · {side.get('framework', '?')}{version}"
    return f"{label} · {where}" if where else label


def diff_ratios(report: Mapping[str, Any]) -> Chart:
    """The median ratio B / A per point, with its interval, a series per verdict.

    Args:
        report: what `analysis.diff_report.diff_evaluations` returns (GET /api/v1/compare/diff).

    Raises:
        UserError: the report compared no point.
    """
    points = report.get("points") or []
    if not points:
        raise UserError("the diff compared no point: nothing to draw", field="points")
    series = []
    for verdict in (*_VERDICTS, *sorted({str(p.get("verdict")) for p in points} - set(_VERDICTS))):
        chosen = [p for p in points if p.get("verdict") == verdict]
        if not chosen:
            continue
        series.append(
            Series(
                name=f"B {verdict}" if verdict in ("faster", "slower") else verdict,
                x=[point_name(p) for p in chosen],
                y=[float(p["ratio"]) for p in chosen],
                kind="scatter",
                error_low=[float(p["ci"][0]) for p in chosen],
                error_high=[float(p["ci"][1]) for p in chosen],
                text=[
                    f"{(float(p['ratio']) - 1) * 100:+.1f}% [{(p['ci'][0] - 1) * 100:+.1f}%, "
                    f"{(p['ci'][1] - 1) * 100:+.1f}%], P(B < A) {float(p.get('superiority', 0.5)):.2f}"
                    for p in chosen
                ],
            )
        )
    threshold = float(report.get("threshold") or 0.0)
    confidence = float(report.get("confidence") or 0.95)
    notes = [
        f"A: {_side(report, 'a')} · B: {_side(report, 'b')}",
        f"below 1: B faster; a difference counts beyond ±{threshold:.0%}; "
        f"whiskers: {confidence:.0%} intervals",
    ]
    refused = report.get("refused") or []
    if refused:
        notes.append(
            f"{len(refused)} point(s) not compared: "
            + "; ".join(f"{point_name(r)} ({r.get('reason', '?')})" for r in refused)
        )
    return Chart(
        kind="diff",
        title="B against A: ratio of medians",
        x_label="point",
        y_label="median B / median A",
        series=tuple(series),
        x_type="category",
        notes=tuple(notes),
    )


def _system_of(row: Mapping[str, Any]) -> str:
    return str(row.get("agent_id") or row.get("hostname") or (row.get("system_id") or "-")[:8])


def _bar_text(row: Mapping[str, Any]) -> str:
    """A comparison bar's hover text: its median and count, and an invalid row's reasons in full."""
    text = f"{row['median_ms']:.3f} ms, {row.get('count') or '?'} latencies"
    if not row.get("valid", True):
        text += f"; invalid: {'; '.join(row.get('reasons') or ['no reason recorded'])}"
    return text


def _named(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """A row's model as shown (its display name; the bare name from an API without one), batch size
    and scenario."""
    return (row.get("display_name") or row["model"], row["batch_size"], row["scenario"])


def compare_bars(rows: Sequence[Mapping[str, Any]]) -> Chart:
    """Grouped bars of the comparison: x "model @ batch" (the model by its display name, with the
    start of its workload key where one name @ batch measured several workloads, a server's rates
    say; and the scenario when rows mix them), one
    series per framework × system (and device when rows mix them), y the median with its
    confidence interval as whiskers; an invalid row's bar is in a series "... (invalid)".

    Args:
        rows: comparison rows (Store.compare, GET /compare).

    Raises:
        UserError: no row has a median.
    """
    drawn = [row for row in rows if row.get("median_ms") is not None]
    if not drawn:
        raise UserError(
            f"nothing to compare: {len(rows)} row(s), none with a median latency; expected rows of "
            "succeeded evaluations (check the filter)",
            field="rows",
        )
    mixed_scenarios = len({row["scenario"] for row in drawn}) > 1
    mixed_devices = len({row.get("device") for row in drawn}) > 1
    versions: dict[str, set[Any]] = {}
    for row in drawn:
        versions.setdefault(row["framework"], set()).add(row.get("framework_version"))

    workloads: dict[tuple[Any, ...], set[Any]] = {}
    for row in drawn:
        workloads.setdefault(_named(row), set()).add(row.get("workload_key"))

    def category(row: Mapping[str, Any]) -> str:
        scenario = f" {row['scenario']}" if mixed_scenarios else ""
        name, batch_size, _ = _named(row)
        key = f" [{str(row.get('workload_key'))[:6]}]" if len(workloads[_named(row)]) > 1 else ""
        return f"{name}{key} @ {batch_size}{scenario}"

    def group(row: Mapping[str, Any]) -> str:
        framework = row["framework"]
        if len(versions[framework]) > 1 and row.get("framework_version"):
            framework += f" {row['framework_version']}"
        device = f" {row.get('device')}" if mixed_devices else ""
        return f"{framework} · {_system_of(row)}{device}"

    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in drawn:
        name = group(row) + ("" if row.get("valid", True) else f" {INVALID}")
        groups.setdefault(name, []).append(row)
    series = [
        Series(
            name=name,
            x=[category(r) for r in members],
            y=[r["median_ms"] for r in members],
            kind="bar",
            error_low=[r.get("ci_low_ms") for r in members],
            error_high=[r.get("ci_high_ms") for r in members],
            text=[_bar_text(r) for r in members],
        )
        for name, members in groups.items()
    ]
    named = [
        (
            f"{group(r)} {category(r)}",
            {"validity": {"valid": r.get("valid", True), "reasons": r.get("reasons")}},
        )
        for r in drawn
    ]
    notes = invalid_note(named)
    if len(drawn) < len(rows):
        notes += (f"{len(rows) - len(drawn)} row(s) without a median latency not drawn",)
    return Chart(
        kind="compare",
        title="median latency compared",
        x_label="model @ batch size",
        y_label="median latency (ms)",
        series=tuple(series),
        x_type="category",
        notes=(*notes, "whiskers: the median's confidence interval"),
    )
