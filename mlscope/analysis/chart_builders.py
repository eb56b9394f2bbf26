"""Chart builders: stored results (an evaluation, comparison rows, spans) as `Chart`s to draw.

Pure functions over the store's public shapes: the dashboard and `mlscope plot` call the same builder,
so a chart has the same bins, series and notes wherever it is seen. A result must never look better
than it is: a point whose measurement is not valid is drawn, but in a series of its own named
"... (invalid)", and a note counts the invalid points and says why; a chart that leaves something
out (a subsample of latencies, the longest spans only) says so in a note.

Every builder raises a UserError naming what is missing when there is nothing to draw, so a CLI
answers with exit code 2 and the API with a 4xx, never with an exception from numpy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from mlscope.analysis.chart_compare import compare_bars
from mlscope.analysis.chart_labels import (
    INVALID,
    evaluation_id,
    evaluation_label,
    invalid_note,
    is_valid,
    point_name,
)
from mlscope.analysis.chart_traces import layer_bars, timeline
from mlscope.analysis.charts import Chart, Series
from mlscope.contract.errors import UserError

__all__ = [
    "CDF_LOG_SPREAD",
    "HISTOGRAM_MAX_BINS",
    "batch_curve",
    "cdf_steps",
    "cold_start_bars",
    "compare_bars",
    "evaluation_label",
    "latency_cdf",
    "latency_histogram",
    "layer_bars",
    "throughput_latency",
    "timeline",
]

# A histogram's bins: numpy's Freedman–Diaconis choice, kept within these bounds (a million
# latencies would otherwise make thousands of one-pixel bars).
HISTOGRAM_MIN_BINS = 10
HISTOGRAM_MAX_BINS = 80
# The histogram's bins stop at this multiple of the largest point's p99.
HISTOGRAM_TAIL = 2.0
# The CDF's latency axis is logarithmic when the slowest latency is this many times the fastest.
CDF_LOG_SPREAD = 20.0
# A CDF of more latencies than this is drawn through this many of its steps (the first and last kept):
# the eye cannot tell more apart, and a page of 100,000 points is slow.
CDF_MAX_POINTS = 1000
# The cold-start phases a bar chart shows, in the order they happen.
COLD_START_PHASES = (
    ("fetch_ms", "fetch"),
    ("import_ms", "framework import"),
    ("load_ms", "model load"),
    ("first_inference_ms", "first inference"),
    ("warm_load_ms", "warm load"),
    ("warm_first_inference_ms", "warm first inference"),
)


def _measured(evaluation: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The evaluation's measurements that have a latency summary, by scenario then batch size.

    Raises:
        UserError: when it has none (it failed, or has not finished).
    """
    measurements = [
        m
        for m in evaluation.get("measurements") or []
        if (m.get("latency_ms") or {}).get("median") is not None
    ]
    if not measurements:
        raise UserError(
            f"evaluation {evaluation_id(evaluation)} has no measurements to plot: it is "
            f"{evaluation.get('status', 'unknown')}; expected a succeeded evaluation",
            field="evaluation",
        )
    return sorted(measurements, key=_point_order)


def _point_order(measurement: Mapping[str, Any]) -> tuple[str, int]:
    return str(measurement["scenario"]), int(measurement["batch_size"])


# ----- latency distributions ----------------------------------------------------------------------


def _raw_latencies_ms(evaluation: Mapping[str, Any]) -> list[tuple[dict[str, Any], np.ndarray]]:
    """(measurement, its raw latencies in ms) for every measurement that kept any.

    Raises:
        UserError: when none did.
    """
    found = []
    for measurement in sorted(evaluation.get("measurements") or [], key=_point_order):
        raw = measurement.get("latencies_ns") or []
        if len(raw):
            values = np.asarray(raw, dtype=np.float64) / 1e6
            found.append((measurement, values[np.isfinite(values)]))
    if not found or not any(len(values) for _, values in found):
        raise UserError(
            f"evaluation {evaluation_id(evaluation)} has no raw latencies: read it with its raw "
            "latencies (include_raw, ?raw=true); `mlscope results prune` removes them from old results",
            field="evaluation",
        )
    return [(m, values) for m, values in found if len(values)]


def _measured_or_empty(evaluation: Mapping[str, Any]) -> list[dict[str, Any]]:
    try:
        return _measured(evaluation)
    except UserError:
        return []


def _sampled_notes(measurements: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """A note per point whose raw latencies the store kept a subsample of (records/evaluations.py)."""

    def count(value: Any) -> str:
        return f"{value:,}" if isinstance(value, int) else "?"

    return tuple(
        f"{point_name(m)}: a subsample of the latencies, {count(sampled.get('kept'))} of "
        f"{count(sampled.get('of'))} (one in every {count(sampled.get('every'))})"
        for m in measurements
        if (sampled := m.get("latencies_sampled"))
    )


def latency_histogram(evaluation: Mapping[str, Any]) -> Chart:
    """One histogram per point (scenario, batch size), overlaid, over the same bins.

    Args:
        evaluation: in the public shape, with its raw latencies ("latencies_ns").

    Returns:
        A "latency" chart: a bar series per point, x the bins' centres (ms), `width` their widths,
        y the share of the point's latencies in the bin (%), so points of different counts compare.

    Raises:
        UserError: the evaluation has no raw latencies.
    """
    points = _raw_latencies_ms(evaluation)
    every = np.concatenate([values for _, values in points])
    # A few stragglers far out (a 8 ms stall among 0.04 ms inferences) would squeeze every other bar
    # into the first bin: the bins stop at HISTOGRAM_TAIL × the largest point's p99, and a note counts
    # what lies beyond (the CDF draws it).
    upper = min(float(every.max()), HISTOGRAM_TAIL * max(float(np.percentile(v, 99)) for _, v in points))
    shown = every[every <= upper]
    bins = len(np.histogram_bin_edges(shown, bins="fd")) - 1 if np.ptp(shown) > 0 else HISTOGRAM_MIN_BINS
    edges = np.histogram_bin_edges(
        shown, bins=min(max(bins, HISTOGRAM_MIN_BINS), HISTOGRAM_MAX_BINS), range=(float(every.min()), upper)
    )
    beyond = int(np.count_nonzero(every > upper))
    tail_note = (
        (
            f"{beyond:,} of {every.size:,} latencies above {upper:.4g} ms are beyond the chart "
            f"(the slowest {float(every.max()):.4g} ms): the CDF shows them",
        )
        if beyond
        else ()
    )
    centres = ((edges[:-1] + edges[1:]) / 2).tolist()
    widths = np.diff(edges).tolist()
    series = []
    for measurement, values in points:
        counts, _ = np.histogram(values, bins=edges)
        name = point_name(measurement) + ("" if is_valid(measurement) else f" {INVALID}")
        series.append(
            Series(
                name=name,
                x=centres,
                y=(100.0 * counts / len(values)).tolist(),
                kind="bar",
                width=widths,
                text=[f"{int(c):,} of {len(values):,}" for c in counts],
            )
        )
    measurements = [m for m, _ in points]
    return Chart(
        kind="latency",
        title=f"latency distribution: {evaluation_label(evaluation)}",
        x_label="latency (ms)",
        y_label="share of the point's latencies (%)",
        series=tuple(series),
        barmode="overlay",
        notes=invalid_note([(point_name(m), m) for m in measurements])
        + tail_note
        + _sampled_notes(measurements),
    )


def cdf_steps(values: np.ndarray) -> tuple[list[float], list[float]]:
    """The empirical CDF's steps (latency, % at or below), thinned to CDF_MAX_POINTS."""
    ordered = np.sort(values)
    n = len(ordered)
    index = np.arange(n) if n <= CDF_MAX_POINTS else np.unique(np.linspace(0, n - 1, CDF_MAX_POINTS).round())
    index = index.astype(np.int64)
    return ordered[index].tolist(), (100.0 * (index + 1) / n).tolist()


def latency_cdf(evaluation: Mapping[str, Any]) -> Chart:
    """The cumulative distribution of each point's latencies: the share at or below each latency.

    Raises:
        UserError: the evaluation has no raw latencies.
    """
    points = _raw_latencies_ms(evaluation)
    every = np.concatenate([values for _, values in points])
    series = []
    for measurement, values in points:
        x, y = cdf_steps(values)
        name = point_name(measurement) + ("" if is_valid(measurement) else f" {INVALID}")
        series.append(Series(name=name, x=x, y=y, kind="step"))
    measurements = [m for m, _ in points]
    return Chart(
        kind="cdf",
        title=f"latency CDF: {evaluation_label(evaluation)}",
        x_label="latency (ms)",
        y_label="latencies at or below (%)",
        series=tuple(series),
        # A tail two orders of magnitude out is read on a log axis, the bulk still visible beside it.
        x_type="log" if every.min() > 0 and every.max() / every.min() >= CDF_LOG_SPREAD else "linear",
        notes=invalid_note([(point_name(m), m) for m in measurements]) + _sampled_notes(measurements),
    )


# ----- percentiles against batch size and load ----------------------------------------------------

_PERCENTILES = (("median", "p50"), ("p90", "p90"), ("p99", "p99"))


def _x_type(values: Iterable[Any]) -> str:
    """log when the values span a factor of 8 or more (batch sizes 1..64), else linear."""
    positive = [float(v) for v in values if v is not None and v > 0]
    return "log" if positive and max(positive) / min(positive) >= 8 else "linear"


def _invalid_marks(
    name: str, measurements: Sequence[Mapping[str, Any]], x: Sequence[Any], y: Sequence[Any]
) -> list[Series]:
    """A markers-only series over the invalid points of a line, so the legend names them."""
    marked = [
        (xi, yi, "; ".join((m.get("validity") or {}).get("reasons") or []))
        for m, xi, yi in zip(measurements, x, y, strict=True)
        if not is_valid(m) and yi is not None
    ]
    if not marked:
        return []
    return [
        Series(
            name=f"{name} {INVALID}",
            x=[xi for xi, _, _ in marked],
            y=[yi for _, yi, _ in marked],
            kind="scatter",
            text=[reasons for _, _, reasons in marked],
        )
    ]


def _whiskers(measurements: Iterable[Mapping[str, Any]]) -> str:
    """What the whiskers are, with the confidence level when the measurements agree on one."""
    levels = {(m.get("settings") or {}).get("confidence") for m in measurements}
    level = levels.pop() if len(levels) == 1 else None
    of = f" {level:.0%}" if isinstance(level, float) else ""
    return f"whiskers: the median's{of} confidence interval"


def batch_curve(evaluation: Mapping[str, Any]) -> Chart:
    """Latency percentiles (p50 with its confidence interval as whiskers, p90, p99) and throughput
    (right axis) against the batch size, per scenario.

    Raises:
        UserError: the evaluation has no measurements.
    """
    measurements = _measured(evaluation)
    scenarios = list(dict.fromkeys(m["scenario"] for m in measurements))
    series: list[Series] = []
    for scenario in scenarios:
        mine = [m for m in measurements if m["scenario"] == scenario]
        prefix = f"{scenario} " if len(scenarios) > 1 else ""
        x = [int(m["batch_size"]) for m in mine]
        for key, label in _PERCENTILES:
            y = [m["latency_ms"].get(key) for m in mine]
            ci = [m["latency_ms"].get("median_ci") or [None, None] for m in mine] if key == "median" else None
            series.append(
                Series(
                    name=f"{prefix}{label} latency",
                    x=x,
                    y=y,
                    kind="line",
                    error_low=[c[0] for c in ci] if ci else None,
                    error_high=[c[1] for c in ci] if ci else None,
                )
            )
            if key == "median":
                series += _invalid_marks(f"{prefix}{label} latency", mine, x, y)
        series.append(
            Series(name=f"{prefix}throughput", x=x, y=[m.get("throughput") for m in mine], axis="y2")
        )
    notes = invalid_note([(point_name(m), m) for m in measurements])
    if any(m["latency_ms"].get("median_ci") for m in measurements):
        notes += (_whiskers(measurements),)
    return Chart(
        kind="batch",
        title=f"latency and throughput by batch size: {evaluation_label(evaluation)}",
        x_label="batch size",
        y_label="latency (ms)",
        y2_label="throughput (samples/s)",
        series=tuple(series),
        x_type="log" if _x_type(int(m["batch_size"]) for m in measurements) == "log" else "linear",
        notes=notes,
    )


def _probe_series(label: str, measurement: Mapping[str, Any]) -> tuple[list[Series], tuple[str, ...]]:
    """A server search's probes (achieved qps against p50 and p99) and a note on the probes left out."""
    search = ((measurement.get("load") or {}).get("search")) or {}
    probes = [p for p in search.get("probes") or [] if p.get("achieved_qps") is not None]
    drawn = sorted((p for p in probes if p.get("p50_ms") is not None), key=lambda p: p["achieved_qps"])
    series = []
    for key, name in (("p50_ms", "p50"), ("p99_ms", "p99")):
        kept = [p for p in drawn if p.get(key) is not None]
        if kept:
            series.append(
                Series(
                    name=f"{label} search {name}",
                    x=[p["achieved_qps"] for p in kept],
                    y=[p[key] for p in kept],
                    kind="line",
                    text=[
                        f"target {p.get('target_qps')} qps: {'passed' if p.get('passed') else 'failed'}"
                        for p in kept
                    ],
                )
            )
    missing = [p for p in search.get("probes") or [] if p not in drawn]
    notes: tuple[str, ...] = ()
    if missing:
        why = "; ".join(f"{p.get('target_qps')} qps: {p.get('reason') or 'no latencies'}" for p in missing)
        notes = (f"{label}: {len(missing)} search probe(s) without latencies not drawn ({why})",)
    return series, notes


def throughput_latency(evaluations: Sequence[Mapping[str, Any]]) -> Chart:
    """Latency (p50, p99) against the throughput achieved, one pair of lines per evaluation through
    its batch sizes, plus a server search's probes (achieved queries/s) where it ran one.

    Raises:
        UserError: no evaluation has a measurement.
    """
    series: list[Series] = []
    notes: tuple[str, ...] = ()
    named: list[tuple[str, Mapping[str, Any]]] = []
    drawn = 0
    for evaluation in evaluations:
        measurements = _measured_or_empty(evaluation)
        if not measurements:
            continue
        drawn += 1
        label = evaluation_label(evaluation)
        mine = sorted(measurements, key=lambda m: float(m.get("throughput") or 0))
        x = [m.get("throughput") for m in mine]
        for key, name in (("median", "p50"), ("p99", "p99")):
            y = [m["latency_ms"].get(key) for m in mine]
            series.append(
                Series(
                    name=f"{label} {name}",
                    x=x,
                    y=y,
                    kind="line",
                    text=[point_name(m) for m in mine],
                )
            )
            series += _invalid_marks(f"{label} {name}", mine, x, y)
        named += [(f"{label} {point_name(m)}", m) for m in mine]
        for measurement in mine:
            probe_series, probe_notes = _probe_series(label, measurement)
            series += probe_series
            notes += probe_notes
    if not drawn:
        raise UserError(
            f"none of the {len(evaluations)} evaluation(s) has measurements to plot: expected at least "
            "one succeeded evaluation",
            field="evaluations",
        )
    return Chart(
        kind="throughput-latency",
        title="latency against throughput",
        x_label="achieved throughput (samples/s; a search's probes: queries/s)",
        y_label="latency (ms)",
        series=tuple(series),
        # Setups a hundred times apart (a tiny model and a large one) stay readable on log axes.
        x_type="log" if _x_type(v for s in series for v in s.x) == "log" else "linear",
        y_type="log" if _x_type(v for s in series for v in s.y) == "log" else "linear",
        notes=invalid_note(named) + notes,
    )


# ----- cold start ---------------------------------------------------------------------------------


def cold_start_bars(evaluation: Mapping[str, Any]) -> Chart:
    """The cold start's phases (fetch, framework import, model load, first inference) as bars.

    Raises:
        UserError: the evaluation has no cold-start figures.
    """
    cold = evaluation.get("cold_start") or {}
    phases = [
        (label, cold[key]) for key, label in COLD_START_PHASES if isinstance(cold.get(key), (int, float))
    ]
    if not phases:
        raise UserError(
            f"evaluation {evaluation_id(evaluation)} has no cold-start figures: expected a succeeded "
            "evaluation (cold start is measured before the first measurement)",
            field="evaluation",
        )
    notes: tuple[str, ...] = ()
    if cold.get("warm_process"):
        notes = ("warm process: the framework was already imported, so the import time is not a cold import",)
    return Chart(
        kind="cold-start",
        title=f"cold start: {evaluation_label(evaluation)}",
        x_label="phase",
        y_label="time (ms)",
        series=(Series(name="cold start", x=[p for p, _ in phases], y=[v for _, v in phases], kind="bar"),),
        x_type="category",
        notes=notes,
    )
