"""The charts of the dashboard's pages, and how a page embeds one.

The charts themselves come from analysis.chart_builders and chart_traces, the builders `mlscope plot`
uses too, so a chart has the same bins, series and notes on a page as in a PNG. A page embeds each as
`to_plotly(chart)` JSON in a <script type="application/json"> carrying the chart's kind and its
series and point counts; dashboard.js hands it to plotly.js, and a test compares what the browser
drew with what the server meant to draw.

A builder raises UserError when its chart has nothing to show (no raw latencies, no layer spans, no
load search): the page then leaves that chart out.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mlscope.analysis.chart_builders import (
    batch_curve,
    cold_start_bars,
    compare_bars,
    latency_cdf,
    latency_histogram,
    layer_bars,
    throughput_latency,
    timeline,
)
from mlscope.analysis.chart_generation import request_cdf
from mlscope.analysis.charts import Chart, to_plotly
from mlscope.contract.errors import UserError

__all__ = [
    "MAX_TIMELINE_SPANS",
    "comparison_chart",
    "embed",
    "evaluation_charts",
    "longest_spans",
    "trace_charts",
]

# A stored trace may hold 50,000 spans; a page ships at most this many.
MAX_TIMELINE_SPANS = 2000


def embed(chart: Chart) -> dict[str, Any]:
    """What a page's template needs to place a chart: its kind, counts and plotly JSON (safe inside a
    <script> element: no "<", ">" or "&" left unescaped)."""
    text = json.dumps(to_plotly(chart), separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return {
        "kind": chart.kind,
        "title": chart.title,
        "series": len(chart.series),
        "points": sum(s.points for s in chart.series),
        "notes": list(chart.notes),
        "json": text,
    }


def _drawn(build: Callable[[], Chart]) -> list[dict[str, Any]]:
    """The embedded chart, or nothing when the builder has nothing to draw."""
    try:
        return [embed(build())]
    except UserError:
        return []


def evaluation_charts(evaluation: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An evaluation's charts of its measurements: latency histogram and CDF per point (from its raw
    latencies), percentiles and throughput against the batch size, a load search's curve, a generate
    evaluation's TTFT and TPOT per request, cold start."""
    return [
        *_drawn(lambda: latency_histogram(evaluation)),
        *_drawn(lambda: latency_cdf(evaluation)),
        *_drawn(lambda: batch_curve(evaluation)),
        *_drawn(lambda: throughput_latency([evaluation])),
        *_drawn(lambda: request_cdf(evaluation)),
        *_drawn(lambda: cold_start_bars(evaluation)),
    ]


def longest_spans(
    spans: Iterable[Mapping[str, Any]], limit: int = MAX_TIMELINE_SPANS
) -> list[Mapping[str, Any]]:
    """The `limit` longest of `spans`, read as they stream (never more than `limit` held)."""
    return heapq.nlargest(limit, spans, key=lambda s: int(s["end_ns"]) - int(s["start_ns"]))


def trace_charts(
    evaluation: Mapping[str, Any],
    layer_spans: Sequence[Mapping[str, Any]],
    shown: list[Mapping[str, Any]],
    total: int,
) -> list[dict[str, Any]]:
    """The layer breakdown and the timeline of a stored trace.

    Args:
        evaluation: the evaluation the trace is of.
        layer_spans: its MODEL, FRAMEWORK and LIBRARY spans (what the layer breakdown reads).
        shown: the spans the timeline draws (`longest_spans`).
        total: how many spans the trace has, for the note when not all are drawn.
    """
    charts = _drawn(lambda: layer_bars(evaluation, layer_spans))
    try:
        chart = timeline(shown, max_spans=max(1, len(shown)))
    except UserError:
        return charts
    if total > len(shown):
        note = f"showing the {len(shown):,} longest of {total:,} spans: download the trace for all of them"
        chart = dataclasses.replace(chart, notes=(*chart.notes, note))
    return [*charts, embed(chart)]


def comparison_chart(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The comparison's grouped bars (x: model @ batch, a series per framework × system, whiskers from
    the median's interval), or None when no row has a median."""
    drawn = _drawn(lambda: compare_bars(rows))
    return drawn[0] if drawn else None
