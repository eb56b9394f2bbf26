"""How much separate runs differ, as `mlscope diff` reads it from the store: a series' own spread (its
other runs), and, where neither side's series has one, the system's pooled spread over its other
series, the prior the verdict assumes (docs/verdicts.md).

A series' spread is the sd of log(median) over its other valid runs, scaled by t₁₋α/₂(k − 1) / z₁₋α/₂
(k runs): an sd from 3 to 10 runs is itself uncertain, and the interval it widens should be a t
interval, not a normal one (3 runs: ×2.2 at 95%; 12 runs: ×1.1). The pooled spread is the root mean
square of each series' deviations from its own mean log median over the pooled degrees of freedom
(one-way ANOVA's within-group sd), from the series of the sides' systems and devices with at least
MIN_OTHER_RUNS valid runs, scaled to a t interval over its pooled degrees of freedom as a series'
is; None when there is none, and the caller takes DEFAULT_BETWEEN_RUNS.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from mlscope.analysis.diff import MIN_OTHER_RUNS
from mlscope.store import Store

__all__ = ["MAX_POOLED_SERIES", "pooled_spread", "series_spread", "t_quantile"]

# The pooled spread reads at most this many series (those with the most points) ...
MAX_POOLED_SERIES = 20
# ... and at most this many latest runs of each.
POOLED_RUNS = 50


def series_spread(medians: Sequence[float], confidence: float) -> float | None:
    """The between-run sd of log(median) of a series' runs, scaled to a t interval (module
    docstring); None for fewer than MIN_OTHER_RUNS runs."""
    if len(medians) < MIN_OTHER_RUNS:
        return None
    sd = float(np.std(np.log(medians), ddof=1))
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    return sd * t_quantile(0.5 + confidence / 2, len(medians) - 1) / z


def t_quantile(p: float, freedom: int) -> float:
    """Student's t quantile for p in (0.5, 1) and `freedom` >= 1 degrees of freedom, by bisection on
    the CDF, whose density is integrated by Simpson's rule (4,000 intervals: about 6 significant
    digits for p up to 0.9995)."""
    if not (0.5 < p < 1 and freedom >= 1):
        raise ValueError(f"t_quantile: p in (0.5, 1) and freedom >= 1, got {p!r}, {freedom!r}")
    scale = math.exp(
        math.lgamma((freedom + 1) / 2) - math.lgamma(freedom / 2) - 0.5 * math.log(freedom * math.pi)
    )

    def above_half(x: float) -> float:
        grid = np.linspace(0.0, x, 4001)
        density = scale * (1.0 + grid**2 / freedom) ** (-(freedom + 1) / 2)
        weights = np.ones(grid.size)
        weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
        return float(np.dot(weights, density) * (x / 4000) / 3)

    low, high = 0.0, 1.0
    while above_half(high) < p - 0.5:
        low, high = high, 2 * high
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if above_half(middle) < p - 0.5 else (low, middle)
    return (low + high) / 2


def pooled_spread(
    store: Store, where: Collection[tuple[str | None, str]], leave_out: Collection[str], confidence: float
) -> dict[str, Any]:
    """The pooled between-run spread of the series on these (system id, device)s (on each system's
    machine and stack, under whichever system id), the runs in
    `leave_out` (the pair's own) not counted.

    Returns:
        {"sd": the pooled sd of log(median) scaled by t(freedom) / z at `confidence`, None when no
        series has MIN_OTHER_RUNS valid runs; "series": how many series it pools; "runs": how many
        runs}.
    """
    keys = [
        key
        for system_id, device in sorted(where, key=str)
        if system_id is not None
        for key in store.history_series(system_id=system_id, device=device)
        if key["points"] >= MIN_OTHER_RUNS
    ]
    keys.sort(key=lambda key: -int(key["points"]))
    squares, freedom, series, runs = 0.0, 0, 0, 0
    for key in keys[:MAX_POOLED_SERIES]:
        points = store.history(
            model=key["model"],
            framework=key["framework"],
            machine_id=key["machine_id"],
            stack_id=key["stack_id"],
            device=key["device"],
            scenario=key["scenario"],
            batch_size=key["batch_size"],
            manifest_sha256=key["manifest_sha256"],
            framework_version=key["framework_version"],
            limit=POOLED_RUNS,
        )
        logs = [
            math.log(p["median_ms"])
            for p in points
            if p["evaluation_id"] not in leave_out and p.get("valid") and (p.get("median_ms") or 0) > 0
        ]
        if len(logs) < MIN_OTHER_RUNS:
            continue
        squares += float(np.sum((np.asarray(logs) - np.mean(logs)) ** 2))
        freedom += len(logs) - 1
        series += 1
        runs += len(logs)
    if not freedom:
        return {"sd": None, "series": 0, "runs": 0}
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    scale = t_quantile(0.5 + confidence / 2, freedom) / z
    return {"sd": math.sqrt(squares / freedom) * scale, "series": series, "runs": runs}
