"""Accuracy counting with its interval, and the output comparison behind a parity verdict."""

from __future__ import annotations

import numpy as np
import pytest

from mlscope.contract.errors import UserError
from mlscope.runtime.measure.accuracy import AccuracyCounter, wilson_interval
from mlscope.runtime.measure.parity import compare_outputs, decode_outputs, encode_outputs, tolerance_for


def _scores(labels: list[int], classes: int = 10, hit: bool = True) -> np.ndarray:
    scores = np.zeros((len(labels), classes), dtype=np.float32)
    for row, label in enumerate(labels):
        scores[row, label if hit else (label + 1) % classes] = 1.0
    return scores


def test_top1_and_top5_count_hits_and_ignore_unlabelled_samples() -> None:
    # Given a batch where the label ranks first, one where it ranks third, and an unlabelled sample
    counter = AccuracyCounter("logits", classes=10)
    counter.add(_scores([1, 2, 3]), np.array([1, 2, 3]))
    third = np.tile(np.arange(10, dtype=np.float32)[::-1], (1, 1))  # class 0 best, 2 third
    counter.add(third, np.array([2]))
    counter.add(_scores([4]), np.array([-1]))
    # When the section is made
    section = counter.to_dict(
        {"name": "digits", "sha256": "ab", "limit": None, "task": "image_classification"}
    )
    # Then top-1 counts 3 of 4, top-5 all 4, the unlabelled sample not at all
    assert section["count"] == 4
    assert section["top1"] == 0.75 and section["top5"] == 1.0
    low, high = section["ci"]["top1"]
    assert low < 0.75 < high and section["ci"]["method"] == "wilson"


def test_wilson_interval_matches_the_closed_form_and_stays_in_bounds() -> None:
    # 50 of 100: the textbook interval is about [0.404, 0.596]
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(0.4038, abs=1e-3) and high == pytest.approx(0.5962, abs=1e-3)
    # All hits: the interval reaches 1 but does not collapse to a point
    low, high = wilson_interval(20, 20)
    assert high == 1.0 and 0.8 < low < 0.9
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_a_label_beyond_the_models_classes_is_refused_naming_both() -> None:
    counter = AccuracyCounter("logits", classes=0)
    with pytest.raises(UserError, match=r"labelled 12 .* only 10 classes"):
        counter.add(_scores([1]), np.array([12]))
    with pytest.raises(UserError, match=r"dataset has 1000 classes but output 'logits' scores only 10"):
        AccuracyCounter("logits", classes=1000).add(_scores([1]), np.array([1]))


def test_an_output_that_is_not_a_score_vector_is_refused() -> None:
    with pytest.raises(UserError, match=r"shape \(2, 3, 4\)"):
        AccuracyCounter("hidden").add(np.zeros((2, 3, 4)), np.array([0, 1]))


def test_parity_passes_float32_rounding_and_fails_a_changed_weight() -> None:
    rng = np.random.default_rng(0)
    reference = {"logits": rng.standard_normal((16, 100)).astype(np.float32) * 5}
    # Float32 rounding of a different summation order: ~1e-6 relative
    rounded = {"logits": reference["logits"] * np.float32(1 + 2e-7) + np.float32(1e-6)}
    same = compare_outputs(reference, rounded, against="pytorch")
    assert same["verdict"] == "same" and same["top1_agreement"] == 1.0 and same["cosine"] > 0.999999
    # One weight changed in the converted model: one class's logit moves by 0.5
    changed = {"logits": reference["logits"].copy()}
    changed["logits"][:, 7] += 0.5
    different = compare_outputs(reference, changed, against="pytorch")
    assert different["verdict"] == "different"
    assert different["max_abs"] == pytest.approx(0.5, rel=1e-5)
    assert different["outputs"]["logits"]["verdict"] == "different"


def test_parity_tolerance_is_chosen_by_dtype_and_can_be_given() -> None:
    assert tolerance_for(np.dtype("float16"))[0] > tolerance_for(np.dtype("float32"))[0]
    assert tolerance_for(np.dtype("int64")) == (0.0, 0.0)
    reference = {"y": np.ones((4, 3), dtype=np.float32)}
    candidate = {"y": np.full((4, 3), 1.005, dtype=np.float32)}
    assert compare_outputs(reference, candidate, against="a")["verdict"] == "different"
    assert compare_outputs(reference, candidate, against="a", rtol=0.01)["verdict"] == "same"


def test_integer_outputs_must_match_exactly_and_every_output_counts() -> None:
    reference = {"ids": np.array([[1, 2], [3, 4]]), "score": np.ones((2, 5), np.float32)}
    candidate = {"ids": np.array([[1, 2], [3, 5]]), "score": np.ones((2, 5), np.float32)}
    report = compare_outputs(reference, candidate, against="a")
    assert report["verdict"] == "different"
    assert (
        report["outputs"]["score"]["verdict"] == "same" and report["outputs"]["ids"]["verdict"] == "different"
    )


def test_shape_mismatch_and_no_common_output_are_user_errors() -> None:
    with pytest.raises(UserError, match=r"shape \(2, 4\) against the reference's \(2, 3\)"):
        compare_outputs({"y": np.zeros((2, 3))}, {"y": np.zeros((2, 4))}, against="a")
    with pytest.raises(UserError, match="no output in common"):
        compare_outputs({"y": np.zeros((2, 3))}, {"z": np.zeros((2, 3))}, against="a")


def test_outputs_survive_the_json_encoding_bit_for_bit() -> None:
    arrays = {"a": np.arange(12, dtype=np.float32).reshape(3, 4) / 7, "b": np.array([[True, False]])}
    decoded = decode_outputs(encode_outputs(arrays))
    for name, array in arrays.items():
        assert decoded[name].dtype == array.dtype and np.array_equal(decoded[name], array)


def test_top1_agreement_is_reported_only_for_class_scores() -> None:
    outputs = {"embedding": np.eye(4, 8, dtype=np.float32), "logits": np.eye(4, 8, dtype=np.float32)}
    report = compare_outputs(outputs, outputs, against="a", scores=frozenset({"logits"}))
    assert report["outputs"]["embedding"]["top1_agreement"] is None
    assert report["outputs"]["logits"]["top1_agreement"] == 1.0 and report["top1_agreement"] == 1.0
