"""Latency statistics against reference values, and the two confidence intervals of the median."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from mlscope.runtime.measure import (
    MeasureSettings,
    median_ci_relative_halfwidth,
    order_statistic_median_ci,
    summarize,
)
from tests.result_shape import LATENCY_KEYS

MS = 1_000_000
SUMMARY_KEYS = LATENCY_KEYS


def settings(**overrides: object) -> MeasureSettings:
    return MeasureSettings(**{"bootstrap_resamples": 2000, **overrides})


def test_summary_matches_statistics_module_on_known_data() -> None:
    # Given 1..100 ms, shuffled
    values_ms = [float(v) for v in range(1, 101)]
    shuffled = np.random.default_rng(3).permutation(np.array(values_ms) * MS).astype(np.int64)
    # When summarised
    summary = summarize(shuffled, settings())
    # Then each figure matches the standard library's (quantiles 'inclusive' = linear, type 7)
    quantiles = statistics.quantiles(values_ms, n=1000, method="inclusive")
    assert summary.count == 100
    assert summary.mean == pytest.approx(statistics.mean(values_ms))
    assert summary.median == pytest.approx(statistics.median(values_ms))
    assert summary.p90 == pytest.approx(quantiles[899])
    assert summary.p95 == pytest.approx(quantiles[949])
    assert summary.p99 == pytest.approx(quantiles[989])
    assert summary.p999 == pytest.approx(quantiles[998])
    assert summary.min == 1.0
    assert summary.max == 100.0
    assert summary.stdev == pytest.approx(statistics.stdev(values_ms))
    assert summary.iqr == pytest.approx(quantiles[749] - quantiles[249])
    assert summary.cv == pytest.approx(statistics.stdev(values_ms) / statistics.mean(values_ms))


def test_trimmed_mean_cuts_the_trim_fraction_from_each_tail() -> None:
    # Given a skewed sample: eleven values, one far outlier
    values_ms = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1000]
    # When summarised with a 20% trim: int(0.2 * 11) = 2 cut from each end (scipy.stats.trim_mean)
    summary = summarize(np.array(values_ms) * MS, settings(trim=0.2))
    # Then the mean of 3..9 remains, untouched by the outlier
    assert summary.trimmed_mean == pytest.approx(statistics.mean(sorted(values_ms)[2:9]))
    assert summary.trimmed_mean == pytest.approx(6.0)
    assert summary.mean > 90


def test_zero_trim_gives_the_mean() -> None:
    summary = summarize(np.array([1, 5, 9, 100]) * MS, settings(trim=0.0))
    assert summary.trimmed_mean == pytest.approx(summary.mean)


def test_single_sample_has_no_nan_and_a_point_interval() -> None:
    # Given one latency of 4 ms / When summarised
    summary = summarize(np.array([4 * MS]), settings())
    # Then every figure is finite, the spread is zero and the interval is the point
    assert all(math.isfinite(v) for k, v in summary.to_dict().items() if k != "median_ci")
    assert summary.stdev == 0.0
    assert summary.cv == 0.0
    assert summary.iqr == 0.0
    assert summary.median_ci == (4.0, 4.0)
    assert summary.trimmed_mean == 4.0


def test_two_samples_have_finite_statistics() -> None:
    summary = summarize(np.array([1 * MS, 3 * MS]), settings())
    assert summary.median == 2.0
    assert summary.stdev == pytest.approx(statistics.stdev([1.0, 3.0]))
    low, high = summary.median_ci
    assert 1.0 <= low <= high <= 3.0
    assert all(math.isfinite(v) for v in (low, high, summary.trimmed_mean, summary.cv))


def test_empty_latencies_are_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        summarize(np.array([], dtype=np.int64), settings())


def test_to_dict_has_exactly_the_result_shape_keys() -> None:
    summary = summarize(np.arange(1, 50) * MS, settings())
    as_dict = summary.to_dict()
    assert set(as_dict) == SUMMARY_KEYS
    assert isinstance(as_dict["median_ci"], list)
    assert len(as_dict["median_ci"]) == 2


def lognormal_ns(count: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).lognormal(mean=0.0, sigma=0.3, size=count) * MS).astype(np.int64)


def test_bootstrap_interval_contains_the_median_and_is_reproducible() -> None:
    # Given skewed latencies
    latencies = lognormal_ns(1000, seed=1)
    # When summarised twice with the same seed
    first = summarize(latencies, settings(seed=11))
    second = summarize(latencies, settings(seed=11))
    # Then the interval brackets the median and is identical both times
    assert first.median_ci[0] <= first.median <= first.median_ci[1]
    assert first.median_ci[0] < first.median_ci[1]
    assert first.median_ci == second.median_ci


def test_bootstrap_interval_depends_on_the_seed() -> None:
    latencies = lognormal_ns(1001, seed=2)
    intervals = {summarize(latencies, settings(seed=seed)).median_ci for seed in (1, 2, 3)}
    assert len(intervals) > 1


def test_bootstrap_interval_narrows_with_more_samples() -> None:
    # Given a small and a large sample from the same distribution
    few = summarize(lognormal_ns(100, seed=4), settings())
    many = summarize(lognormal_ns(10_000, seed=4), settings())
    # Then the large sample's interval is narrower
    assert (many.median_ci[1] - many.median_ci[0]) < (few.median_ci[1] - few.median_ci[0]) / 3


def naive_bootstrap_median_ci(values: np.ndarray, resamples: int, confidence: float) -> tuple[float, float]:
    """Reference: resample indices explicitly, in chunks, and take the medians."""
    rng = np.random.default_rng(123)
    medians = []
    for start in range(0, resamples, 1000):
        rows = min(1000, resamples - start)
        picks = rng.integers(0, values.size, size=(rows, values.size))
        medians.append(np.median(values[picks], axis=1))
    alpha = 1 - confidence
    low, high = np.quantile(np.concatenate(medians), [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


@pytest.mark.parametrize("count", [40, 41])
def test_bootstrap_interval_agrees_with_explicit_resampling(count: int) -> None:
    # Given distinct values 1..count ms, even and odd counts
    values_ms = np.arange(1, count + 1, dtype=np.float64)
    # When the interval is computed by the summary and by explicit resampling, 20000 resamples each
    summary = summarize(values_ms * MS, settings(bootstrap_resamples=20_000))
    reference = naive_bootstrap_median_ci(values_ms, 20_000, 0.95)
    # Then the bounds agree to within one value's step (Monte Carlo noise is ~0.2 of a step)
    assert summary.median_ci[0] == pytest.approx(reference[0], abs=1.0)
    assert summary.median_ci[1] == pytest.approx(reference[1], abs=1.0)


def test_bootstrap_copes_with_many_samples() -> None:
    # Given 200 000 latencies (2000 explicit resamples would gather 4·10⁸ values)
    latencies = lognormal_ns(200_000, seed=5)
    # When summarised / Then the interval is tight and brackets the median
    summary = summarize(latencies, settings())
    assert summary.median_ci[0] <= summary.median <= summary.median_ci[1]
    assert (summary.median_ci[1] - summary.median_ci[0]) / summary.median < 0.01


def test_order_statistic_interval_uses_the_binomial_ranks() -> None:
    # Given 1..100: the ranks are floor(50 - 1.96·10/2) = 40 and ceil(51 + 9.8) = 61
    ordered = np.arange(1, 101)
    # When / Then
    assert order_statistic_median_ci(ordered, 0.95) == (40.0, 61.0)


def test_order_statistic_interval_covers_the_true_median_at_its_confidence() -> None:
    # Given 2000 samples of 101 standard normals, true median 0
    rng = np.random.default_rng(9)
    covered = 0
    for _ in range(2000):
        low, high = order_statistic_median_ci(np.sort(rng.standard_normal(101)), 0.95)
        covered += low <= 0.0 <= high
    # Then about 95% of the intervals contain it (distribution-free, rounded outwards)
    assert 0.93 <= covered / 2000 <= 0.99


def test_order_statistic_interval_of_one_sample_is_the_sample() -> None:
    assert order_statistic_median_ci(np.array([7]), 0.95) == (7.0, 7.0)


def test_order_statistic_interval_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError):
        order_statistic_median_ci(np.array([]), 0.95)


def test_relative_halfwidth_matches_the_sorted_interval_and_leaves_input_alone() -> None:
    # Given shuffled latencies
    latencies = np.random.default_rng(6).permutation(np.arange(1000, 2001, dtype=np.int64))
    before = latencies.copy()
    # When the stopping rule's width is computed without sorting
    width = median_ci_relative_halfwidth(latencies, 0.95)
    # Then it equals the one from the sorted interval, and the input is unchanged
    low, high = order_statistic_median_ci(np.sort(latencies), 0.95)
    assert width == pytest.approx((high - low) / 2 / float(np.median(latencies)))
    assert np.array_equal(latencies, before)


def test_relative_halfwidth_of_constant_latencies_is_zero() -> None:
    assert median_ci_relative_halfwidth(np.full(50, 1234, dtype=np.int64), 0.95) == 0.0
