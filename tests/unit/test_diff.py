"""The statistics of `mlscope diff` (mlscope.analysis.diff) on seeded synthetic latencies: the verdict
on no difference and on a 10% one, the interval covering the truth, the power statement against a
simulation of the rule it describes, the probability of superiority against the O(n²) count, and the
batch-median widening of a run whose median moved. Given / When / Then in each test's comments."""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pytest

from mlscope.analysis.diff import (
    FASTER,
    NO_DIFFERENCE,
    SLOWER,
    PointDiff,
    compare_samples,
    detection_probability,
    probability_of_superiority,
)
from mlscope.cli.diff import change_text, power_text
from mlscope.runtime.measure.stats import resampled_quantiles

# Latencies like a CPU model's: ~5 ms, right-skewed.
SCALE_NS = 5e6


def _latencies(rng: np.random.Generator, count: int, sigma: float = 0.2) -> np.ndarray:
    return SCALE_NS * rng.lognormal(0.0, sigma, count)


def test_a_sample_against_itself_is_no_difference() -> None:
    # Given one run's latencies
    a = _latencies(np.random.default_rng(1), 3000)
    # When it is compared with itself
    result = compare_samples(a, a)
    # Then the ratio is 1, its interval holds 1, B is as often faster as slower, and no difference is called
    assert result.ratio == pytest.approx(1.0)
    assert result.ci[0] <= 1.0 <= result.ci[1]
    assert result.superiority == pytest.approx(0.5)
    assert result.verdict == NO_DIFFERENCE
    assert "no detectable difference" in power_text(result.to_dict()) or "no difference of 2%" in power_text(
        result.to_dict()
    )


def test_two_draws_of_one_distribution_are_no_difference() -> None:
    rng = np.random.default_rng(2)
    result = compare_samples(_latencies(rng, 3000), _latencies(rng, 3000))
    assert result.verdict == NO_DIFFERENCE
    assert result.ci[0] <= 1.0 <= result.ci[1]


def test_latencies_scaled_by_1_10_are_slower_by_10_percent_with_an_interval_covering_it() -> None:
    # Given a run and the same run's latencies scaled by 1.10 (a fresh draw, so the interval is honest)
    rng = np.random.default_rng(3)
    a, b = _latencies(rng, 3000), _latencies(rng, 3000) * 1.10
    # When B is compared with A
    result = compare_samples(a, b)
    # Then B is slower by about 10%, the median's interval covering 10%, p90 and p99 ratios near it too
    assert result.verdict == SLOWER
    assert result.ratio == pytest.approx(1.10, abs=0.02)
    assert result.ci[0] < 1.10 < result.ci[1]
    for name in ("p90", "p99"):
        assert result.quantiles[name].ratio == pytest.approx(1.10, abs=0.05)
    assert result.superiority < 0.4
    assert change_text(result.to_dict()).startswith("slower by ")
    # And the exact copy scaled reads "slower by 10.0%"
    assert change_text(compare_samples(a, a * 1.10).to_dict()).startswith("slower by 10.0% (95% CI ")


def test_b_faster_is_called_faster() -> None:
    rng = np.random.default_rng(4)
    result = compare_samples(_latencies(rng, 3000), _latencies(rng, 3000) * 0.90)
    assert result.verdict == FASTER
    assert change_text(result.to_dict()).startswith("faster by ")


def test_a_significant_difference_below_the_threshold_is_not_called() -> None:
    # Given a 1.5% difference measured so precisely that the interval excludes 1 (a shift between runs)
    rng = np.random.default_rng(5)
    a = _latencies(rng, 200_000, sigma=0.02)
    result = compare_samples(a, a * 1.015)
    assert result.ci[0] > 1.0
    # Then at the default threshold (2%) it is no detectable difference; at 1% it is slower
    assert result.verdict == NO_DIFFERENCE
    assert compare_samples(a, a * 1.015, threshold=0.01).verdict == SLOWER


def test_the_same_inputs_give_the_same_answer() -> None:
    rng = np.random.default_rng(6)
    a, b = _latencies(rng, 1000), _latencies(rng, 1000)
    assert compare_samples(a, b, seed=7).to_dict() == compare_samples(a, b, seed=7).to_dict()


def _simulate(count: int, change: float, pairs: int, seed: int, **options: Any) -> list[PointDiff]:
    rng = np.random.default_rng(seed)
    return [
        compare_samples(
            _latencies(rng, count), _latencies(rng, count) * (1 + change), resamples=400, seed=pair, **options
        )
        for pair in range(pairs)
    ]


def test_the_stated_detectable_difference_is_detected_with_the_stated_power() -> None:
    # Given the power statement of one pair of 1500 samples each
    rng = np.random.default_rng(8)
    stated = compare_samples(_latencies(rng, 1500), _latencies(rng, 1500)).power
    assert 0.02 < stated.detectable < 0.1
    # When pairs with that true difference are simulated
    simulated = _simulate(1500, stated.detectable, pairs=200, seed=9)
    # Then the share judged slower is near the stated 80%
    rate = np.mean([result.verdict == SLOWER for result in simulated])
    assert 0.68 <= rate <= 0.92, rate


def test_the_stated_samples_needed_tell_the_threshold_from_no_change_with_the_stated_power() -> None:
    # Given a pair too small to resolve 2%, and the samples each side would need
    rng = np.random.default_rng(10)
    stated = compare_samples(_latencies(rng, 500), _latencies(rng, 500)).power
    assert stated.more_samples > 0
    # When pairs of that many samples with a true 2% difference are simulated
    simulated = _simulate(stated.samples_needed, 0.02, pairs=200, seed=11)
    # Then about 80% of their intervals exclude 1; with no series known the verdict asks the whole
    # interval past 2%, which a true 2% rarely gives; with a series known (spread 0 here: one
    # distribution) it cuts at 2% and calls about half
    excluded = np.mean([result.ci[0] > 1.0 for result in simulated])
    called = np.mean([result.verdict == SLOWER for result in simulated])
    assert 0.68 <= excluded <= 0.92, (stated.samples_needed, excluded)
    assert called <= 0.15, called
    known = _simulate(stated.samples_needed, 0.02, pairs=200, seed=11, between_runs=(0.0, 0.0))
    called_known = np.mean([result.verdict == SLOWER for result in known])
    assert 0.3 <= called_known <= 0.7, called_known


def test_detection_probability_is_the_rule_the_verdict_applies() -> None:
    # No true difference, a wide interval: only the two tails beyond z·se count
    assert detection_probability(0.0, 0.02, 0.02, 0.95) == pytest.approx(0.05, abs=0.001)
    # A huge difference is always detected; one below the threshold with a tiny se never
    assert detection_probability(0.5, 0.01, 0.02, 0.95) == pytest.approx(1.0)
    assert detection_probability(0.015, 1e-5, 0.02, 0.95) == pytest.approx(0.0)


def test_probability_of_superiority_counts_every_pair_and_half_the_ties() -> None:
    rng = np.random.default_rng(12)
    a, b = rng.integers(0, 20, 300), rng.integers(0, 22, 250)
    brute = np.mean([(y < x) + 0.5 * (y == x) for x in a for y in b])
    assert probability_of_superiority(a, b) == pytest.approx(brute)


def test_resampled_quantiles_match_an_explicit_bootstrap() -> None:
    # Given a sample and its p90 over explicit resamples
    rng = np.random.default_rng(13)
    ordered = np.sort(_latencies(rng, 501))
    explicit = np.quantile(rng.choice(ordered, size=(4000, ordered.size)), 0.9, axis=1)
    # When the resampled p90s are drawn directly
    direct = resampled_quantiles(ordered, 0.9, 4000, np.random.default_rng(14))
    # Then the two bootstrap distributions agree in centre and spread
    assert np.mean(direct) == pytest.approx(np.mean(explicit), rel=0.005)
    assert np.std(direct) == pytest.approx(np.std(explicit), rel=0.1)


def test_a_run_whose_median_moved_gets_a_wider_interval() -> None:
    # Given a run whose second half is 8% slower than its first (a machine that changed mid-run)
    rng = np.random.default_rng(15)
    steady = _latencies(rng, 4000, sigma=0.05)
    moved = np.concatenate([steady[:2000], steady[2000:] * 1.08])
    # When it is compared with a fresh draw, with and without the batch medians
    other = _latencies(rng, 4000, sigma=0.05)
    widened = compare_samples(other, moved)
    plain = compare_samples(other, moved, batch_medians=False)
    # Then the batch medians say the run is less sure of its median than resampling does
    assert widened.spread["B"]["batch_medians"] > widened.spread["B"]["resampling"]
    assert widened.ci[1] - widened.ci[0] > 1.5 * (plain.ci[1] - plain.ci[0])


@pytest.mark.parametrize("bad", [[5.0], [0.0, 1.0]])
def test_too_few_or_non_positive_latencies_are_refused(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="side A"):
        compare_samples(bad, [1.0, 2.0])


def test_a_between_run_spread_widens_the_interval_and_no_run_length_beats_it() -> None:
    # Given a pair 3% apart, each side measured precisely
    rng = np.random.default_rng(16)
    a, b = _latencies(rng, 20_000, sigma=0.05), _latencies(rng, 20_000, sigma=0.05) * 1.03
    # When separate runs of the series are known to differ by 2% (sd of log median)
    alone = compare_samples(a, b)
    with_series = compare_samples(a, b, between_runs=(0.02, 0.02))
    # Then without the series it is slower; with it, no detectable difference, and no sample count
    # would detect 2%
    assert alone.verdict == SLOWER
    assert with_series.verdict == NO_DIFFERENCE and with_series.ci[0] < 1.0
    assert with_series.se_log_ratio == pytest.approx(np.hypot(0.02, 0.02), rel=0.1)
    assert with_series.power.samples_needed is None and with_series.power.more_samples is None
    assert "no run length would detect 2%" in power_text(with_series.to_dict())


def test_a_small_between_run_spread_raises_the_samples_needed() -> None:
    rng = np.random.default_rng(17)
    a, b = _latencies(rng, 1000), _latencies(rng, 1000)
    alone, with_series = compare_samples(a, b), compare_samples(a, b, between_runs=(0.003, 0.003))
    assert alone.power.samples_needed is not None and with_series.power.samples_needed is not None
    assert with_series.power.samples_needed > alone.power.samples_needed


def test_100k_samples_per_side_take_megabytes_not_gigabytes() -> None:
    # Given 100,000 latencies per side (a naive 2000-resample bootstrap would hold 1.6 GB per side)
    rng = np.random.default_rng(18)
    a, b = _latencies(rng, 100_000), _latencies(rng, 100_000)
    # When they are compared
    tracemalloc.start()
    try:
        compare_samples(a, b)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Then the peak is a few copies of the samples
    assert peak < 30 * 2**20, peak


def test_without_a_series_a_difference_must_clear_the_threshold_with_its_whole_interval() -> None:
    # Given two runs 3% apart whose interval reaches below 2% (a rerun here read +2.2%, CI +0.4-6.0%)
    rng = np.random.default_rng(18)
    a, b = _latencies(rng, 300, sigma=0.15), _latencies(rng, 300, sigma=0.15) * 1.03
    alone = compare_samples(a, b)
    assert alone.ci[0] > 1.0 and alone.ci[0] < 1.02 and alone.ratio >= 1.02
    # Then with no other runs known it is no detectable difference, and the power line says why
    assert alone.verdict == NO_DIFFERENCE and not alone.series_known
    assert "whole interval lies beyond 2%" in power_text(alone.to_dict())
    # And once the series says separate runs hardly differ, the same pair is called slower
    known = compare_samples(a, b, between_runs=(0.001, None))
    assert known.series_known and known.verdict == SLOWER
    assert known.spread["B"]["between_runs"] == 0.001  # the side without one takes the other's
