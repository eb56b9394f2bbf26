"""How far to trust a bricks estimate: a prediction interval for the latency the model will measure
whole, from the bricks' own measurement noise and from how far this system's past estimates were
from the models measured whole.

Two sources of error, combined on the log scale (latency errors are multiplicative):

    measurement    s_m = the estimate's standard error / the estimate      (compose: each brick's
                   median's standard error, combined over the bricks)
    calibration    r_i = ln(measured_i / estimate_i) over past pairs of other models on the same
                   system and setup; centre c = median(r_i), spread s_c = 1.4826 × MAD(r_i) (a robust
                   standard deviation: one tiny model 100% off does not widen every interval)

    interval       estimate × exp(c ± t(n − 1) × √(s_c² (1 + 1/n) + s_m²))

t(n − 1) is Student's t quantile of the nominal level (90%: the 95th percentile) with n − 1 degrees
of freedom for n calibration pairs, and (1 + 1/n) counts the uncertainty of the centre itself: the
usual prediction interval for one more draw. With fewer than MIN_PAIRS pairs there is nothing to
calibrate on: c = 0 and s_c = DEFAULT_LOG_SPREAD, with the normal quantile, and the interval says it
is not calibrated.

The calibration set holds the newest pair of each model (a model measured ten times counts once),
the newest MAX_MODELS models, and never the model being predicted: its own measured latency must
not decide its interval. Coverage is computed the same way: each pair of the set against the
interval the set's other pairs give it (leave one out).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = [
    "DEFAULT_LOG_SPREAD",
    "MAX_MODELS",
    "MIN_PAIRS",
    "NOMINAL",
    "Calibration",
    "Interval",
    "Pair",
    "calibration_set",
    "leave_one_out",
    "prediction_interval",
    "t_quantile",
]

# The interval's nominal coverage.
NOMINAL = 0.90
# Fewer pairs than this: the default spread below, not a calibration.
MIN_PAIRS = 3
# The log-scale spread assumed with no calibration: at 90%, a factor e^±0.164 (-15%, +18%), the
# spread of the errors docs/bricks.md reports over 22 catalogue models (most within ±13%).
DEFAULT_LOG_SPREAD = 0.10
# The most models a calibration is made of (the newest): older pairs may be of an older setup.
MAX_MODELS = 100
# A standard deviation from the median absolute deviation, for normal data.
_MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class Pair:
    """One past estimate and the latency its model measured whole, ms; `estimate_se_ms` is the
    estimate's standard error from its bricks' measurement noise."""

    model: str
    estimate_ms: float
    measured_ms: float
    estimate_se_ms: float = 0.0

    @property
    def log_ratio(self) -> float:
        return math.log(self.measured_ms / self.estimate_ms)

    @property
    def log_sd(self) -> float:
        """The estimate's measurement noise on the log scale (its relative standard error)."""
        return self.estimate_se_ms / self.estimate_ms if self.estimate_ms > 0 else 0.0


@dataclass(frozen=True)
class Calibration:
    """Where past measured latencies fell around their estimates, on the log scale: the centre and
    spread of ln(measured / estimate), over `pairs` pairs (calibrated: at least MIN_PAIRS)."""

    centre: float
    spread: float
    pairs: int
    calibrated: bool

    @classmethod
    def of(cls, pairs: Sequence[Pair]) -> Calibration:
        """The calibration of `pairs` (already a calibration set: `calibration_set`)."""
        if len(pairs) < MIN_PAIRS:
            return cls(0.0, DEFAULT_LOG_SPREAD, len(pairs), False)
        ratios = [pair.log_ratio for pair in pairs]
        centre = statistics.median(ratios)
        spread = _MAD_TO_SD * statistics.median(abs(ratio - centre) for ratio in ratios)
        return cls(centre, spread, len(pairs), True)


@dataclass(frozen=True)
class Interval:
    low_ms: float
    high_ms: float
    calibration: Calibration

    def holds(self, latency_ms: float) -> bool:
        return self.low_ms <= latency_ms <= self.high_ms


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile `p` with `df` degrees of freedom (Cornish-Fisher expansion of the normal
    quantile, Abramowitz and Stegun 26.7.5: within 0.3% of the exact value for df ≥ 2 at p = 0.95)."""
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


def prediction_interval(
    estimate_ms: float, estimate_se_ms: float, calibration: Calibration, nominal: float = NOMINAL
) -> Interval:
    """The nominal-`nominal` interval of the latency a model estimated at `estimate_ms` (standard
    error `estimate_se_ms`) will measure whole (the module docstring: how)."""
    upper = 0.5 + nominal / 2
    measurement = estimate_se_ms / estimate_ms if estimate_ms > 0 else 0.0
    if calibration.calibrated:
        n = calibration.pairs
        quantile = t_quantile(upper, n - 1)
        variance = calibration.spread**2 * (1 + 1 / n) + measurement**2
    else:
        quantile = NormalDist().inv_cdf(upper)
        variance = calibration.spread**2 + measurement**2
    half = quantile * math.sqrt(variance)
    return Interval(
        estimate_ms * math.exp(calibration.centre - half),
        estimate_ms * math.exp(calibration.centre + half),
        calibration,
    )


def calibration_set(pairs: Iterable[Pair], exclude: str | None = None) -> list[Pair]:
    """The pairs a calibration is made of, from `pairs` oldest first: the newest pair of each model,
    of the newest MAX_MODELS models, none of model `exclude` (the one being predicted), none whose
    estimate or measurement is not a positive latency."""
    newest: dict[str, Pair] = {}
    for pair in pairs:
        if pair.model == exclude or not (pair.estimate_ms > 0 and pair.measured_ms > 0):
            continue
        newest.pop(pair.model, None)  # re-inserted: the dict's order is each model's newest pair
        newest[pair.model] = pair
    return list(newest.values())[-MAX_MODELS:]


def leave_one_out(pairs: Sequence[Pair], nominal: float = NOMINAL) -> list[tuple[Pair, Interval]]:
    """Each pair of a calibration set with the interval the set's other pairs give it."""
    return [
        (
            pair,
            prediction_interval(
                pair.estimate_ms,
                pair.estimate_se_ms,
                Calibration.of([other for other in pairs if other.model != pair.model]),
                nominal,
            ),
        )
        for pair in pairs
    ]
