"""The bricks estimate's prediction interval: its maths on cases worked out here by hand, the
calibration that never holds the pair being predicted, and the pair log it is read from."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mlscope.analysis.bricks import BrickTime, compose
from mlscope.analysis.bricks.interval import (
    DEFAULT_LOG_SPREAD,
    MIN_PAIRS,
    Calibration,
    Pair,
    calibration_set,
    leave_one_out,
    prediction_interval,
    t_quantile,
)
from mlscope.services.bricks.calibration import PairLog, interval_section, setup_of

# Student's t, 95th percentile, from a printed table: 4 and 9 degrees of freedom.
T95 = {4: 2.131847, 9: 1.833113}
# The normal distribution's 95th percentile.
Z95 = 1.644854
SETUP = setup_of("system-a", "onnxruntime", "1.31.1", 1, "cpu")


def _pair(model: str, log_ratio: float, estimate: float = 10.0, se: float = 0.0) -> Pair:
    return Pair(model, estimate, estimate * math.exp(log_ratio), se)


def test_a_calibrated_interval_is_the_t_prediction_interval_on_the_log_scale() -> None:
    # Given five past pairs whose ln(measured / estimate) are -0.1, 0, 0.1, 0.2 and 0.3: median 0.1,
    # absolute deviations 0.2, 0.1, 0, 0.1, 0.2, so MAD 0.1 and a robust spread of 0.14826
    pairs = [_pair(f"m{index}", ratio) for index, ratio in enumerate([-0.1, 0.0, 0.1, 0.2, 0.3])]
    calibration = Calibration.of(pairs)
    assert calibration.calibrated and calibration.pairs == 5
    assert calibration.centre == pytest.approx(0.1)
    assert calibration.spread == pytest.approx(0.14826)
    # When a model estimated at 20 ms with a standard error of 0.6 ms (3%) is given its interval
    interval = prediction_interval(20.0, 0.6, calibration)
    # Then it is 20 × exp(0.1 ± t(4) × √(0.14826² × (1 + 1/5) + 0.03²)), t(4) from the table
    half = T95[4] * math.sqrt(0.14826**2 * 1.2 + 0.03**2)
    assert interval.low_ms == pytest.approx(20.0 * math.exp(0.1 - half), rel=1e-3)
    assert interval.high_ms == pytest.approx(20.0 * math.exp(0.1 + half), rel=1e-3)


def test_with_too_few_pairs_the_interval_is_the_documented_default() -> None:
    # Given fewer stored pairs than a calibration needs
    calibration = Calibration.of([_pair("a", 0.5)] * (MIN_PAIRS - 1))
    # When an estimate of 8 ms with a standard error of 0.4 ms (5%) is given its interval
    interval = prediction_interval(8.0, 0.4, calibration)
    # Then it is not calibrated: centred on the estimate, the default spread and the bricks' noise
    # combined in quadrature, at the normal 95th percentile
    assert not calibration.calibrated
    half = Z95 * math.sqrt(DEFAULT_LOG_SPREAD**2 + 0.05**2)
    assert interval.low_ms == pytest.approx(8.0 * math.exp(-half), rel=1e-6)
    assert interval.high_ms == pytest.approx(8.0 * math.exp(half), rel=1e-6)


def test_the_t_quantile_matches_the_table() -> None:
    for df, value in T95.items():
        assert t_quantile(0.95, df) == pytest.approx(value, rel=1e-3)


def test_the_estimate_carries_its_standard_error() -> None:
    # Given two distinct bricks, one used twice, and a run cost with no error
    times = {"a": BrickTime(1.0, (0.9, 1.1)), "b": BrickTime(2.0, (1.8, 2.2))}
    call = BrickTime(0.01, (0.01, 0.01))
    composition = compose(["a", "a", "b"], times, [(0, 1), (1, 2)], call)
    # Then its standard error adds the repeated brick's linearly and the distinct ones in quadrature
    se_a, se_b = 0.1 / 1.959964, 0.2 / 1.959964
    assert composition.estimate_se_ms == pytest.approx(math.sqrt((2 * se_a) ** 2 + se_b**2), rel=1e-5)


def test_the_calibration_set_never_holds_the_model_being_predicted() -> None:
    # Given pairs oldest first, two of model "x" (the one to predict) and two of "a"
    pairs = [_pair("a", 0.0), _pair("x", 1.0), _pair("b", 0.1), _pair("a", 0.2), _pair("x", 2.0)]
    # When the calibration set for "x" is made
    chosen = calibration_set(pairs, exclude="x")
    # Then it holds no pair of "x", and the newest pair of each other model once
    assert [pair.model for pair in chosen] == ["b", "a"]
    assert chosen[1].log_ratio == pytest.approx(0.2)


def test_leave_one_out_gives_each_pair_the_interval_of_the_others() -> None:
    pairs = [_pair(f"m{index}", 0.02 * index) for index in range(6)] + [_pair("far", 1.5)]
    for pair, interval in leave_one_out(pairs):
        others = Calibration.of([other for other in pairs if other is not pair])
        assert interval.calibration == others and interval.calibration.pairs == len(pairs) - 1
    # and the far pair is outside the interval the others give it
    far = dict((pair.model, interval) for pair, interval in leave_one_out(pairs))["far"]
    assert not far.holds(pairs[-1].measured_ms)


def test_a_report_is_calibrated_without_its_own_pair_which_is_then_stored(tmp_path: Path) -> None:
    # Given a pair log with ten other models of this setup, one of another system, and an earlier
    # pair of the model to predict far off (measured 20x its estimate), and a line cut short
    log = PairLog(tmp_path / "pairs.jsonl")
    others = [_pair(f"m{index}", 0.01 * (index - 5), se=0.1) for index in range(10)]
    for pair in others:
        log.add(SETUP, pair)
    log.add({**SETUP, "system_id": "system-b"}, _pair("m0", 3.0))
    log.add(SETUP, _pair("model", math.log(20.0)))
    with log.path.open("a") as file:
        file.write('{"model": "cut')
    report = {"model": "model", "estimate_ms": 10.0, "estimate_se_ms": 0.2, "measured_ms": 10.5}
    # When its interval is made
    section = interval_section(report, log, SETUP)
    # Then it is the interval of the ten other models' pairs only
    expected = prediction_interval(10.0, 0.2, Calibration.of(others))
    assert section["interval_ms"] == pytest.approx([expected.low_ms, expected.high_ms])
    coverage = section["coverage"]
    assert coverage["pairs"] == 10 and coverage["calibrated"] and coverage["nominal"] == 0.9
    inside = sum(interval.holds(pair.measured_ms) for pair, interval in leave_one_out(others))
    assert coverage["inside"] == inside and coverage["share"] == pytest.approx(inside / 10)
    # and its own pair is appended, with the interval it was given
    last = json.loads(log.path.read_text().splitlines()[-1])
    assert last["model"] == "model" and last["measured_ms"] == 10.5
    assert last["interval_ms"] == section["interval_ms"] and last["inside"] is True
    assert log.pairs(SETUP)[-1] == Pair("model", 10.0, 10.5, 0.2)


def test_with_no_stored_pairs_the_report_says_it_is_not_calibrated(tmp_path: Path) -> None:
    log = PairLog(tmp_path / "none" / "pairs.jsonl")
    report = {"model": "model", "estimate_ms": 4.0, "estimate_se_ms": 0.0, "measured_ms": None}
    section = interval_section(report, log, SETUP)
    coverage = section["coverage"]
    assert not coverage["calibrated"] and coverage["pairs"] == 0 and coverage["share"] is None
    assert "not calibrated" in coverage["note"]
    low, high = section["interval_ms"]
    assert low < 4.0 < high
    # and a report without a measured latency stores no pair
    assert not log.path.exists()
