"""The chart of a generative model's requests (the generate scenario): per point, the distribution of
its requests' time to first token and time per output token, from `generation.per_request`.

Both are drawn as CDFs on one latency axis (logarithmic when they span more than CDF_LOG_SPREAD, as
TTFT and TPOT usually do), a step series per metric and point; failed requests have no figures and are
counted in a note, and an SLO's bounds are named in one.

Beside them, the server's own metrics sampled during the requests (`generation.server_metrics`):
requests running and waiting (and the batch, where the server gives it) against time, with the
client's requests in flight on the same axis and the KV cache's use on the right.
counted in a note, and an SLO's bounds are named in one. A point of embeddings or rerank, which has no
tokens to time, draws its end-to-end latency instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mlscope.analysis.chart_builders import CDF_LOG_SPREAD, cdf_steps
from mlscope.analysis.chart_labels import INVALID, evaluation_label, invalid_note, is_valid, point_name
from mlscope.analysis.charts import Chart, Series
from mlscope.contract.errors import UserError

__all__ = ["pareto_chart", "request_cdf", "server_metrics_chart"]

_METRICS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"))
_POOLING_METRICS = (("e2e_ms", "end-to-end"),)


def request_cdf(evaluation: Mapping[str, Any]) -> Chart:
    """TTFT and TPOT CDFs per point of a generate evaluation.

    Raises:
        UserError: no measurement kept its requests' figures (not a generate evaluation, or one of
            more than 2,000 requests per point).
    """
    drawn = [
        m for m in evaluation.get("measurements") or [] if ((m.get("generation") or {}).get("per_request"))
    ]
    if not drawn:
        raise UserError(
            f"evaluation {evaluation.get('id', '?')} has no per-request figures: only the generate "
            "scenario keeps them (up to 2,000 requests per point)",
            field="kind",
        )
    series, lowest, highest, notes = [], np.inf, 0.0, []
    for measurement in drawn:
        requests = measurement["generation"]["per_request"]
        suffix = "" if is_valid(measurement) else f" {INVALID}"
        pooling = "ttft_ms" in (measurement["generation"].get("not_applicable") or ())
        for key, label in _POOLING_METRICS if pooling else _METRICS:
            values = np.array([v for v in requests.get(key) or [] if v is not None], dtype=float)
            if values.size == 0:
                continue
            lowest, highest = min(lowest, float(values.min())), max(highest, float(values.max()))
            x, y = cdf_steps(values)
            series.append(Series(name=f"{label} · {point_name(measurement)}{suffix}", x=x, y=y, kind="step"))
        failed = sum(1 for error in requests.get("error") or [] if error)
        if failed:
            notes.append(f"{point_name(measurement)}: {failed} of {len(requests.get('error') or [])} failed")
    if not series:
        raise UserError(f"evaluation {evaluation.get('id', '?')}: every request failed", field="kind")
    slo = (drawn[0].get("generation") or {}).get("slo") or {}
    bounds = [
        f"{label} ≤ {slo[key]:g} ms" for key, label in _METRICS + _POOLING_METRICS if slo.get(key) is not None
    ]
    if bounds:
        notes.append("SLO: " + ", ".join(bounds))
    wide = lowest > 0 and highest / lowest >= CDF_LOG_SPREAD
    return Chart(
        kind="generation",
        title=(
            f"end-to-end latency per request: {evaluation_label(evaluation)}"
            if all("ttft_ms" in (m["generation"].get("not_applicable") or ()) for m in drawn)
            else f"time to first token and per output token: {evaluation_label(evaluation)}"
        ),
        x_label="ms",
        y_label="requests at or below (%)",
        series=tuple(series),
        x_type="log" if wide else "linear",
        notes=(*invalid_note([(point_name(m), m) for m in drawn]), *notes),
    )


_COUNTS = (
    ("requests_running", "running (server)"),
    ("requests_waiting", "waiting (server)"),
    ("batch_size", "batch (server)"),
)


def server_metrics_chart(evaluation: Mapping[str, Any]) -> Chart:
    """The server's metrics against time, per point that sampled them: its requests running and
    waiting, the client's requests in flight, and the KV cache's use (%, right axis).

    Raises:
        UserError: no measurement has a series of server metrics (none asked for, or none answered).
    """
    drawn = [
        m
        for m in evaluation.get("measurements") or []
        if ((m.get("generation") or {}).get("server_metrics") or {}).get("t_s")
    ]
    if not drawn:
        raise UserError(
            f"evaluation {evaluation.get('id', '?')} has no server metrics: a generate run against an "
            "endpoint samples them with --server-metrics URL",
            field="kind",
        )
    series: list[Series] = []
    notes: list[str] = []
    for measurement in drawn:
        metrics = measurement["generation"]["server_metrics"]
        t_s, values = metrics["t_s"], metrics.get("series") or {}
        name = point_name(measurement) if len(drawn) > 1 else ""
        at = f" · {name}" if name else ""
        if metrics.get("client_in_flight"):
            series.append(Series(f"in flight (client){at}", t_s, metrics["client_in_flight"], kind="step"))
        for key, label in _COUNTS:
            if key in values:
                series.append(Series(f"{label}{at}", t_s, values[key], kind="step"))
        if "kv_cache_usage" in values:
            usage = [None if v is None else 100.0 * v for v in values["kv_cache_usage"]]
            series.append(Series(f"KV cache use (server){at}", t_s, usage, axis="y2"))
        failed = metrics.get("failed_samples")
        notes.append(
            f"{name + ': ' if name else ''}{metrics.get('source')} metrics, {metrics.get('samples')} samples "
            f"every {metrics.get('interval_s'):g} s" + (f", {failed} failed" if failed else "")
        )
    return Chart(
        kind="server-metrics",
        title=f"server metrics during the requests: {evaluation_label(evaluation)}",
        x_label="s since the measured requests began",
        y_label="requests",
        y2_label="KV cache use (%)",
        series=tuple(series),
        notes=tuple(notes),
    )


_SWEEP_AXES = {
    "output_tokens_per_s_per_user": "output tokens/s per user (1000 / median TPOT)",
    "output_tokens_per_s": "output tokens/s in all",
    "requests_per_s_per_user": "requests/s per user (1000 / median end-to-end)",
    "requests_per_s": "requests/s in all",
}


def pareto_chart(evaluation: Mapping[str, Any]) -> Chart:
    """A sweep's throughput against latency (`generation.sweep`, runtime.generate.sweep): the Pareto
    front's points joined by a line, the other points as markers (those not valid in a series of
    their own), each labelled with its setting's value.

    Raises:
        UserError: no measurement of the evaluation holds a sweep (`--sweep` not asked for).
    """
    swept = [m for m in evaluation.get("measurements") or [] if (m.get("generation") or {}).get("sweep")]
    if not swept:
        raise UserError(
            f"evaluation {evaluation.get('id', '?')} has no sweep: a generate run draws one with "
            "--sweep concurrency=1,2,4 or --sweep qps=1,2,4",
            field="kind",
        )
    sweep = swept[0]["generation"]["sweep"]
    setting, x, y = sweep["setting"], sweep["x"], sweep["y"]
    points = [p for p in sweep["points"] if p.get(x) is not None and p.get(y) is not None]
    series: list[Series] = []
    for name, chosen in (
        ("points off the front", [p for p in points if p.get("valid") and not p.get("pareto")]),
        (f"points {INVALID}", [p for p in points if not p.get("valid")]),
    ):
        if chosen:
            series.append(
                Series(
                    name,
                    [p[x] for p in chosen],
                    [p[y] for p in chosen],
                    kind="scatter",
                    text=[f"{setting}={p[setting]:g}" for p in chosen],
                )
            )
    front = sorted((p for p in points if p.get("pareto")), key=lambda p: p[x])
    if front:
        series.append(
            Series(
                "Pareto front",
                [p[x] for p in front],
                [p[y] for p in front],
                kind="line",
                text=[f"{setting}={p[setting]:g}" for p in front],
            )
        )
    left_out = len(sweep["points"]) - len(points)
    notes = [
        f"{setting} = " + ", ".join(f"{p[setting]:g}" for p in sweep["points"]),
        f"Pareto front: {setting} = " + (", ".join(f"{p[setting]:g}" for p in front) or "none"),
    ]
    if left_out:
        notes.append(f"{left_out} point(s) without figures (every request failed) not drawn")
    return Chart(
        kind="pareto",
        title=f"throughput against latency, sweep of {setting}: {evaluation_label(evaluation)}",
        x_label=_SWEEP_AXES.get(x, x),
        y_label=_SWEEP_AXES.get(y, y),
        series=tuple(series),
        notes=tuple(notes),
    )
