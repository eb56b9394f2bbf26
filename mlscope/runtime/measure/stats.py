"""Latency statistics: the summary of a run's latencies and the confidence intervals of its median.

Owns `LatencySummary` (the `latency_ms` object of the result shape), the bootstrap interval
reported with it, and the cheap order-statistic interval the stopping rule and the validity
verdict use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from mlscope.contract.result import LatencyMs
from mlscope.runtime.measure.settings import MeasureSettings

__all__ = [
    "LatencySummary",
    "median_ci_relative_halfwidth",
    "order_statistic_median_ci",
    "resampled_quantiles",
    "summarize",
]

NS_PER_MS = 1_000_000.0


@dataclass(frozen=True)
class LatencySummary:
    """Latency statistics of one measurement, every duration in milliseconds.

    Percentiles interpolate linearly between the closest ranks (numpy's default, Hyndman-Fan 7).
    `stdev` is the sample standard deviation (ddof=1; 0.0 for a single sample), `cv` is
    stdev / mean, `trimmed_mean` drops `settings.trim` of the samples from each tail, and
    `median_ci` is the percentile-bootstrap confidence interval of the median.
    """

    count: int
    mean: float
    median: float
    p90: float
    p95: float
    p99: float
    p999: float
    min: float
    max: float
    stdev: float
    iqr: float
    cv: float
    trimmed_mean: float
    median_ci: tuple[float, float]

    def to_dict(self) -> LatencyMs:
        """Returns:
        The `latency_ms` object of the result shape; `median_ci` as a two-element list.
        """
        return {
            "count": self.count,
            "mean": self.mean,
            "median": self.median,
            "p90": self.p90,
            "p95": self.p95,
            "p99": self.p99,
            "p999": self.p999,
            "min": self.min,
            "max": self.max,
            "stdev": self.stdev,
            "iqr": self.iqr,
            "cv": self.cv,
            "trimmed_mean": self.trimmed_mean,
            "median_ci": [self.median_ci[0], self.median_ci[1]],
        }


def summarize(latencies_ns: npt.ArrayLike, settings: MeasureSettings) -> LatencySummary:
    """Summarise a run's latencies.

    Args:
        latencies_ns: one latency per timed iteration, in nanoseconds, in any order.
        settings: supplies `trim`, `confidence`, `bootstrap_resamples` and `seed`.

    Returns:
        The summary in milliseconds; the same inputs always give the same summary.

    Raises:
        ValueError: there are no latencies.
    """
    ordered = np.sort(np.asarray(latencies_ns, dtype=np.float64).ravel()) / NS_PER_MS
    count = int(ordered.size)
    if count == 0:
        raise ValueError("cannot summarise an empty set of latencies")
    p25, median, p75, p90, p95, p99, p999 = (
        float(v) for v in np.percentile(ordered, [25, 50, 75, 90, 95, 99, 99.9])
    )
    mean = float(ordered.mean())
    stdev = float(ordered.std(ddof=1)) if count > 1 else 0.0
    cut = int(settings.trim * count)
    trimmed = ordered[cut : count - cut] if count - 2 * cut > 0 else ordered
    return LatencySummary(
        count=count,
        mean=mean,
        median=median,
        p90=p90,
        p95=p95,
        p99=p99,
        p999=p999,
        min=float(ordered[0]),
        max=float(ordered[-1]),
        stdev=stdev,
        iqr=p75 - p25,
        cv=stdev / mean if mean > 0 else 0.0,
        trimmed_mean=float(trimmed.mean()),
        median_ci=_bootstrap_median_ci(ordered, settings),
    )


def order_statistic_median_ci(sorted_ns: npt.ArrayLike, confidence: float) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from two order statistics.

    The ranks are n/2 − z·√n/2 and 1 + n/2 + z·√n/2 (1-based, rounded outwards), the normal
    approximation of the binomial count of samples below the median; no resampling, so it is
    cheap enough for the stopping rule.

    Args:
        sorted_ns: the samples in ascending order (any unit; the bounds come back in it).
        confidence: the confidence level, in (0, 1).

    Returns:
        (lower, upper); both equal the sample for a single sample.

    Raises:
        ValueError: there are no samples.
    """
    ordered = np.asarray(sorted_ns)
    if ordered.size == 0:
        raise ValueError("cannot bound the median of an empty set of samples")
    low, high = _median_ci_indices(int(ordered.size), confidence)
    return float(ordered[low]), float(ordered[high])


def median_ci_relative_halfwidth(latencies_ns: npt.NDArray[Any], confidence: float) -> float:
    """Half-width of the order-statistic median interval as a fraction of the median.

    Selects the few order statistics it needs in linear time instead of sorting, because the
    stopping rule evaluates it on up to millions of samples several times a second.

    Args:
        latencies_ns: the samples in any order; not modified.
        confidence: the confidence level, in (0, 1).

    Returns:
        (upper − lower) / 2 / median; 0.0 for a zero-width interval, inf when the median is 0
        but the interval is not.

    Raises:
        ValueError: there are no samples.
    """
    count = int(latencies_ns.size)
    if count == 0:
        raise ValueError("cannot bound the median of an empty set of samples")
    low, high = _median_ci_indices(count, confidence)
    mid_low, mid_high = (count - 1) // 2, count // 2
    selected = np.partition(latencies_ns, sorted({low, mid_low, mid_high, high}))
    width = float(selected[high]) - float(selected[low])
    median = (float(selected[mid_low]) + float(selected[mid_high])) / 2
    if width == 0:
        return 0.0
    return width / 2 / median if median > 0 else math.inf


def _median_ci_indices(count: int, confidence: float) -> tuple[int, int]:
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    spread = z * math.sqrt(count) / 2
    low_rank = math.floor(count / 2 - spread)
    high_rank = math.ceil(count / 2 + 1 + spread)
    return max(low_rank, 1) - 1, min(high_rank, count) - 1


def _bootstrap_median_ci(ordered: npt.NDArray[np.float64], settings: MeasureSettings) -> tuple[float, float]:
    """Percentile bootstrap of the median, each resample's median drawn directly (`resampled_quantiles`)."""
    if ordered.size == 1:
        return float(ordered[0]), float(ordered[0])
    rng = np.random.default_rng(settings.seed)
    medians = resampled_quantiles(ordered, 0.5, settings.bootstrap_resamples, rng)
    alpha = 1.0 - settings.confidence
    low, high = np.quantile(medians, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def resampled_quantiles(
    ordered: npt.NDArray[np.float64], quantile: float, resamples: int, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """The `quantile` of each of `resamples` bootstrap resamples of `ordered`, drawn directly.

    A resample of n indices drawn uniformly from the sorted data has as its k-th smallest index
    floor(n·U(k)), where U(k) is the k-th order statistic of n uniforms: Beta(k, n−k+1); the next
    one is U(k) + (1 − U(k))·Beta(1, n−k). So each resample's quantile (interpolated between two
    ranks, as numpy's default does) is drawn exactly, in O(1) memory and time per resample instead
    of O(n): 2000 resamples of 10⁶ latencies would otherwise gather 2·10⁹ values.

    Args:
        ordered: the samples in ascending order (at least one).
        quantile: in [0, 1].
        resamples: how many resamples.
        rng: the generator drawn from (seeded by the caller, so results are reproducible).
    """
    count = int(ordered.size)
    position = (count - 1) * quantile
    below = math.floor(position)
    fraction = position - below
    k = below + 1
    lower_u = rng.beta(k, count - k + 1, size=resamples)
    lower = ordered[np.minimum((lower_u * count).astype(np.int64), count - 1)]
    if fraction == 0 or k >= count:
        return np.asarray(lower, dtype=np.float64)
    upper_u = lower_u + (1.0 - lower_u) * rng.beta(1, count - k, size=resamples)
    upper = ordered[np.minimum((upper_u * count).astype(np.int64), count - 1)]
    return np.asarray(lower + (upper - lower) * fraction, dtype=np.float64)
