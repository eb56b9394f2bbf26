"""The chart of a generative model's requests (the generate scenario): per point, the distribution of
its requests' time to first token and time per output token, from `generation.per_request`.

Both are drawn as CDFs on one latency axis (logarithmic when they span more than CDF_LOG_SPREAD, as
TTFT and TPOT usually do), a step series per metric and point; failed requests have no figures and are
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

__all__ = ["request_cdf"]

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
