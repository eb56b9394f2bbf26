"""Charts of a stored trace: where the traced inferences spent their time (layer_bars) and the spans
on a timeline (timeline). Pure functions over span dicts in the store's shape, like traces.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from mlscope.analysis.chart_labels import evaluation_id, evaluation_label
from mlscope.analysis.charts import Chart, Series
from mlscope.analysis.timeline import span_lane
from mlscope.analysis.traces import BETWEEN_LAYERS, layer_breakdown
from mlscope.contract.errors import UserError
from mlscope.store.records import SPAN_LEVELS, check_int

__all__ = ["layer_bars", "timeline"]

_LEVEL_RANK = {level: rank for rank, level in enumerate(SPAN_LEVELS)}
NO_SPANS = "no spans: run with --trace-level framework (or application, model, library) to record a trace"


def layer_bars(evaluation: Mapping[str, Any], spans: Iterable[Mapping[str, Any]], top: int = 20) -> Chart:
    """The layer breakdown (analysis/traces.py `layer_breakdown`, by layer type) as horizontal bars,
    one series per batch size: time per traced inference, the largest `top` layer types, the rest
    summed in one bar "(N others)" so the bars still add up to the inference.

    Args:
        evaluation: the evaluation the spans are of (for the title and the error).
        spans: its spans, any levels, any order.
        top: layer types drawn one by one (1 or more).

    Raises:
        UserError: `top` is not a whole number ≥ 1, or the trace has no FRAMEWORK layer spans.
    """
    check_int("top", top, 1)
    rows = layer_breakdown(spans)
    if not rows:
        raise UserError(
            f"evaluation {evaluation_id(evaluation)} has no layer spans (trace level "
            f"{evaluation.get('trace_level') or 'none'}): run it with --trace-level framework",
            field="evaluation",
        )
    per_inference = all(row["per_inference_ms"] is not None for row in rows)
    value_key = "per_inference_ms" if per_inference else "total_ms"
    totals: dict[str, float] = {}
    for row in rows:
        totals[row["key"]] = totals.get(row["key"], 0.0) + row["total_ms"]
    ranked = sorted(totals, key=lambda key: (-totals[key], key))
    shown, rest = ranked[:top], ranked[top:]
    other = f"({len(rest)} others)"
    # Bars are drawn bottom up: the largest last, on top.
    categories = list(reversed(shown + ([other] if rest else [])))
    series = []
    for batch_size in dict.fromkeys(row["batch_size"] for row in rows):
        mine = [row for row in rows if row["batch_size"] == batch_size]
        values = {row["key"]: row[value_key] for row in mine if row["key"] in shown}
        shares = {row["key"]: row["share"] for row in mine if row["key"] in shown}
        if rest:
            values[other] = sum(row[value_key] for row in mine if row["key"] in rest)
            shares[other] = sum(row["share"] for row in mine if row["key"] in rest)
        series.append(
            Series(
                name=f"batch {batch_size}",
                x=[values.get(key, 0.0) for key in categories],
                y=categories,
                kind="hbar",
                text=[f"{100 * shares.get(key, 0.0):.1f}% of the inference" for key in categories],
            )
        )
    notes: tuple[str, ...] = ()
    if rest:
        notes += (f"the {len(shown)} largest of {len(ranked)} layer types; the other {len(rest)} summed",)
    if BETWEEN_LAYERS in totals:
        notes += (f"{BETWEEN_LAYERS}: inference time no layer span accounts for",)
    return Chart(
        kind="layers",
        title=f"time per layer type: {evaluation_label(evaluation)}",
        x_label="time per traced inference (ms)" if per_inference else "total traced time (ms)",
        y_label="layer type",
        series=tuple(series),
        y_type="category",
        notes=notes,
    )


def timeline(spans: Iterable[Mapping[str, Any]], max_spans: int = 2000) -> Chart:
    """A trace's spans as horizontal bars from their start (ms since the trace's first start), one row
    per level (per profiler thread for LIBRARY work, per device and stream for kernels), one series
    per level; only the `max_spans` longest, with a note saying how many were left out.

    Raises:
        UserError: `max_spans` is not a whole number ≥ 1, or there are no spans.
    """
    check_int("max_spans", max_spans, 1)
    listed = spans if isinstance(spans, list) else list(spans)
    if not listed:
        raise UserError(NO_SPANS, field="spans")
    starts = np.fromiter((int(s["start_ns"]) for s in listed), dtype=np.int64, count=len(listed))
    ends = np.fromiter((int(s["end_ns"]) for s in listed), dtype=np.int64, count=len(listed))
    durations = ends - starts
    origin = int(starts.min())
    if len(listed) > max_spans:
        kept = np.argpartition(-durations, max_spans - 1)[:max_spans]
        kept = kept[np.argsort(starts[kept], kind="stable")]
    else:
        kept = np.argsort(starts, kind="stable")
    by_level: dict[str, list[int]] = {}
    for index in kept.tolist():
        by_level.setdefault(str(listed[index]["level"]), []).append(index)
    series = []
    for level in sorted(by_level, key=lambda lv: (_LEVEL_RANK.get(lv, len(_LEVEL_RANK)), lv)):
        members = by_level[level]
        series.append(
            Series(
                name=level,
                x=(durations[members] / 1e6).tolist(),
                y=[span_lane(listed[i])[1] for i in members],
                kind="hbar",
                base=((starts[members] - origin) / 1e6).tolist(),
                text=[f"{listed[i]['name']}: {durations[i] / 1e6:,.3f} ms" for i in members],
            )
        )
    notes: tuple[str, ...] = ()
    if len(listed) > max_spans:
        notes = (f"showing the {max_spans:,} longest of {len(listed):,} spans",)
    return Chart(
        kind="timeline",
        title="trace timeline",
        x_label="time since the trace's start (ms)",
        y_label="level",
        series=tuple(series),
        y_type="category",
        barmode="overlay",
        notes=notes,
    )
