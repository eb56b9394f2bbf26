"""Is B faster than A at one point (scenario, batch size), by how much, and how sure: the statistics
of `mlscope diff`, pure numpy over two raw latency samples.

For each of the median, p90 and p99: the ratio B/A with a bootstrap interval (each side resampled
apart, each resample's quantile drawn directly, so 100k samples cost no more memory than 100). For
the median also: the probability of superiority P(a B sample < an A sample), ties counted half; a
verdict; and a power statement.

The verdict rule (docs/verdicts.md gives the calibration as measured). B is "slower" (or "faster")
when both hold:
  1. the median ratio's interval excludes 1. Its standard error (on the log scale) adds, per side:
     within the run, the larger of the resampling one and the batch medians' (the iid bootstrap
     assumes independent samples; a run whose median drifts is less sure of itself than its sample
     count says); and between runs, the spread of the medians of the side's runs of the same series,
     when the caller knows at least MIN_OTHER_RUNS besides the pair's own (`diff_report` reads them
     from the store): separate runs on a shared machine differ by more than any within-run interval
     says;
  2. the estimated difference reaches the threshold.
When no between-run spread is known for either side (a first comparison, a rerun), the within-run
interval must not decide alone: the rule is applied twice, with the within-run part only and with an
assumed between-run spread per side (`assumed_between_runs`: the caller's prior, the system's pooled
spread or DEFAULT_BETWEEN_RUNS). Called by both: a difference beyond what separate runs could
produce, "faster"/"slower". Called by the first only: INCONCLUSIVE, with what the pair could call
and how many runs would decide. Called by neither: NO_DIFFERENCE.
Rule 1 alone keeps the false-positive rate at most 1 − confidence on any distribution; rule 2 keeps
separate runs from being called different for sub-threshold shifts.

The power statement follows the rule: `detectable` is the smallest true difference the rule calls
with probability POWER (with the assumed spread when none is known); `samples_needed` is the count at
which the interval tells a change of the threshold from none with that probability,
(z₁₋α/₂ + z_power)·se ≤ log(1 + t), the within-run part of se shrinking as 1/√n and the between-run
part not at all (None when that part alone is too wide: more runs would help, longer ones cannot). The
rule then calls a true change of exactly the threshold about half the time, as any rule with a cut-off
there. An inconclusive pair's `runs_needed` is the runs of each series, beyond the pair's own, that
would decide: MIN_OTHER_RUNS so the series' spread is measured, or n − 1 when n runs per side, their
log medians averaged, tell the measured difference from none with probability POWER at the assumed
spread ((z₁₋α/₂ + z_power)·se/√n ≤ |log ratio|).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from mlscope.analysis.verdicts import (
    DEFAULT_CONFIDENCE,
    DEFAULT_THRESHOLD,
    FASTER,
    INCONCLUSIVE,
    MIN_OTHER_RUNS,
    NO_DIFFERENCE,
    SLOWER,
    VERDICTS,
)
from mlscope.runtime.measure.stats import resampled_quantiles

__all__ = [
    "DEFAULT_BETWEEN_RUNS",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_THRESHOLD",
    "FASTER",
    "INCONCLUSIVE",
    "NO_DIFFERENCE",
    "POWER",
    "SLOWER",
    "VERDICTS",
    "Inconclusive",
    "PointDiff",
    "PowerStatement",
    "RatioInterval",
    "compare_samples",
    "detection_probability",
    "probability_of_superiority",
    "runs_needed",
]

# The power the detectable-difference and samples-needed figures are stated at.
POWER = 0.8
DEFAULT_RESAMPLES = 2000
# Batch medians: the run is cut into this many consecutive blocks; fewer samples per block than
# MIN_BLOCK_SAMPLES make block medians too coarse to say anything, and the widening is skipped.
BLOCKS = 10
MIN_BLOCK_SAMPLES = 5
QUANTILES = {"median": 0.5, "p90": 0.9, "p99": 0.99}
# The between-run spread (sd of log median, per side) assumed when neither side's series has one and
# the caller knows no better (no series on the system with MIN_OTHER_RUNS runs): docs/verdicts.md
# gives the measurement it rests on (benchmarks/verdict_calibration.py's real part).
DEFAULT_BETWEEN_RUNS = 0.04


@dataclass(frozen=True)
class RatioInterval:
    """One quantile's ratio B/A and its confidence interval."""

    ratio: float
    ci: tuple[float, float]

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "ci": [self.ci[0], self.ci[1]]}


@dataclass(frozen=True)
class PowerStatement:
    """What this pair could detect.

    Attributes:
        detectable: the smallest true relative difference of medians the verdict rule would detect
            with probability `power` (0.034 = 3.4%).
        samples_needed: samples each side would need (at this pair's spread) for the interval to
            exclude 1 with probability `power` when the true difference is the threshold; None when
            the between-run spread alone is too wide for that.
        more_samples: samples_needed minus the smaller side's count, 0 when already enough (None
            with samples_needed).
        power: the power both figures are stated at.
    """

    detectable: float
    samples_needed: int | None
    more_samples: int | None
    power: float = POWER

    def to_dict(self) -> dict[str, Any]:
        return {
            "detectable": self.detectable,
            "samples_needed": self.samples_needed,
            "more_samples": self.more_samples,
            "power": self.power,
        }


@dataclass(frozen=True)
class Inconclusive:
    """Why an INCONCLUSIVE pair did not decide, and what would.

    Attributes:
        could_call: the smallest true relative difference the rule calls with probability `power`
            when separate runs differ by the assumed spread (0.16 = 16%).
        runs_needed: runs of each series, beyond the pair's own, that would decide (the module
            docstring's formula; at least MIN_OTHER_RUNS, so that the series' spread is measured).
        assumed_between_runs: the assumed sd of log(median) between runs, per side.
        power: the power both figures are stated at.
    """

    could_call: float
    runs_needed: int
    assumed_between_runs: float
    power: float = POWER

    def to_dict(self) -> dict[str, Any]:
        return {
            "could_call": self.could_call,
            "runs_needed": self.runs_needed,
            "assumed_between_runs": self.assumed_between_runs,
            "power": self.power,
        }


@dataclass(frozen=True)
class PointDiff:
    """The comparison of B with A at one point.

    Attributes:
        ratio, ci: the median ratio B/A and its interval (widened as the module docstring says).
        quantiles: "median", "p90", "p99" → their ratio and interval (the median's as ratio/ci).
        superiority: P(a B sample < an A sample) + half P(equal): 0.5 when neither is faster.
        verdict: FASTER, SLOWER, NO_DIFFERENCE or INCONCLUSIVE (B compared with A).
        power: the power statement.
        se_log_ratio: the standard error of log(median ratio) the verdict used; `spread` says where
            it came from ("resampling" and "batch medians" per side).
        counts: (samples of A, samples of B).
        series_known: whether a between-run spread was known (else the rule with an assumed one).
        assumed_between_runs: the between-run spread assumed per side when none was known (None
            when one was): `power` is then stated with it.
        inconclusive: what would decide, when the verdict is INCONCLUSIVE (else None).
    """

    ratio: float
    ci: tuple[float, float]
    quantiles: dict[str, RatioInterval]
    superiority: float
    verdict: str
    power: PowerStatement
    se_log_ratio: float
    counts: tuple[int, int]
    threshold: float
    confidence: float
    spread: dict[str, dict[str, float]] = field(default_factory=dict)
    series_known: bool = True
    assumed_between_runs: float | None = None
    inconclusive: Inconclusive | None = None

    @property
    def change(self) -> float:
        """The relative change of the median, B against A (0.10: B 10% slower)."""
        return self.ratio - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio,
            "ci": [self.ci[0], self.ci[1]],
            "verdict": self.verdict,
            "power": self.power.to_dict(),
            "change": self.change,
            "quantiles": {name: q.to_dict() for name, q in self.quantiles.items()},
            "superiority": self.superiority,
            "se_log_ratio": self.se_log_ratio,
            "spread": self.spread,
            "counts": list(self.counts),
            "threshold": self.threshold,
            "confidence": self.confidence,
            "series_known": self.series_known,
            "assumed_between_runs": self.assumed_between_runs,
            "inconclusive": None if self.inconclusive is None else self.inconclusive.to_dict(),
        }


def compare_samples(
    a_ns: npt.ArrayLike,
    b_ns: npt.ArrayLike,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    batch_medians: bool = True,
    between_runs: tuple[float | None, float | None] = (None, None),
    assumed_between_runs: float = DEFAULT_BETWEEN_RUNS,
) -> PointDiff:
    """Compare B's latencies with A's at one point.

    Args:
        a_ns, b_ns: each side's latencies in the order they were measured (the order matters only
            to the batch medians), any unit, at least 2 each.
        threshold: the smallest relative difference that matters (0.02 = 2%), in (0, 1).
        confidence: the level of every interval, in (0, 1).
        resamples: bootstrap resamples per side.
        seed: seeds the bootstrap, so the same inputs always give the same answer.
        batch_medians: widen the interval by the batch medians (see the module docstring); False
            keeps the plain resampling interval.
        between_runs: per side, the standard deviation of log(median) between separate runs of its
            series, None when unknown; it widens the interval and does not shrink with more samples.
            A side without one takes the other's (one machine's runs); with neither, the verdict
            also applies the rule with `assumed_between_runs` (the module docstring says how).
        assumed_between_runs: the sd of log(median) between runs assumed per side when neither side
            has one, >= 0.

    Raises:
        ValueError: a side has fewer than 2 samples, or a non-positive latency; a negative or
            non-finite assumed spread.
    """
    if not (math.isfinite(assumed_between_runs) and assumed_between_runs >= 0):
        raise ValueError(f"assumed_between_runs must be a finite sd >= 0, got {assumed_between_runs!r}")
    a, b = _ordered(a_ns, "A"), _ordered(b_ns, "B")
    known = [sd for sd in between_runs if sd is not None]
    between = tuple(known[0] if sd is None else sd for sd in between_runs) if known else (0.0, 0.0)
    rng = np.random.default_rng(seed)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    quantiles: dict[str, RatioInterval] = {}
    spread: dict[str, dict[str, float]] = {}
    se = 0.0
    for name, q in QUANTILES.items():
        log_a = np.log(resampled_quantiles(a, q, resamples, rng))
        log_b = np.log(resampled_quantiles(b, q, resamples, rng))
        estimate = math.log(float(np.quantile(b, q))) - math.log(float(np.quantile(a, q)))
        widen = 1.0
        if name == "median":
            spread = {
                side: _side_spread(np.asarray(raw, dtype=np.float64).ravel(), logs, batch_medians, between)
                for side, raw, logs, between in (
                    ("A", a_ns, log_a, between[0]),
                    ("B", b_ns, log_b, between[1]),
                )
            }
            resampling_se = math.hypot(spread["A"]["resampling"], spread["B"]["resampling"])
            within_se = math.hypot(spread["A"]["within"], spread["B"]["within"])
            se = math.hypot(within_se, between[0], between[1])
            widen = se / resampling_se if resampling_se > 0 else 1.0
        quantiles[name] = _ratio_interval(estimate, log_b - log_a, confidence, widen)
    median = quantiles["median"]
    verdict = _verdict(median, threshold)
    smaller = min(a.size, b.size)
    inconclusive = None
    if known:
        power = _power(within_se, se, z, threshold, smaller)
    else:
        # No series known: the rule again with the assumed spread between runs (module docstring).
        assumed_se = math.hypot(within_se, assumed_between_runs, assumed_between_runs)
        power = _power(within_se, assumed_se, z, threshold, smaller)
        change = abs(math.log(median.ratio))
        if verdict != NO_DIFFERENCE and change <= _cut(z * assumed_se, math.log1p(threshold)):
            verdict = INCONCLUSIVE
            inconclusive = Inconclusive(
                could_call=power.detectable,
                runs_needed=runs_needed(change, assumed_se, z),
                assumed_between_runs=assumed_between_runs,
            )
    return PointDiff(
        ratio=median.ratio,
        ci=median.ci,
        quantiles=quantiles,
        superiority=probability_of_superiority(a, b),
        verdict=verdict,
        power=power,
        se_log_ratio=se,
        counts=(int(a.size), int(b.size)),
        threshold=threshold,
        confidence=confidence,
        spread=spread,
        series_known=bool(known),
        assumed_between_runs=None if known else assumed_between_runs,
        inconclusive=inconclusive,
    )


def runs_needed(log_change: float, se_log_ratio: float, z: float) -> int:
    """Runs of each series, beyond the pair's own, that would decide a pair `log_change` apart (|log
    ratio|) whose single-run standard error is `se_log_ratio`: at least MIN_OTHER_RUNS (the series'
    spread measured), or n − 1 where n runs per side, log medians averaged, tell the change from none
    with probability POWER: (z + z_power)·se/√n ≤ |log ratio|."""
    z_power = NormalDist().inv_cdf(POWER)
    if log_change <= 0:
        raise ValueError("runs_needed: the change must be non-zero")
    per_side = math.ceil(((z + z_power) * se_log_ratio / log_change) ** 2)
    return max(MIN_OTHER_RUNS, per_side - 1)


def probability_of_superiority(a_ns: npt.ArrayLike, b_ns: npt.ArrayLike) -> float:
    """P(a B sample < an A sample) + half P(equal), over every pair, in O((m + n) log m) by ranks.

    0.5: neither side tends to be faster; 1.0: every B sample is faster than every A sample.
    """
    a = np.sort(np.asarray(a_ns, dtype=np.float64).ravel())
    b = np.asarray(b_ns, dtype=np.float64).ravel()
    if a.size == 0 or b.size == 0:
        raise ValueError("both sides need at least one sample")
    at_or_below = np.searchsorted(a, b, side="right")
    below = np.searchsorted(a, b, side="left")
    greater = a.size - at_or_below
    ties = at_or_below - below
    return float((greater.sum() + 0.5 * ties.sum()) / (a.size * b.size))


def detection_probability(
    true_change: float, se_log_ratio: float, threshold: float, confidence: float
) -> float:
    """The probability the verdict rule calls a true relative change of medians `true_change` (0.05:
    5% slower) a difference, when log(ratio) is estimated normally with standard error
    `se_log_ratio`: P(|L| > max(z·se, log(1 + t))) with L ~ N(log(1 + change), se²). With no series
    known, se is the one with the assumed between-run spread (PointDiff.power's)."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    cut = _cut(z * se_log_ratio, math.log1p(threshold))
    shift = abs(math.log1p(true_change))
    if se_log_ratio <= 0:
        return 1.0 if shift > cut else 0.0
    normal = NormalDist()
    return normal.cdf((shift - cut) / se_log_ratio) + normal.cdf((-shift - cut) / se_log_ratio)


def _ordered(samples: npt.ArrayLike, side: str) -> npt.NDArray[np.float64]:
    ordered = np.sort(np.asarray(samples, dtype=np.float64).ravel())
    if ordered.size < 2:
        raise ValueError(f"side {side} has {ordered.size} sample(s): at least 2 are needed")
    if ordered[0] <= 0:
        raise ValueError(f"side {side} has a latency of {ordered[0]:g}: latencies must be positive")
    return ordered


def _side_spread(
    in_order: npt.NDArray[np.float64],
    resampled_logs: npt.NDArray[np.float64],
    batch_medians: bool,
    between_runs: float,
) -> dict[str, float]:
    """One side's standard errors of log(median): by resampling, by batch medians, within the run (the
    larger of the two), and between runs (as given)."""
    resampling = float(np.std(resampled_logs, ddof=1))
    batch = _batch_median_se(in_order) if batch_medians else 0.0
    return {
        "resampling": resampling,
        "batch_medians": batch,
        "within": max(resampling, batch),
        "between_runs": between_runs,
    }


def _batch_median_se(in_order: npt.NDArray[np.float64]) -> float:
    """The standard error of log(median) from BLOCKS consecutive blocks' medians (batch means): it
    counts drift and correlated stretches that resampling single samples cannot see. 0.0 when the
    run is too short to cut into blocks."""
    usable = in_order.size - in_order.size % BLOCKS
    if usable < BLOCKS * MIN_BLOCK_SAMPLES:
        return 0.0
    block_medians = np.median(in_order[:usable].reshape(BLOCKS, -1), axis=1)
    return float(np.std(np.log(block_medians), ddof=1) / math.sqrt(BLOCKS))


def _ratio_interval(
    estimate: float, resampled: npt.NDArray[np.float64], confidence: float, widen: float
) -> RatioInterval:
    """The percentile interval of the resampled log ratios, its distances from the estimate scaled
    by `widen` (1: the plain percentile interval)."""
    alpha = 1.0 - confidence
    low, high = (float(v) for v in np.quantile(resampled, [alpha / 2, 1 - alpha / 2]))
    low, high = min(low, estimate), max(high, estimate)
    low_log = estimate - (estimate - low) * widen
    high_log = estimate + (high - estimate) * widen
    return RatioInterval(ratio=math.exp(estimate), ci=(math.exp(low_log), math.exp(high_log)))


def _cut(half_width: float, floor: float) -> float:
    """How far from 0 log(ratio) must be to be called: beyond the interval's half-width and the
    threshold."""
    return max(half_width, floor)


def _verdict(median: RatioInterval, threshold: float) -> str:
    floor = math.log1p(threshold)
    change = math.log(median.ratio)
    low, high = math.log(median.ci[0]), math.log(median.ci[1])
    if low > 0.0 and change >= floor:
        return SLOWER
    if high < 0.0 and -change >= floor:
        return FASTER
    return NO_DIFFERENCE


def _power(within_se: float, se: float, z: float, threshold: float, smaller_count: int) -> PowerStatement:
    """The smallest difference the rule calls with probability POWER, and the samples each side would
    need for the interval to tell the threshold from no change; the within-run part of se is taken to
    shrink as 1/√n, the between-run part not at all."""
    z_power = NormalDist().inv_cdf(POWER)
    floor = math.log1p(threshold)
    detectable = math.expm1(_cut(z * se, floor) + z_power * se)
    wanted_se = math.log1p(threshold) / (z + z_power)
    between_var = se**2 - within_se**2
    if between_var >= wanted_se**2:
        return PowerStatement(detectable=detectable, samples_needed=None, more_samples=None)
    needed = max(math.ceil(smaller_count * within_se**2 / (wanted_se**2 - between_var)), 2)
    return PowerStatement(
        detectable=detectable, samples_needed=needed, more_samples=max(needed - smaller_count, 0)
    )
