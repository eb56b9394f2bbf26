"""Change points by E-divisive means (mlscope.analysis.changepoints): a planted step is found where it
is, with its size and confidence; a flat noisy series has none; the same seed gives the same answer;
a series too short says how many more points it needs; bad settings name the field."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mlscope.analysis.changepoints import DetectionSettings, detect_change_points, points_needed
from mlscope.contract.errors import UserError


def noisy(level: float, count: int, rng: np.random.Generator, cv: float = 0.02) -> np.ndarray:
    """`count` medians around `level` with a run-to-run coefficient of variation `cv` (log-normal)."""
    return level * rng.lognormal(0.0, cv, count)


def test_a_planted_step_is_found_where_it_is_with_its_size() -> None:
    # Given 40 points around 10 ms then 40 around 10.5 ms (+5%), with 2% run-to-run noise
    rng = np.random.default_rng(7)
    series = np.concatenate([noisy(10.0, 40, rng), noisy(10.5, 40, rng)])

    # When change points are looked for
    [change] = detect_change_points(series)

    # Then one is found at (or next to) the step, about +5%, with high confidence
    assert abs(change.index - 40) <= 2
    assert change.shift_pct == pytest.approx(5.0, abs=1.5)
    assert change.ratio == pytest.approx(change.median_after / change.median_before)
    assert change.confidence >= 0.95 and change.p_value == pytest.approx(1 - change.confidence)


def test_two_steps_are_both_found_in_order() -> None:
    # Given a series that rises 6% and then falls back
    rng = np.random.default_rng(3)
    series = np.concatenate([noisy(5.0, 30, rng), noisy(5.3, 30, rng), noisy(5.0, 30, rng)])

    # When looked for hierarchically
    found = detect_change_points(series)

    # Then both shifts are found, in order, up then down
    assert [abs(c.index - at) <= 2 for c, at in zip(found, (30, 60), strict=True)] == [True, True]
    assert found[0].shift_pct > 3 and found[1].shift_pct < -3


@pytest.mark.parametrize("seed", range(5))
def test_a_flat_noisy_series_has_no_change_point(seed: int) -> None:
    # Given 100 points with 2% noise and no step (seeded)
    series = noisy(10.0, 100, np.random.default_rng(seed))

    # When looked for at the default 5% level, Then none is found
    assert detect_change_points(series, DetectionSettings(seed=seed)) == []


def test_the_same_seed_gives_the_same_answer() -> None:
    rng = np.random.default_rng(11)
    series = np.concatenate([noisy(10.0, 12, rng), noisy(10.3, 12, rng)])
    settings = DetectionSettings(seed=42)
    assert detect_change_points(series, settings) == detect_change_points(series, settings)


def test_a_single_outlier_is_not_a_change_point() -> None:
    # Given a flat series with one run twice as slow in the middle
    series = noisy(10.0, 60, np.random.default_rng(5))
    series[30] *= 2

    # Then no change point: a segment is at least min_segment points
    assert detect_change_points(series) == []


def test_a_series_too_short_says_how_many_more_points_it_needs() -> None:
    settings = DetectionSettings(min_segment=5)
    assert points_needed(settings) == 10
    with pytest.raises(UserError) as raised:
        detect_change_points([1.0] * 7, settings)
    assert raised.value.field == "series"
    assert "3 more" in str(raised.value) and "at least 10" in str(raised.value)


def test_a_value_that_is_not_finite_is_refused() -> None:
    with pytest.raises(UserError) as raised:
        detect_change_points([1.0] * 9 + [float("nan")])
    assert raised.value.field == "series"


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"significance": 0}, "significance"),
        ({"significance": 1.5}, "significance"),
        ({"significance": True}, "significance"),
        ({"significance": "0.05"}, "significance"),
        ({"min_segment": 1}, "min_segment"),
        ({"min_segment": 2.5}, "min_segment"),
        ({"permutations": 5}, "permutations"),
        ({"seed": -1}, "seed"),
        ({"valid_only": "yes"}, "valid_only"),
    ],
)
def test_bad_settings_name_the_field(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(UserError) as raised:
        DetectionSettings(**settings)
    assert raised.value.field == field
