"""/diff: is evaluation B faster than evaluation A? The verdict `mlscope diff` and GET
/api/v1/compare/diff give (one function computes all three: analysis.diff_report), as a page: per point
the ratio of medians with its interval, the verdict at the threshold, the probability that a B latency
beats an A latency and what the pair could have detected, with the ratios drawn. An inconclusive point
(no between-run spread stored) says what the pair could call and how many runs would decide.

A and B are evaluation ids (or unique prefixes) or filters (`model=resnet18,framework=onnxruntime`)
picking the latest matching evaluation, as everywhere else; the page's URL is the question, to share.
A pair that measured different workloads is refused (400), each difference listed with a link that
asks again with allow_different; so allowed, the differences stand above the verdicts.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, render_template, request, url_for

from mlscope.analysis.chart_compare import diff_ratios
from mlscope.analysis.diff_report import DifferentWorkloads
from mlscope.api.dashboard.blueprint import PageError, parse_query
from mlscope.api.dashboard.figures import embed
from mlscope.api.diff import DiffQuerySchema, diff_for
from mlscope.contract.errors import UserError

__all__ = ["diff", "register"]


def diff() -> str | tuple[str, int]:
    """The form alone without A and B; with them, the verdict per point. A side that names nothing, or a
    pair with no point in common, is a 400 page naming the field."""
    if not any(request.args.get(key, "").strip() for key in ("a", "b")):
        return render_template("dashboard/diff.html", report=None, chosen={}, rows=[], chart=None)
    query = parse_query(DiffQuerySchema())
    try:
        report = diff_for(query)
    except DifferentWorkloads as refused:
        chosen = _chosen()
        page = render_template(
            "dashboard/diff.html",
            report=None,
            chosen=chosen,
            rows=[],
            chart=None,
            different=[d.to_dict() for d in refused.differences],
            anyway_url=f"{url_for('dashboard.diff')}?{urlencode({**chosen, 'allow_different': 'true'})}",
        )
        return page, 400
    except UserError as exc:
        field = exc.field or "b"
        raise PageError(400, "A and B cannot be compared", {field: [exc.message]}) from None
    chosen = _chosen()
    return render_template(
        "dashboard/diff.html",
        report=report,
        chosen=chosen,
        rows=_rows(report),
        chart=embed(diff_ratios(report)) if report["points"] else None,
        json_url=f"{url_for('compare.diff.CompareDiff')}?{urlencode(chosen)}",
    )


def _chosen() -> dict[str, str]:
    """The query's fields the page and its links keep."""
    kept = ("a", "b", "threshold", "confidence", "same_system", "allow_different")
    return {key: request.args[key] for key in kept if request.args.get(key)}


def _change(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


def _decide(point: dict[str, Any]) -> str | None:
    """For an inconclusive point: the spread assumed, what the pair could call, the runs that would
    decide; None for any other verdict."""
    inconclusive = point.get("inconclusive")
    if not inconclusive:
        return None
    return (
        f"inconclusive: no between-run spread is stored for these series; taking separate runs to differ "
        f"by {inconclusive['assumed_between_runs'] * 100:.1f}% (sd), this pair could call "
        f"{inconclusive['could_call'] * 100:.1f}% or more ({inconclusive['power']:.0%} power); "
        f"{inconclusive['runs_needed']} more runs of each series would decide"
    )


def _rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each compared point as the table shows it."""
    rows = []
    for point in report["points"]:
        power = point.get("power") or {}
        quantiles = point.get("quantiles") or {}
        low, high = point["ci"]
        detectable = power.get("detectable")
        rows.append(
            {
                "scenario": point["scenario"],
                "batch_size": point["batch_size"],
                "verdict": point["verdict"],
                "ratio": f"{point['ratio']:.3f}",
                "change": _change(point["ratio"]),
                "interval": f"{_change(low)} … {_change(high)}",
                "p90": _change(quantiles["p90"]["ratio"]) if "p90" in quantiles else "–",
                "p99": _change(quantiles["p99"]["ratio"]) if "p99" in quantiles else "–",
                "superiority": f"{point['superiority']:.2f}",
                "detectable": f"±{detectable * 100:.1f}%" if detectable is not None else "–",
                "counts": point.get("counts") or [],
                "decide": _decide(point),
            }
        )
    return rows


def register(pages: Blueprint) -> None:
    """Adds this module's pages to the dashboard's blueprint (mlscope.api.dashboard registers them)."""
    pages.add_url_rule("/diff", view_func=diff)
