"""The statistics of `mlscope diff` (mlscope.analysis.diff) on seeded synthetic latencies: the verdict
on no difference and on a 10% one, the interval covering the truth, the power statement against a
simulation of the rule it describes, the probability of superiority against the O(n²) count, the
batch-median widening of a run whose median moved, and the inconclusive verdict of a pair with no
series known (its could-call and runs-needed figures against their formulas and a simulation of runs
that differ by the assumed spread). Given / When / Then in each test's comments."""

from __future__ import annotations

import tracemalloc
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from mlscope.analysis.diff import (
    DEFAULT_BETWEEN_RUNS,
    FASTER,
    INCONCLUSIVE,
    MIN_OTHER_RUNS,
    NO_DIFFERENCE,
    SLOWER,
    PointDiff,
    compare_samples,
    detection_probability,
    probability_of_superiority,
)
from mlscope.analysis.diff_prior import series_spread, t_quantile
from mlscope.cli.diff import change_text, power_text
from mlscope.runtime.measure.stats import resampled_quantiles

# Latencies like a CPU model's: ~5 ms, right-skewed.
SCALE_NS = 5e6
# A series known to add little between runs (0.5%, sd of log median): the rule without the prior.
QUIET_SERIES = (0.005, 0.005)


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
    # When B is compared with A, their series known to differ little between runs
    result = compare_samples(a, b, between_runs=QUIET_SERIES)
    # Then B is slower by about 10%, the median's interval covering 10%, p90 and p99 ratios near it too
    assert result.verdict == SLOWER
    assert result.ratio == pytest.approx(1.10, abs=0.02)
    assert result.ci[0] < 1.10 < result.ci[1]
    for name in ("p90", "p99"):
        assert result.quantiles[name].ratio == pytest.approx(1.10, abs=0.05)
    assert result.superiority < 0.4
    assert change_text(result.to_dict()).startswith("slower by ")
    # And the exact copy scaled reads "slower by 10.0%"
    assert change_text(compare_samples(a, a * 1.10, between_runs=QUIET_SERIES).to_dict()).startswith(
        "slower by 10.0% (95% CI "
    )


def test_b_faster_is_called_faster() -> None:
    rng = np.random.default_rng(4)
    result = compare_samples(_latencies(rng, 3000), _latencies(rng, 3000) * 0.90, between_runs=QUIET_SERIES)
    assert result.verdict == FASTER
    assert change_text(result.to_dict()).startswith("faster by ")


def test_a_significant_difference_below_the_threshold_is_not_called() -> None:
    # Given a 1.5% difference measured so precisely that the interval excludes 1 (a shift between runs)
    rng = np.random.default_rng(5)
    a = _latencies(rng, 200_000, sigma=0.02)
    result = compare_samples(a, a * 1.015)
    assert result.ci[0] > 1.0
    # Then at the default threshold (2%) it is no detectable difference; at 1% it is slower when the
    # series says runs do not differ, and inconclusive when no series is known
    assert result.verdict == NO_DIFFERENCE
    assert compare_samples(a, a * 1.015, threshold=0.01, between_runs=(0.0, 0.0)).verdict == SLOWER
    assert compare_samples(a, a * 1.015, threshold=0.01).verdict == INCONCLUSIVE


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
    # Given the power statement of one pair of 1500 samples each, its series known not to vary
    rng = np.random.default_rng(8)
    stated = compare_samples(_latencies(rng, 1500), _latencies(rng, 1500), between_runs=(0.0, 0.0)).power
    assert 0.02 < stated.detectable < 0.1
    # When pairs with that true difference are simulated
    simulated = _simulate(1500, stated.detectable, pairs=200, seed=9, between_runs=(0.0, 0.0))
    # Then the share judged slower is near the stated 80%
    rate = np.mean([result.verdict == SLOWER for result in simulated])
    assert 0.68 <= rate <= 0.92, rate


def test_the_stated_samples_needed_tell_the_threshold_from_no_change_with_the_stated_power() -> None:
    # Given a pair too small to resolve 2%, and the samples each side would need
    rng = np.random.default_rng(10)
    stated = compare_samples(_latencies(rng, 500), _latencies(rng, 500), between_runs=(0.0, 0.0)).power
    assert stated.more_samples > 0
    # When pairs of that many samples with a true 2% difference are simulated
    simulated = _simulate(stated.samples_needed, 0.02, pairs=200, seed=11)
    # Then about 80% of their intervals exclude 1; with no series known the verdict also asks the
    # difference to exceed what separate runs may differ by, which a true 2% rarely does; with a series
    # known (spread 0 here: one distribution) it cuts at 2% and calls about half
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
    # Then without the series it is inconclusive (the run says slower, separate runs may differ that
    # much); with it, no detectable difference, and no sample count would detect 2%
    assert alone.verdict == INCONCLUSIVE
    assert with_series.verdict == NO_DIFFERENCE and with_series.ci[0] < 1.0
    assert with_series.se_log_ratio == pytest.approx(np.hypot(0.02, 0.02), rel=0.1)
    assert with_series.power.samples_needed is None and with_series.power.more_samples is None
    assert "no run length would detect 2%" in power_text(with_series.to_dict())


def test_a_small_between_run_spread_raises_the_samples_needed() -> None:
    rng = np.random.default_rng(17)
    a, b = _latencies(rng, 1000), _latencies(rng, 1000)
    # (runs known not to differ, and known to differ by 0.3%)
    alone = compare_samples(a, b, between_runs=(0.0, 0.0))
    with_series = compare_samples(a, b, between_runs=(0.003, 0.003))
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


def test_without_a_series_a_within_run_difference_is_inconclusive_until_the_series_says_otherwise() -> None:
    # Given two runs 3% apart whose interval excludes 1 (a rerun here read +2.2%, CI +0.4-6.0%)
    rng = np.random.default_rng(18)
    a, b = _latencies(rng, 300, sigma=0.15), _latencies(rng, 300, sigma=0.15) * 1.03
    alone = compare_samples(a, b)
    assert alone.ci[0] > 1.0 and alone.ratio >= 1.02
    # Then with no other runs known it is inconclusive, and the power line says why and what would decide
    assert alone.verdict == INCONCLUSIVE and not alone.series_known
    text = power_text(alone.to_dict())
    assert text.startswith("inconclusive: ") and "more runs of each series would decide" in text
    assert change_text(alone.to_dict()).startswith("+")  # no "slower by"
    # And once the series says separate runs hardly differ, the same pair is called slower
    known = compare_samples(a, b, between_runs=(0.001, None))
    assert known.series_known and known.verdict == SLOWER and known.inconclusive is None
    assert known.spread["B"]["between_runs"] == 0.001  # the side without one takes the other's


def _z(level: float) -> float:
    return NormalDist().inv_cdf(level)


def test_a_small_shift_the_run_is_sure_of_is_inconclusive_with_what_would_decide() -> None:
    # Given two precise runs 5% apart (within-run interval about ±0.2%) and no series stored
    rng = np.random.default_rng(19)
    a, b = _latencies(rng, 20_000, sigma=0.05), _latencies(rng, 20_000, sigma=0.05) * 1.05
    result = compare_samples(a, b)
    assert result.ci[0] > 1.02  # the run alone would call it: its whole interval beyond 2%
    # Then it is inconclusive, stated at the default assumed spread
    assert result.verdict == INCONCLUSIVE and result.inconclusive is not None
    assert result.assumed_between_runs == DEFAULT_BETWEEN_RUNS
    # And its figures are the power formula's at se = √(within² + 2·assumed²), derived here
    within = np.hypot(result.spread["A"]["within"], result.spread["B"]["within"])
    se = np.sqrt(within**2 + 2 * DEFAULT_BETWEEN_RUNS**2)
    z, z_power = _z(0.975), _z(0.8)
    could_call = np.expm1(max(z * se, np.log(1.02)) + z_power * se)
    per_side = int(np.ceil(((z + z_power) * se / np.log(result.ratio)) ** 2))
    assert result.inconclusive.could_call == pytest.approx(could_call, rel=1e-9)
    assert result.power.detectable == pytest.approx(could_call, rel=1e-9)
    assert result.inconclusive.runs_needed == max(MIN_OTHER_RUNS, per_side - 1)
    assert result.inconclusive.runs_needed > MIN_OTHER_RUNS  # 5% at this spread takes more than 3
    # And the JSON carries them, the contract's names unchanged
    as_dict = result.to_dict()
    assert as_dict["verdict"] == "inconclusive" and {"ratio", "ci", "power", "series_known"} <= as_dict.keys()
    assert as_dict["inconclusive"]["runs_needed"] == result.inconclusive.runs_needed
    # And a smaller assumed spread (a quiet system) lets the same pair decide: slower
    assert compare_samples(a, b, assumed_between_runs=0.005).verdict == SLOWER


def test_a_large_shift_is_still_called_without_a_series() -> None:
    # Given B 50% faster, and B 30% slower, no series stored
    rng = np.random.default_rng(20)
    a = _latencies(rng, 2000)
    faster = compare_samples(a, _latencies(rng, 2000) * 0.5)
    slower = compare_samples(a, _latencies(rng, 2000) * 1.3)
    # Then both are called: beyond what separate runs differing by the assumed spread produce
    assert faster.verdict == FASTER and not faster.series_known and faster.inconclusive is None
    assert slower.verdict == SLOWER and slower.inconclusive is None
    assert "this pair could call" in power_text(slower.to_dict())


def test_the_could_call_figure_is_called_with_its_power_when_runs_differ_by_the_assumed_spread() -> None:
    # Given the could-call figure of a pair of 1500 samples each, no series stored
    rng = np.random.default_rng(21)
    stated = compare_samples(_latencies(rng, 1500), _latencies(rng, 1500)).power.detectable
    # When pairs of runs that truly differ by it are simulated, each run's median moved by a run
    # effect drawn at the assumed spread (separate runs on one machine)
    called = []
    for pair in range(200):
        effect_a, effect_b = np.exp(rng.normal(0.0, DEFAULT_BETWEEN_RUNS, 2))
        a = _latencies(rng, 1500) * effect_a
        b = _latencies(rng, 1500) * effect_b * (1 + stated)
        called.append(compare_samples(a, b, resamples=400, seed=pair).verdict == SLOWER)
    # Then about 80% are called slower
    assert 0.68 <= np.mean(called) <= 0.92, np.mean(called)


def test_a_negative_assumed_spread_is_refused() -> None:
    with pytest.raises(ValueError, match="assumed_between_runs"):
        compare_samples([1.0, 2.0], [1.0, 2.0], assumed_between_runs=-0.01)


@pytest.mark.parametrize(
    ("p", "freedom", "table"),
    # Student's t table (two-sided 95% and 99%), and t(1) = tan(π(p − ½)) (Cauchy)
    [
        (0.975, 2, 4.302653),
        (0.975, 4, 2.776445),
        (0.975, 11, 2.200985),
        (0.995, 3, 5.840909),
        (0.9, 1, 3.077684),
    ],
)
def test_t_quantile_matches_the_table(p: float, freedom: int, table: float) -> None:
    assert t_quantile(p, freedom) == pytest.approx(table, rel=1e-5)


def test_a_series_spread_is_its_sd_scaled_to_a_t_interval() -> None:
    # Given 3 and 12 runs' medians
    few, many = [10.0, 10.3, 9.8], list(np.linspace(9.8, 10.2, 12))
    # Then fewer than MIN_OTHER_RUNS give none, and the sd is scaled by t(k − 1) / z: 2.2× for 3 runs
    assert series_spread(few[:2], 0.95) is None
    z = _z(0.975)
    assert series_spread(few, 0.95) == pytest.approx(np.std(np.log(few), ddof=1) * 4.302653 / z, rel=1e-5)
    assert series_spread(many, 0.95) == pytest.approx(np.std(np.log(many), ddof=1) * 2.200985 / z, rel=1e-5)
