"""/evaluations/<id>: one evaluation's page. Its status (and whether the result may be trusted), the
measured points with their validity reasons, cold start, accuracy, and the charts: latency histogram
and CDF per point, percentiles and throughput against the batch size, cold start, the layer
breakdown, and a timeline of the stored trace (its longest spans, with a link to the whole trace for
Perfetto).

The trace section is a fragment of its own (/evaluations/<id>/trace-view) the page's script fetches
once the page is shown. The trace is read once, as it streams from the store: the layer breakdown
keeps the spans it needs (as GET /layers does), the timeline never holds more than
MAX_TIMELINE_SPANS.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from flask import Blueprint, current_app, render_template, url_for

from mlscope.analysis.traces import hotspots
from mlscope.api.context import context
from mlscope.api.dashboard.blueprint import status_view
from mlscope.api.dashboard.figures import MAX_TIMELINE_SPANS, evaluation_charts, longest_spans, trace_charts
from mlscope.contract.result import ResultMeasurement
from mlscope.contract.workload import display_name
from mlscope.store import iter_spans
from mlscope.store.records import subsample_latencies

__all__ = ["TraceView", "evaluation", "register"]

_LAYER_LEVELS = frozenset({"MODEL", "FRAMEWORK", "LIBRARY"})
# A point may keep millions of raw latencies; its histogram and CDF are drawn from at most this many
# (every k-th, in order; the charts' notes say so). Its summary always covers every sample.
MAX_RAW_LATENCIES = 100_000
TRACE_VIEWS_CACHED = 16
HOTSPOTS = 10


def _points(measurements: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for measurement in measurements:
        latency = measurement.get("latency_ms") or {}
        validity = measurement.get("validity") or {}
        rows.append(
            {
                "scenario": measurement["scenario"],
                "batch_size": measurement["batch_size"],
                "count": latency.get("count"),
                "median": latency.get("median"),
                "p90": latency.get("p90"),
                "p99": latency.get("p99"),
                "ci": latency.get("median_ci"),
                "throughput": measurement.get("throughput"),
                "valid": validity.get("valid") is True,
                "reasons": validity.get("reasons") or [],
            }
        )
    return rows


@dataclass(frozen=True)
class TraceView:
    """What an evaluation's page shows of its stored trace.

    Attributes:
        total: how many spans it has.
        charts: the layer breakdown and the timeline, embedded.
        hotspots: the operators (LIBRARY pass) or layers (FRAMEWORK pass) that took the most time,
            HOTSPOTS per batch size (analysis.traces.hotspots rows).
        hotspot_level: the pass they come from.
    """

    total: int = 0
    charts: list[dict[str, Any]] = field(default_factory=list)
    hotspots: list[dict[str, Any]] = field(default_factory=list)
    hotspot_level: str | None = None


class _TraceViewCache:
    """The trace views of the last few evaluations viewed, by (evaluation id, span count).

    Reading a 50,000-span trace takes the store about a second; stored spans never change (saving one
    again stores nothing new), and a trace that grows or is pruned has a new count, so a page viewed
    again is served from here.
    """

    def __init__(self, size: int = TRACE_VIEWS_CACHED) -> None:
        self._size = size
        self._views: OrderedDict[tuple[str, int], TraceView] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> TraceView | None:
        with self._lock:
            found = self._views.get(key)
            if found is not None:
                self._views.move_to_end(key)
            return found

    def put(self, key: tuple[str, int], view: TraceView) -> None:
        with self._lock:
            self._views[key] = view
            while len(self._views) > self._size:
                self._views.popitem(last=False)


def _trace_view(evaluation: Mapping[str, Any]) -> TraceView:
    """The stored trace's charts and hotspots, read once as it streams from the store."""
    store = context().store
    total = store.count_spans(evaluation["id"])
    if total == 0:
        return TraceView()
    cache: _TraceViewCache = current_app.extensions.setdefault("mlscope.dashboard.traces", _TraceViewCache())
    key = (evaluation["id"], total)
    cached = cache.get(key)
    if cached is not None:
        return cached
    layer_spans: list[dict[str, Any]] = []

    def streamed() -> Iterator[dict[str, Any]]:
        for span in iter_spans(store, evaluation["id"]):
            if span["level"] in _LAYER_LEVELS:
                layer_spans.append(span)
            yield span

    shown = longest_spans(streamed(), MAX_TIMELINE_SPANS)
    levels = {span["level"] for span in layer_spans}
    level = next((lv for lv in ("LIBRARY", "FRAMEWORK") if lv in levels), None)
    view = TraceView(
        total=total,
        charts=trace_charts(evaluation, layer_spans, shown, total),
        hotspots=hotspots(layer_spans, level=level, n=HOTSPOTS) if level else [],
        hotspot_level=level,
    )
    cache.put(key, view)
    return view


def evaluation(evaluation_id: str) -> str:
    """One evaluation (by its id or a unique prefix): an unknown id is a 404 page. Its trace section is
    a placeholder the page's script fills from `trace_view` (reading a large trace must not hold up
    the page)."""
    store = context().store
    result = store.get_evaluation(evaluation_id, include_raw=True)
    full_id = result["id"]
    measurements = [
        cast(ResultMeasurement, subsample_latencies(m, MAX_RAW_LATENCIES))
        for m in result.get("measurements") or []
    ]
    result["measurements"] = measurements
    return render_template(
        "dashboard/evaluation.html",
        result=result,
        model_name=display_name(result),
        status=status_view(result),
        points=_points(measurements),
        charts=evaluation_charts(result),
        span_count=store.count_spans(full_id),
        json_url=url_for("evaluations.EvaluationById", evaluation_id=full_id),
        trace_url=url_for("evaluations.traces.EvaluationTrace", evaluation_id=full_id, format="chrome"),
        trace_view_url=url_for("dashboard.trace_view", evaluation_id=full_id),
    )


def trace_view(evaluation_id: str) -> str:
    """The evaluation page's trace section, an HTML fragment: the layer breakdown and timeline charts
    and the hotspots table of its stored trace (empty when it has none)."""
    result = context().store.get_evaluation(evaluation_id)
    return render_template("dashboard/trace_section.html", trace=_trace_view(result))


def register(pages: Blueprint) -> None:
    """Adds this module's pages to the dashboard's blueprint (mlscope.api.dashboard registers them)."""
    pages.add_url_rule("/evaluations/<string:evaluation_id>", view_func=evaluation)
    pages.add_url_rule("/evaluations/<string:evaluation_id>/trace-view", view_func=trace_view)
