"""The charts of the dashboard's pages, and how a page embeds one.

The charts themselves come from analysis.chart_builders and chart_traces, the builders `mlscope plot`
uses too, so a chart has the same bins, series and notes on a page as in a PNG. A page embeds each as
`to_plotly(chart)` JSON in a <script type="application/json"> carrying the chart's kind and its
series and point counts; dashboard.js hands it to plotly.js, and a test compares what the browser
drew with what the server meant to draw.

A builder raises UserError when its chart has nothing to show (no raw latencies, no layer spans, no
load search): the page then leaves that chart out.

What a page changes, for a reader in a browser (`page_layout`): the chart's title and notes are the
figure's HTML heading and caption (each note said once per page, under the first chart it concerns),
the legend sits above the plot where no axis title is, a log axis is labelled with values and units
("0.5 ms") instead of plotly's bare mantissas, and a right-hand axis (throughput) starts at zero so a
flat line does not look like a cliff. The latency histogram bins each point over its own range
(`point_histograms`): batch 1 and batch 8 can be ten times apart, and shared bins made one of them a
single bar.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mlscope.analysis.chart_builders import (
    CDF_LOG_SPREAD,
    batch_curve,
    cold_start_bars,
    compare_bars,
    evaluation_label,
    latency_cdf,
    latency_histogram,
    layer_bars,
    throughput_latency,
    timeline,
)
from mlscope.analysis.chart_generation import pareto_chart, request_cdf, server_metrics_chart
from mlscope.analysis.chart_labels import point_name
from mlscope.analysis.charts import Chart, Series, to_plotly
from mlscope.contract.errors import UserError

__all__ = [
    "MAX_TIMELINE_SPANS",
    "comparison_chart",
    "embed",
    "evaluation_charts",
    "longest_spans",
    "page_layout",
    "point_histograms",
    "trace_charts",
]

# A stored trace may hold 50,000 spans; a page ships at most this many.
MAX_TIMELINE_SPANS = 2000


# The latency histogram's note on the latencies beyond its last bin (analysis.chart_builders) ends so.
_BEYOND_NOTE = "beyond the chart"
# A log axis is labelled at 1, 2 and 5 times each power of ten its data reaches.
_LOG_STEPS = (1.0, 2.0, 5.0)
_UNIT = re.compile(r"\(([^();]+)[;)]")


def _unit(title: str) -> str:
    """The unit an axis title names: "latency (ms)" → "ms", "achieved throughput (samples/s; ...)" →
    "samples/s", "ms" → "ms"; "" when it names none."""
    found = _UNIT.findall(title)
    if found:
        return str(found[-1]).strip()
    return title.strip() if title.strip() in ("ms", "s", "samples/s") else ""


def _number(value: float) -> str:
    return f"{value:,.6g}"


def _log_ticks(values: Sequence[float], title: str) -> dict[str, Any]:
    """Tick values and labels for a log axis over `values`: the batch sizes themselves on a batch-size
    axis ("batch 8"), else 1-2-5 steps of each decade with the axis's unit ("0.05 ms", "2,000
    samples/s")."""
    positive = sorted({float(v) for v in values if isinstance(v, int | float) and v > 0})
    if not positive:
        return {}
    if title.strip() == "batch size":
        return {"tickvals": positive, "ticktext": [f"batch {_number(v)}" for v in positive]}
    low, high = positive[0], positive[-1]
    ticks = [
        step * 10.0**decade
        for decade in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
        for step in _LOG_STEPS
        if low / 1.5 <= step * 10.0**decade <= high * 1.5
    ]
    unit = _unit(title)
    return {"tickvals": ticks, "ticktext": [f"{_number(v)} {unit}".strip() for v in ticks]}


def page_layout(figure: dict[str, Any]) -> dict[str, Any]:
    """A plotly figure (`to_plotly`) as a dashboard page draws it: no title or notes inside the plot
    (the page's heading and caption say them), the legend above the plot area, log axes labelled
    with values and units, a right-hand axis from zero."""
    layout = dict(figure["layout"])
    layout.pop("title", None)
    layout.pop("annotations", None)
    # Above the plot area: below it, plotly draws a horizontal legend over the x axis's title.
    layout["legend"] = {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"}
    layout["margin"] = {"t": 30, "r": 60}
    for axis, values in (
        ("xaxis", [v for trace in figure["data"] for v in trace.get("x") or []]),
        ("yaxis", [v for t in figure["data"] if t.get("yaxis") != "y2" for v in t.get("y") or []]),
    ):
        settings = dict(layout.get(axis) or {})
        if settings.get("type") == "log":
            settings.update(_log_ticks(values, str((settings.get("title") or {}).get("text") or "")))
            layout[axis] = settings
    if "yaxis2" in layout:
        # Both axes from zero, each with its own ticks: plotly's default for an overlaying axis puts its
        # ticks on the left axis's grid, which labels the right axis's bottom gridline with no zero.
        layout["yaxis"] = {**layout["yaxis"], "rangemode": "tozero"}
        layout["yaxis2"] = {**layout["yaxis2"], "rangemode": "tozero", "tickmode": "auto", "showgrid": False}
    return {**figure, "layout": layout}


def embed(chart: Chart, said: set[str] | None = None) -> dict[str, Any]:
    """What a page's template needs to place a chart: its kind, title, counts, caption notes and plotly
    JSON as the page draws it (`page_layout`; safe inside a <script> element: no "<", ">" or "&" left
    unescaped).

    Args:
        said: the notes earlier charts of the page gave; a note among them is not given again, and
            this chart's are added.
    """
    figure = page_layout(to_plotly(chart))
    text = json.dumps(figure, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    notes = list(dict.fromkeys(note for note in chart.notes if said is None or note not in said))
    if said is not None:
        said.update(notes)
    return {
        "kind": chart.kind,
        "title": chart.title,
        "series": len(chart.series),
        "points": sum(s.points for s in chart.series),
        "notes": notes,
        "json": text,
    }


def _drawn(build: Callable[[], Chart], said: set[str] | None = None) -> list[dict[str, Any]]:
    """The embedded chart, or nothing when the builder has nothing to draw."""
    try:
        return [embed(build(), said)]
    except UserError:
        return []


def point_histograms(evaluation: Mapping[str, Any]) -> Chart:
    """The latency histogram (analysis.chart_builders.latency_histogram) with each point binned over
    its own range: a series per point as there, each with bins of its own, and a note per point whose
    slowest latencies lie beyond its last bin.

    Raises:
        UserError: the evaluation has no raw latencies.
    """
    whole = latency_histogram(evaluation)
    series: list[Series] = []
    beyond: list[str] = []
    measurements = sorted(
        (m for m in evaluation.get("measurements") or [] if len(m.get("latencies_ns") or [])),
        key=lambda m: (str(m["scenario"]), int(m["batch_size"])),
    )
    for measurement in measurements:
        try:
            own = latency_histogram({**evaluation, "measurements": [measurement]})
        except UserError:  # no finite latency among its raw ones
            continue
        series += own.series
        beyond += [f"{point_name(measurement)}: {note}" for note in own.notes if _BEYOND_NOTE in note]
    notes = tuple(note for note in whole.notes if _BEYOND_NOTE not in note) + tuple(beyond)
    # Points far apart (batch 1 at 0.05 ms, batch 8 at 2 ms) are read on a log axis, as the CDF is:
    # on a linear one the faster point's bins, however many, are a sliver at the left edge.
    edges = [x for s in series for x in s.x]
    spread = bool(edges) and min(edges) > 0 and max(edges) / min(edges) >= CDF_LOG_SPREAD
    return dataclasses.replace(
        whole, series=tuple(series), notes=notes, x_type="log" if spread else whole.x_type
    )


def _of_this_page(chart: Chart, evaluation: Mapping[str, Any]) -> Chart:
    """A chart of several evaluations drawn for one on its own page: its notes name the points as the
    page's other charts do, without the evaluation's label the page's heading gives."""
    label = f"{evaluation_label(evaluation)} "
    return dataclasses.replace(chart, notes=tuple(note.replace(label, "") for note in chart.notes))


def evaluation_charts(evaluation: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An evaluation's charts of its measurements: latency histogram (bins per point) and CDF per point
    (from its raw latencies), percentiles and throughput against the batch size, a load search's
    curve, a generate evaluation's TTFT and TPOT per request and the server's metrics under them,
    a sweep's throughput against latency with its Pareto front, cold start. A note several charts share
    (the invalid points) is given under the first only."""
    said: set[str] = set()
    return [
        *_drawn(lambda: point_histograms(evaluation), said),
        *_drawn(lambda: latency_cdf(evaluation), said),
        *_drawn(lambda: batch_curve(evaluation), said),
        *_drawn(lambda: _of_this_page(throughput_latency([evaluation]), evaluation), said),
        *_drawn(lambda: request_cdf(evaluation), said),
        *_drawn(lambda: server_metrics_chart(evaluation), said),
        *_drawn(lambda: pareto_chart(evaluation), said),
        *_drawn(lambda: cold_start_bars(evaluation), said),
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
