"""The charts of the dashboard's pages, as analysis.charts descriptions, and how a page embeds one.

A page embeds each chart as `to_plotly(chart)` JSON in a <script type="application/json"> that
carries the chart's kind and its series and point counts; dashboard.js hands it to plotly.js. The
counts let a test check what the browser drew against what the server meant to draw.

The builders here are the dashboard's own minimal ones (latency histogram and CDF per point,
percentiles and throughput against the batch size, cold start, layers, timeline, comparison).
"""

from __future__ import annotations

import heapq
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from mlscope.analysis.charts import Chart, Series, to_plotly

__all__ = [
    "HISTOGRAM_BINS",
    "MAX_CDF_POINTS",
    "MAX_TIMELINE_SPANS",
    "batch_chart",
    "cdf_chart",
    "cold_start_chart",
    "compare_chart",
    "compare_series_name",
    "embed",
    "histogram_chart",
    "layers_chart",
    "longest_spans",
    "timeline_chart",
]

HISTOGRAM_BINS = 40
# A CDF drawn from more points than a chart is wide shows nothing more.
MAX_CDF_POINTS = 400
# A stored trace may hold 50,000 spans; a page ships at most this many.
MAX_TIMELINE_SPANS = 2000
MAX_LAYER_ROWS = 15
_NS_PER_MS = 1e6


def embed(chart: Chart) -> dict[str, Any]:
    """What a page's template needs to place a chart: its kind, counts and plotly JSON (safe to put
    inside a <script> element: no "<", ">" or "&" left unescaped)."""
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


def _label(measurement: Mapping[str, Any]) -> str:
    return f"{measurement['scenario']} · batch {measurement['batch_size']}"


def _latencies_ms(measurement: Mapping[str, Any]) -> np.ndarray | None:
    raw = measurement.get("latencies_ns")
    if not raw:
        return None
    return np.asarray(raw, dtype=np.float64) / _NS_PER_MS


def _invalid_note(measurements: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    invalid = sum(1 for m in measurements if (m.get("validity") or {}).get("valid") is not True)
    return (f"{invalid} of {len(measurements)} points invalid",) if invalid else ()


def histogram_chart(measurements: Sequence[Mapping[str, Any]]) -> Chart | None:
    """One histogram of the raw latencies per measured point (overlaid); None when none kept any."""
    series = []
    for measurement in measurements:
        values = _latencies_ms(measurement)
        if values is None:
            continue
        counts, edges = np.histogram(values, bins=HISTOGRAM_BINS)
        centres = (edges[:-1] + edges[1:]) / 2
        series.append(
            Series(
                name=_label(measurement),
                x=[round(float(c), 6) for c in centres],
                y=[int(c) for c in counts],
                kind="bar",
                width=[float(w) for w in np.diff(edges)],
            )
        )
    if not series:
        return None
    return Chart(
        kind="latency",
        title="Latency histogram per point",
        x_label="latency (ms)",
        y_label="inferences",
        series=tuple(series),
        barmode="overlay",
        notes=_invalid_note(measurements),
    )


def cdf_chart(measurements: Sequence[Mapping[str, Any]]) -> Chart | None:
    """The latency CDF per measured point (at most MAX_CDF_POINTS each); None when none kept latencies."""
    series = []
    for measurement in measurements:
        values = _latencies_ms(measurement)
        if values is None:
            continue
        ordered = np.sort(values)
        picks = np.unique(np.linspace(0, len(ordered) - 1, min(MAX_CDF_POINTS, len(ordered))).astype(int))
        series.append(
            Series(
                name=_label(measurement),
                x=[float(ordered[i]) for i in picks],
                y=[float((i + 1) / len(ordered)) for i in picks],
                kind="step",
            )
        )
    if not series:
        return None
    return Chart(
        kind="cdf",
        title="Latency CDF per point",
        x_label="latency (ms)",
        y_label="fraction of inferences",
        series=tuple(series),
    )


def batch_chart(measurements: Sequence[Mapping[str, Any]]) -> Chart | None:
    """Median (with its interval), p90 and p99 latency and throughput against the batch size, per
    scenario; None without measurements."""
    by_scenario: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for measurement in measurements:
        by_scenario[str(measurement["scenario"])].append(measurement)
    series: list[Series] = []
    for scenario, points in by_scenario.items():
        points = sorted(points, key=lambda m: int(m["batch_size"]))
        sizes = [int(m["batch_size"]) for m in points]
        latency = [m.get("latency_ms") or {} for m in points]
        ci = [lat.get("median_ci") or [None, None] for lat in latency]
        series.append(
            Series(
                name=f"median · {scenario}",
                x=sizes,
                y=[lat.get("median") for lat in latency],
                error_low=[c[0] for c in ci],
                error_high=[c[1] for c in ci],
            )
        )
        for key in ("p90", "p99"):
            series.append(Series(name=f"{key} · {scenario}", x=sizes, y=[lat.get(key) for lat in latency]))
        series.append(
            Series(
                name=f"throughput · {scenario}",
                x=sizes,
                y=[m.get("throughput") for m in points],
                kind="scatter",
                axis="y2",
            )
        )
    if not series:
        return None
    return Chart(
        kind="batch",
        title="Latency percentiles and throughput against the batch size",
        x_label="batch size",
        y_label="latency (ms)",
        y2_label="throughput (samples/s)",
        series=tuple(series),
        x_type="log",
        notes=_invalid_note(measurements),
    )


def cold_start_chart(cold_start: Mapping[str, Any] | None) -> Chart | None:
    """The cold start's phases as bars; None when it was not measured."""
    if not cold_start:
        return None
    phases = [
        (label, cold_start.get(key))
        for key, label in (
            ("import_ms", "framework import"),
            ("load_ms", "model load"),
            ("first_inference_ms", "first inference"),
        )
    ]
    phases = [(label, value) for label, value in phases if isinstance(value, int | float)]
    if not phases:
        return None
    return Chart(
        kind="cold-start",
        title="Cold start",
        x_label="phase",
        y_label="time (ms)",
        series=(Series(name="cold start", x=[p[0] for p in phases], y=[p[1] for p in phases], kind="bar"),),
        x_type="category",
    )


def layers_chart(rows: Sequence[Mapping[str, Any]]) -> Chart | None:
    """Time per layer group at each traced batch size (the MAX_LAYER_ROWS largest groups, horizontal
    bars); None when the evaluation was not traced to layers."""
    if not rows:
        return None
    totals: dict[str, float] = defaultdict(float)
    for row in rows:
        totals[str(row["key"])] += float(row.get("per_inference_ms") or row.get("total_ms") or 0.0)
    kept = sorted(totals, key=lambda key: -totals[key])[:MAX_LAYER_ROWS]
    # A span recorded without a batch size groups under None.
    by_batch: dict[int | None, dict[str, float]] = defaultdict(dict)
    for row in rows:
        if str(row["key"]) in kept:
            size = None if row.get("batch_size") is None else int(row["batch_size"])
            by_batch[size][str(row["key"])] = float(row.get("per_inference_ms") or row.get("total_ms") or 0.0)
    series = tuple(
        Series(
            name=f"batch {size}" if size is not None else "any batch",
            x=[by_batch[size].get(key, 0.0) for key in reversed(kept)],
            y=list(reversed(kept)),
            kind="hbar",
        )
        for size in sorted(by_batch, key=lambda size: (size is None, size or 0))
    )
    notes = (f"the {len(kept)} largest of {len(totals)} groups",) if len(totals) > len(kept) else ()
    return Chart(
        kind="layers",
        title="Time per layer group, per inference",
        x_label="ms per inference (the total when no inference was traced)",
        y_label="layer group",
        series=series,
        y_type="category",
        notes=notes,
    )


def longest_spans(
    spans: Iterable[Mapping[str, Any]], limit: int = MAX_TIMELINE_SPANS
) -> list[dict[str, Any]]:
    """The `limit` longest of `spans` (read as they stream: never more than `limit` held), by start."""
    longest = heapq.nlargest(limit, spans, key=lambda s: int(s["end_ns"]) - int(s["start_ns"]))
    return sorted((dict(s) for s in longest), key=lambda s: (int(s["start_ns"]), str(s["span_id"])))


def timeline_chart(spans: Sequence[Mapping[str, Any]], total: int) -> Chart | None:
    """Spans as horizontal bars from the trace's first start, one series per level; None without spans.

    Args:
        spans: the spans to draw (at most MAX_TIMELINE_SPANS: `longest_spans`).
        total: how many spans the trace has, for the note when not all are drawn.
    """
    if not spans:
        return None
    origin = min(int(s["start_ns"]) for s in spans)
    by_level: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for span in spans:
        by_level[str(span["level"])].append(span)
    series = tuple(
        Series(
            name=level,
            x=[(int(s["end_ns"]) - int(s["start_ns"])) / _NS_PER_MS for s in members],
            y=[f"{level}: {s['name']}" for s in members],
            base=[(int(s["start_ns"]) - origin) / _NS_PER_MS for s in members],
            kind="hbar",
            text=[
                f"{s['name']} ({(int(s['end_ns']) - int(s['start_ns'])) / _NS_PER_MS:.3f} ms)"
                for s in members
            ],
        )
        for level, members in by_level.items()
    )
    return Chart(
        kind="timeline",
        title="Trace timeline",
        x_label="time from the first span (ms)",
        y_label="span",
        series=series,
        y_type="category",
        notes=(f"showing {len(spans):,} of {total:,} spans (the longest)",) if total > len(spans) else (),
    )


def compare_series_name(row: Mapping[str, Any]) -> str:
    """The series a comparison row belongs to: its framework and system (and device when not the CPU)."""
    name = f"{row['framework']} · {row.get('agent_id') or row.get('hostname') or row['system_id']}"
    device = row.get("device")
    return f"{name} · {device}" if device and device != "cpu" else name


def compare_chart(rows: Sequence[Mapping[str, Any]]) -> Chart | None:
    """Grouped bars of the comparison rows' median latency: x is "model @ batch", one series per
    framework × system, whiskers from ci_low_ms to ci_high_ms; None without rows."""
    if not rows:
        return None
    several_scenarios = len({r["scenario"] for r in rows}) > 1

    def category(row: Mapping[str, Any]) -> str:
        label = f"{row['model']} @ {row['batch_size']}"
        return f"{label} ({row['scenario']})" if several_scenarios else label

    ordered = sorted(rows, key=lambda r: (str(r["model"]), int(r["batch_size"]), str(r["scenario"])))
    categories = list(dict.fromkeys(category(r) for r in ordered))
    by_series: dict[str, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for row in rows:
        by_series[compare_series_name(row)][category(row)] = row
    series = []
    for name in sorted(by_series):
        cells = by_series[name]
        present = [c for c in categories if c in cells]
        series.append(
            Series(
                name=name,
                x=present,
                y=[cells[c].get("median_ms") for c in present],
                kind="bar",
                error_low=[cells[c].get("ci_low_ms") for c in present],
                error_high=[cells[c].get("ci_high_ms") for c in present],
            )
        )
    invalid = sum(1 for r in rows if r.get("valid") is False)
    return Chart(
        kind="compare",
        title="Median latency (whiskers: the median's confidence interval)",
        x_label="model @ batch size",
        y_label="median latency (ms)",
        series=tuple(series),
        x_type="category",
        notes=(f"{invalid} of {len(rows)} rows invalid",) if invalid else (),
    )
