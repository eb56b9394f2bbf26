"""A `Chart` as a file: PNG or SVG drawn by matplotlib, or a self-contained HTML page of the same plotly
figure the dashboard shows (plotly.js inlined, nothing loaded from the internet).

matplotlib draws every series kind the chart description has (bars with widths, horizontal bars
from a base, steps, lines with whiskers, markers, a right-hand axis), with the chart's title, axis
titles, series names and notes, so a PNG says what the page says. Both libraries are imported
inside the functions that use them: `mlscope` starts without them.

What a file holds is written into it for readers and tests: a PNG's and an SVG's "Description"
metadata is the JSON {"kind", "title", "series": [names], "notes"}, each series' artists carry the
id "series-<n>" in an SVG, and the page embeds the chart's description as JSON
(<script type="application/json" id="mlscope-chart">).
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlscope.analysis.chart_labels import INVALID
from mlscope.analysis.charts import Chart, Series, to_plotly
from mlscope.contract.errors import UserError

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["CHART_SUFFIXES", "chart_html", "check_chart_path", "describe", "write_chart"]

CHART_SUFFIXES = (".png", ".svg", ".html")
# A PNG's size in pixels: (width, height) inches at DPI.
FIGURE_INCHES = (11.0, 6.5)
DPI = 100
_NOTE_WIDTH = 150  # characters per line of a note under the chart
_GROUP_WIDTH = 0.8  # of a category's slot, shared by grouped bars


def describe(chart: Chart) -> dict[str, Any]:
    """What a file's metadata says the chart is: kind, title, series names, notes."""
    return {
        "kind": chart.kind,
        "title": chart.title,
        "series": [series.name for series in chart.series],
        "notes": list(chart.notes),
    }


def write_chart(chart: Chart, path: str | Path) -> Path:
    """Write the chart to `path`, drawn as its suffix says: .png, .svg (matplotlib) or .html (plotly).

    Raises:
        UserError: an unknown suffix, or a file that cannot be written (field "output").
    """
    target = Path(path)
    suffix = check_chart_path(path)
    try:
        if suffix == ".html":
            target.write_text(chart_html(chart), encoding="utf-8")
        else:
            _draw(chart, target, suffix.lstrip("."))
    except OSError as exc:
        raise UserError(f"-o {path}: cannot write it: {exc.strerror or exc}", field="output") from None
    return target


def check_chart_path(path: str | Path, option: str = "-o") -> str:
    """The format a chart file's suffix names (".png", ".svg", ".html"), checked before any work.

    Raises:
        UserError: naming `option` and the suffixes expected.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in CHART_SUFFIXES:
        shown = repr(suffix) if suffix else "no suffix"
        raise UserError(
            f"{option} {path}: cannot tell the format from {shown}: expected a file ending in "
            f"{', '.join(CHART_SUFFIXES)}",
            field="output" if option == "-o" else option.lstrip("-"),
        )
    return suffix


def chart_html(chart: Chart) -> str:
    """A whole HTML page showing the chart's plotly figure, plotly.js inlined from the plotly package."""
    import plotly.io  # type: ignore[import-untyped]  # plotly ships no types

    page = plotly.io.to_html(
        to_plotly(chart), include_plotlyjs=True, include_mathjax=False, full_html=True, validate=True
    )
    data = json.dumps(chart.to_dict()).replace("</", "<\\/")
    embedded = f'<script type="application/json" id="mlscope-chart">{data}</script>'
    return page.replace("</body>", f"{embedded}\n</body>", 1)


# ----- matplotlib ---------------------------------------------------------------------------------


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


class _Categories:
    """Positions 0, 1, 2... of an axis's category names, in the order the series first name them."""

    def __init__(self, series: Sequence[Series], attribute: str) -> None:
        self.names: dict[str, int] = {}
        for s in series:
            for value in getattr(s, attribute):
                self.names.setdefault(str(value), len(self.names))

    def positions(self, values: Sequence[Any]) -> list[float]:
        return [float(self.names[str(v)]) for v in values]


def _whiskers(series: Series, values: Sequence[Any]) -> list[list[float]] | None:
    """[below, above] distances of each whisker's ends from its point, as matplotlib's errorbar wants."""
    if series.error_low is None and series.error_high is None:
        return None
    low = series.error_low or [None] * len(values)
    high = series.error_high or [None] * len(values)
    below = [
        0.0 if lo is None or v is None else max(float(v) - lo, 0.0) for v, lo in zip(values, low, strict=True)
    ]
    above = [
        0.0 if h is None or v is None else max(h - float(v), 0.0) for v, h in zip(values, high, strict=True)
    ]
    return [below, above]


def _draw_series(
    ax: Axes, series: Series, index: int, chart: Chart, slots: tuple[int, int], axes: dict[str, _Categories]
) -> list[Any]:
    """Draw one series on `ax`; returns its artists (for the legend and the SVG ids)."""
    invalid = series.name.endswith(INVALID)
    hatch = "//" if invalid else None
    color = f"C{index % 10}"
    slot, of = slots
    if series.kind == "hbar":
        y = axes["y"].positions(series.y) if "y" in axes else [float(v) for v in series.y]
        height = _GROUP_WIDTH / of if chart.barmode == "group" else _GROUP_WIDTH
        offset = (slot - (of - 1) / 2) * height if chart.barmode == "group" else 0.0
        bars = ax.barh(
            [p + offset for p in y],
            [_number(v) for v in series.x],
            height=height,
            left=list(series.base) if series.base is not None else 0.0,
            color=color,
            alpha=0.6 if chart.barmode == "overlay" else 1.0,
            hatch=hatch,
            label=series.name,
        )
        whiskers = _whiskers(series, series.x)
        if whiskers:
            ax.errorbar(
                [_number(v) for v in series.x],
                [p + offset for p in y],
                xerr=whiskers,
                fmt="none",
                ecolor="black",
                capsize=3,
            )
        return [bars]
    x: list[float] = axes["x"].positions(series.x) if "x" in axes else [_number(v) for v in series.x]
    y = [_number(v) for v in series.y]
    if series.kind == "bar":
        if series.width is not None:
            widths: Any = list(series.width)
        else:
            widths = _GROUP_WIDTH / of if chart.barmode == "group" else _GROUP_WIDTH
        if chart.barmode == "group" and series.width is None:
            x = [p + (slot - (of - 1) / 2) * widths for p in x]
        bars = ax.bar(
            x,
            y,
            width=widths,
            color=color,
            alpha=0.6 if chart.barmode == "overlay" else 1.0,
            hatch=hatch,
            edgecolor="black" if invalid else None,
            label=series.name,
        )
        artists: list[Any] = [bars]
        whiskers = _whiskers(series, series.y)
        if whiskers:
            artists.append(ax.errorbar(x, y, yerr=whiskers, fmt="none", ecolor="black", capsize=3))
        return artists
    if series.kind == "step":
        return list(ax.step(x, y, where="post", color=color, label=series.name))
    if series.kind == "scatter":
        marker = "X" if invalid else "o"
        return [
            ax.scatter(
                x,
                y,
                marker=marker,
                s=80 if invalid else 30,
                color="red" if invalid else color,
                label=series.name,
                zorder=3,
            )
        ]
    whiskers = _whiskers(series, series.y)
    if whiskers:
        return [ax.errorbar(x, y, yerr=whiskers, fmt="-o", color=color, capsize=3, label=series.name)]
    return list(ax.plot(x, y, "-o", color=color, label=series.name))


def _set_gid(artists: Sequence[Any], index: int) -> None:
    """Name a series' artists "series-<index>-<n>" (an SVG's element ids): containers (bars, error
    bars) are not artists themselves, their parts are."""
    from matplotlib.container import Container

    parts: list[Any] = []
    for artist in artists:
        parts += (
            [c for c in artist.get_children() if c is not None] if isinstance(artist, Container) else [artist]
        )
    for n, part in enumerate(parts):
        part.set_gid(f"series-{index}-{n}")


def _draw(chart: Chart, target: Path, file_format: str) -> None:
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "mlscope"}):
        figure = Figure(figsize=FIGURE_INCHES, dpi=DPI)
        ax = figure.add_subplot()
        right = ax.twinx() if any(s.axis == "y2" for s in chart.series) else None
        axes: dict[str, _Categories] = {}
        if chart.x_type == "category":
            axes["x"] = _Categories(chart.series, "x")
        if chart.y_type == "category":
            axes["y"] = _Categories(chart.series, "y")
        bar_series = [s for s in chart.series if s.kind in ("bar", "hbar")]
        handles: list[Any] = []
        for index, series in enumerate(chart.series):
            slot = bar_series.index(series) if series in bar_series else 0
            on = right if series.axis == "y2" and right is not None else ax
            artists = _draw_series(on, series, index, chart, (slot, max(len(bar_series), 1)), axes)
            _set_gid(artists, index)
            handles.append(artists[0])
        _axes_titles(ax, right, chart, axes)
        if handles:
            ax.legend(handles=handles, labels=[s.name for s in chart.series], fontsize=8, loc="best")
        notes = [line for note in chart.notes for line in textwrap.wrap(note, _NOTE_WIDTH)]
        if notes:
            figure.text(0.01, 0.01, "\n".join(notes), fontsize=8, va="bottom", ha="left", gid="notes")
        figure.subplots_adjust(
            left=0.2 if chart.y_type == "category" else 0.08,
            right=0.9,
            top=0.92,
            bottom=min(0.12 + 0.022 * len(notes) + (0.08 if "x" in axes else 0.0), 0.5),
        )
        figure.savefig(target, format=file_format, metadata={"Description": json.dumps(describe(chart))})


def _axes_titles(ax: Axes, right: Axes | None, chart: Chart, axes: dict[str, _Categories]) -> None:
    ax.set_title(chart.title, fontsize=11)
    ax.set_xlabel(chart.x_label)
    ax.set_ylabel(chart.y_label)
    if right is not None:
        right.set_ylabel(chart.y2_label or "")
    if "x" in axes:
        names = list(axes["x"].names)
        ax.set_xticks(
            range(len(names)),
            names,
            rotation=30 if len(names) > 4 else 0,
            ha="right" if len(names) > 4 else "center",
            fontsize=8,
        )
    else:
        if chart.x_type == "log":
            ax.set_xscale("log")
        if chart.kind == "batch":  # ticks at the batch sizes measured, not at 1.5 or 10^0.5
            sizes = sorted({float(v) for s in chart.series for v in s.x})
            ax.set_xticks(sizes, [f"{v:g}" for v in sizes])
            ax.minorticks_off()
    if "y" in axes:
        names = list(axes["y"].names)
        ax.set_yticks(range(len(names)), names, fontsize=8)
    elif chart.y_type == "log":
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
