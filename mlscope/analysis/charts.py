"""Charts as data: one description of each chart, drawn alike by the dashboard and `mlscope plot`.

A builder turns results into a `Chart` (what to draw: series of points, axes, notes), never into
pixels. The dashboard hands `to_plotly(chart)` to plotly.js in the browser; `mlscope plot` draws the
same chart with matplotlib (PNG, SVG) or writes the same plotly figure into a page (HTML). So a
histogram has the same bins, a whisker the same interval and a series the same name wherever it is
seen, and a test can count a chart's series and points from its description.

Kinds (CHART_KINDS): latency (histogram per point), cdf, batch (percentiles and throughput against the
batch size), throughput-latency, layers, compare (grouped bars with the median's interval as whiskers),
cold-start, timeline (a stored trace's spans), generation (a generate evaluation's TTFT and TPOT
per request), server-metrics (the endpoint server's metrics sampled during those requests) and pareto
(a generate sweep's throughput against latency with its Pareto front); the
dashboard's /diff page draws a "diff" (analysis.chart_compare).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["CHART_KINDS", "INVALID", "Chart", "Series", "to_plotly"]

CHART_KINDS = (
    "latency", "cdf", "batch", "throughput-latency", "layers", "compare", "cold-start", "timeline",
    "generation", "server-metrics", "pareto",
)  # fmt: skip

# The end of the name of a series holding points whose measurement is not valid.
INVALID = "(invalid)"

SeriesKind = Literal["line", "bar", "scatter", "step", "hbar"]
AxisType = Literal["linear", "log", "category"]


@dataclass(frozen=True)
class Series:
    """One named series of points.

    Attributes:
        name: its legend entry (e.g. "onnxruntime · batch 1").
        x, y: the points, in order (x may be category names).
        kind: line, scatter (markers only), step (a CDF), bar (vertical: a histogram's bins or a
            group of bars) or hbar (horizontal bars: x is the length, y the category; a timeline
            gives each bar's start in `base`).
        error_low, error_high: per point, the whisker's ends as absolute values (the median's
            confidence interval); None when there is no interval.
        width: per point, a bar's width in x units (a histogram's bin width); None for the default.
        base: per point, where a bar starts (a timeline's span start); None for zero.
        axis: "y" or "y2" (a second axis on the right, e.g. throughput beside latency).
        text: per point, a hover label; None for none.
    """

    name: str
    x: Sequence[Any]
    y: Sequence[Any]
    kind: SeriesKind = "line"
    error_low: Sequence[float | None] | None = None
    error_high: Sequence[float | None] | None = None
    width: Sequence[float] | None = None
    base: Sequence[float] | None = None
    axis: Literal["y", "y2"] = "y"
    text: Sequence[str] | None = None

    def __post_init__(self) -> None:
        n = len(self.x)
        for name in ("y", "error_low", "error_high", "width", "base", "text"):
            values = getattr(self, name)
            if values is not None and len(values) != n:
                raise ValueError(f"series {self.name!r}: {name} has {len(values)} values, x has {n}")

    @property
    def points(self) -> int:
        return len(self.x)


@dataclass(frozen=True)
class Chart:
    """What to draw.

    Attributes:
        kind: one of CHART_KINDS.
        title: the chart's title.
        x_label, y_label: axis titles, with units ("latency (ms)").
        series: the series, drawn in order.
        y2_label: the right axis's title when a series is on "y2".
        x_type, y_type: linear, log or category.
        barmode: "group" (bars side by side) or "overlay" (histograms over each other).
        notes: what the reader must know that the points do not say ("3 of 12 points invalid",
            "showing the 2,000 longest of 50,000 spans").
    """

    kind: str
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    y2_label: str | None = None
    x_type: AxisType = "linear"
    y_type: AxisType = "linear"
    barmode: Literal["group", "overlay"] = "group"
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """The chart as JSON-able data (what `mlscope plot --json` prints and tests read)."""
        data = asdict(self)
        data["series"] = [
            {k: (list(v) if isinstance(v, Sequence) and not isinstance(v, str) else v) for k, v in s.items()}
            for s in data["series"]
        ]
        data["notes"] = list(self.notes)
        return data


def _trace(series: Series, barmode: str) -> dict[str, Any]:
    """One plotly trace for a series."""
    trace: dict[str, Any] = {"name": series.name, "x": list(series.x), "y": list(series.y)}
    if series.kind in ("bar", "hbar"):
        trace["type"] = "bar"
        if series.kind == "hbar":
            trace["orientation"] = "h"
        if series.width is not None:
            trace["width"] = list(series.width)
        if series.base is not None:
            trace["base"] = list(series.base)
        if barmode == "overlay":
            trace["opacity"] = 0.6
    else:
        trace["type"] = "scatter"
        trace["mode"] = {"line": "lines+markers", "scatter": "markers", "step": "lines"}[series.kind]
        if series.kind == "step":
            trace["line"] = {"shape": "hv"}
    if series.error_low is not None or series.error_high is not None:
        values = list(series.x if series.kind == "hbar" else series.y)
        low = series.error_low or [None] * len(values)
        high = series.error_high or [None] * len(values)
        error = {
            "type": "data",
            "symmetric": False,
            "array": [
                (h - v) if h is not None and v is not None else 0 for v, h in zip(values, high, strict=True)
            ],
            "arrayminus": [
                (v - lo) if lo is not None and v is not None else 0 for v, lo in zip(values, low, strict=True)
            ],
        }
        trace["error_x" if series.kind == "hbar" else "error_y"] = error
    if series.name.endswith(INVALID):
        # Drawn apart from valid points: hatched bars, crosses (as the PNG and SVG draw them).
        if series.kind in ("bar", "hbar"):
            trace["marker"] = {"pattern": {"shape": "/"}, "line": {"width": 1}}
        elif series.kind == "scatter":
            trace["marker"] = {"symbol": "x", "size": 11, "color": "red"}
    if series.axis == "y2":
        trace["yaxis"] = "y2"
    if series.text is not None:
        # Hover labels only: as `text`, plotly would also write each one on its bar, which on a
        # timeline of 2,000 spans is unreadable and costs the browser most of the chart's drawing time.
        trace["hovertext"] = list(series.text)
        trace["hoverinfo"] = "text+name"
    return trace


def to_plotly(chart: Chart) -> dict[str, Any]:
    """The chart as a plotly figure ({"data", "layout"}), for plotly.js or a plotly HTML page."""
    layout: dict[str, Any] = {
        "title": {"text": chart.title},
        "xaxis": {"title": {"text": chart.x_label}, "type": chart.x_type},
        "yaxis": {"title": {"text": chart.y_label}, "type": chart.y_type},
        "barmode": chart.barmode,
        # Shown for one series too: its name may be what says the points are invalid.
        "showlegend": True,
        "legend": {"orientation": "h"},
        "margin": {"t": 60, "r": 60},
    }
    if any(s.axis == "y2" for s in chart.series):
        layout["yaxis2"] = {"title": {"text": chart.y2_label or ""}, "overlaying": "y", "side": "right"}
    if chart.notes:
        layout["annotations"] = [
            {
                "text": " · ".join(chart.notes),
                "xref": "paper",
                "yref": "paper",
                "x": 0,
                "y": 1.08,
                "showarrow": False,
                "font": {"size": 11},
            }
        ]
    return {"data": [_trace(s, chart.barmode) for s in chart.series], "layout": layout}
