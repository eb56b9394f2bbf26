"""The chart of a verdict: is B faster than A at each point both measured (`mlscope diff`, the
dashboard's /diff page).

One marker per compared point at the ratio of B's median to A's with its interval as whiskers,
grouped into a series per verdict (faster, slower, no detectable difference) so the legend reads
the answer; the threshold and the points not compared are said in notes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlscope.contract.errors import UserError

from .chart_labels import point_name
from .charts import Chart, Series

__all__ = ["diff_ratios"]

# The order the verdicts' series are drawn and listed in.
_VERDICTS = ("faster", "slower", "no detectable difference")


def _side(report: Mapping[str, Any], key: str) -> str:
    side = report.get(key) or {}
    version = f" {side['framework_version']}" if side.get("framework_version") else ""
    where = side.get("hostname") or (side.get("system_id") or "")[:8]
    label = f"{side.get('model', '?')} · {side.get('framework', '?')}{version}"
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
