"""The Store contract, the result sections: `accuracy` and `parity` stored with a finish and read back
as given (extra keys included), absent when not measured, a bad one refused with nothing stored,
carried by a bulk import, and a "different" parity making the evaluation's comparison rows invalid.
Every implementation in conftest.py must pass every test; each reads Given / When / Then."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.store import Store
from mlscope.store.records import CompareFilter, compare_rows
from tests.contract.builders import (
    COLD_START,
    RESULT_KEYS,
    T0,
    finish,
    make_measurement,
    make_system,
    run_to,
    submit,
)

ACCURACY: dict[str, Any] = {
    "dataset": "digits",
    "dataset_sha256": "d" * 64,
    "count": 360,
    "task": "image_classification",
    "top1": 0.975,
    "top5": 0.997,
    "ci": {"method": "wilson", "level": 0.95, "top1": [0.954, 0.987], "top5": [0.984, 0.999]},
    "limit": None,
    # A key this store does not know: kept as given.
    "per_class": {"0": 1.0, "1": 0.95},
}
PARITY: dict[str, Any] = {
    "against": "pytorch",
    "count": 64,
    "verdict": "same",
    "max_abs": 3.1e-06,
    "mean_abs": 4.0e-07,
    "max_rel": 2.2e-05,
    "cosine": 1.0,
    "top1_agreement": 1.0,
    "tolerance": {"rtol": 1e-3, "atol": 1e-5},
    # Output names MongoDB would refuse as keys unescaped.
    "outputs": {
        "logits.0": {
            "max_abs": 3.1e-06,
            "mean_abs": 4.0e-07,
            "max_rel": 2.2e-05,
            "cosine": 1.0,
            "top1_agreement": 1.0,
            "verdict": "same",
        },
        "$hidden": {
            "max_abs": 1e-06,
            "mean_abs": 1e-07,
            "max_rel": 1e-05,
            "cosine": 0.999999,
            "top1_agreement": None,
            "verdict": "same",
        },
    },
}
DIFFERENT = {**PARITY, "verdict": "different", "max_abs": 0.5, "cosine": 0.91, "top1_agreement": 0.75}


def finish_with(store: Store, id: str, **sections: Any) -> None:
    store.finish_evaluation(
        id,
        system=make_system(),
        framework={"name": "onnxruntime", "version": "1.23.0"},
        cold_start=COLD_START,
        measurements=[make_measurement("offline", 1), make_measurement("offline", 8)],
        finished_at=T0 + timedelta(hours=1),
        **sections,
    )


def test_both_sections_read_back_as_they_were_given(store: Store) -> None:
    # Given a running evaluation
    id = run_to(store, "running")

    # When it finishes with an accuracy and a parity section
    finish_with(store, id, accuracy=ACCURACY, parity=PARITY)

    # Then both read back exactly, extra keys and awkward output names included, alone or listed
    evaluation = store.get_evaluation(id)
    assert set(evaluation) == RESULT_KEYS | {"accuracy", "parity"}
    assert evaluation["accuracy"] == ACCURACY
    assert evaluation["parity"] == PARITY
    [listed] = store.list_evaluations()
    assert (listed["accuracy"], listed["parity"]) == (ACCURACY, PARITY)
    assert [e["parity"] for e in store.iter_evaluations()] == [PARITY]


def test_either_section_may_come_alone(store: Store) -> None:
    # Given two running evaluations, When one finishes with accuracy only and one with parity only
    with_accuracy, with_parity = run_to(store, "running"), run_to(store, "running")
    finish_with(store, with_accuracy, accuracy=ACCURACY)
    finish_with(store, with_parity, parity=PARITY)

    # Then each has its own section and no key at all for the other
    first, second = store.get_evaluation(with_accuracy), store.get_evaluation(with_parity)
    assert first["accuracy"] == ACCURACY and "parity" not in first
    assert second["parity"] == PARITY and "accuracy" not in second


def test_a_result_without_sections_has_no_such_keys(store: Store) -> None:
    # Given an evaluation finished as before wave 2, and ones queued, failed and cancelled
    finished = run_to(store, "succeeded")
    others = [run_to(store, status) for status in ("queued", "failed", "cancelled")]

    # Then none carries an accuracy or parity key: absent, never zero-filled nor null
    for id in (finished, *others):
        assert set(store.get_evaluation(id)) == RESULT_KEYS
    assert all(set(e) == RESULT_KEYS for e in store.list_evaluations())


BAD_ACCURACY = [
    ({**ACCURACY, "top1": 97.5}, "accuracy.top1"),
    ({**ACCURACY, "top5": -0.1}, "accuracy.top5"),
    ({**ACCURACY, "top1": "0.9"}, "accuracy.top1"),
    ({**ACCURACY, "count": 0}, "accuracy.count"),
    ({**ACCURACY, "count": True}, "accuracy.count"),
    ({k: v for k, v in ACCURACY.items() if k != "dataset"}, "accuracy.dataset"),
    ({**ACCURACY, "ci": {**ACCURACY["ci"], "top1": [0.99, 0.95]}}, "accuracy.ci.top1"),
    ({**ACCURACY, "ci": {**ACCURACY["ci"], "top5": [0.9]}}, "accuracy.ci.top5"),
    ({**ACCURACY, "ci": {**ACCURACY["ci"], "level": 1.0}}, "accuracy.ci.level"),
    ({**ACCURACY, "limit": -3}, "accuracy.limit"),
    ({**ACCURACY, "per_class": {"0": {1.0}}}, "accuracy.per_class.0"),
    (["digits", 0.97], "accuracy"),
]
BAD_PARITY = [
    ({**PARITY, "verdict": "similar"}, "parity.verdict"),
    ({k: v for k, v in PARITY.items() if k != "verdict"}, "parity.verdict"),
    ({**PARITY, "against": ""}, "parity.against"),
    ({**PARITY, "count": 0}, "parity.count"),
    ({**PARITY, "max_abs": -1.0}, "parity.max_abs"),
    ({**PARITY, "cosine": 1.5}, "parity.cosine"),
    ({**PARITY, "top1_agreement": 2.0}, "parity.top1_agreement"),
    ({**PARITY, "tolerance": {"rtol": -1e-3, "atol": 0.0}}, "parity.tolerance.rtol"),
    (
        {**PARITY, "outputs": {"logits.0": {**PARITY["outputs"]["logits.0"], "verdict": "same-ish"}}},
        "parity.outputs.logits.0.verdict",
    ),
    ({**PARITY, "outputs": {"logits": {"cosine": "1"}}}, "parity.outputs.logits.cosine"),
    ({**PARITY, "outputs": ["logits"]}, "parity.outputs"),
]


@pytest.mark.parametrize(
    ("sections", "field"),
    [({"accuracy": bad}, field) for bad, field in BAD_ACCURACY]
    + [({"parity": bad}, field) for bad, field in BAD_PARITY],
)
def test_a_bad_section_is_refused_and_nothing_is_stored(
    store: Store, sections: dict[str, Any], field: str
) -> None:
    # Given a running evaluation
    id = run_to(store, "running")

    # When it is finished with one bad field in a section (the other section good)
    good = {"accuracy": ACCURACY, "parity": PARITY}
    with pytest.raises(UserError) as raised:
        finish_with(store, id, **{**good, **sections})

    # Then the error names the field, and nothing was stored: still running, no measurements, no
    # system, no section
    assert raised.value.field == field
    assert field.split(".")[0] in str(raised.value)
    evaluation = store.get_evaluation(id)
    assert evaluation["status"] == "running" and evaluation["measurements"] == []
    assert "accuracy" not in evaluation and "parity" not in evaluation
    assert store.list_systems() == []


def test_parity_figures_may_be_null_where_an_output_held_nan(store: Store) -> None:
    # Given a running evaluation, When its parity's differences could not be computed (NaN outputs)
    id = run_to(store, "running")
    broken = {**DIFFERENT, "max_abs": float("nan"), "mean_abs": None, "cosine": float("inf")}
    finish_with(store, id, parity=broken)

    # Then it is stored, the non-finite figures as null, the verdict kept
    parity = store.get_evaluation(id)["parity"]
    assert (parity["verdict"], parity["max_abs"], parity["mean_abs"], parity["cosine"]) == (
        "different",
        None,
        None,
        None,
    )


def test_a_second_finish_does_not_add_sections(store: Store) -> None:
    # Given an evaluation finished without sections
    id = submit(store)
    store.start_evaluation(id)
    finish(store, id)

    # When a redelivered job finishes it again with sections, Then the first finish stands
    finish_with(store, id, accuracy=ACCURACY, parity=DIFFERENT)
    assert set(store.get_evaluation(id)) == RESULT_KEYS


def test_an_import_carries_the_sections(store: Store) -> None:
    # Given a finished evaluation with both sections, exported as get_evaluation returns it, and one
    # without any
    with_sections, without = run_to(store, "running"), run_to(store, "succeeded")
    finish_with(store, with_sections, accuracy=ACCURACY, parity=DIFFERENT)
    exported = [store.get_evaluation(id, include_raw=True) for id in (with_sections, without)]

    # When they are imported again under new ids
    copies = copy.deepcopy(exported)
    for index, result in enumerate(copies):
        result["id"] = f"imported{index}" + "0" * 24
    assert store.import_evaluations(copies) == 2

    # Then the copies read back with the same sections, and the one without still has none
    first, second = (store.get_evaluation(result["id"]) for result in copies)
    assert (first["accuracy"], first["parity"]) == (ACCURACY, DIFFERENT)
    assert set(second) == RESULT_KEYS
    # ... and the comparison sees the imported parity
    rows = store.compare(ids=[copies[0]["id"]])
    assert rows and all(row["valid"] is False and row["parity"] == "different" for row in rows)


def test_an_import_with_a_bad_section_names_it_by_index(store: Store) -> None:
    # Given an exported result whose accuracy is out of range
    id = run_to(store, "running")
    finish_with(store, id, accuracy=ACCURACY)
    result = {**store.get_evaluation(id, include_raw=True), "id": "other" + "0" * 27}
    result["accuracy"] = {**ACCURACY, "top1": 1.2}

    # When imported, Then it is refused, naming the result and the field, and nothing is stored
    with pytest.raises(UserError) as raised:
        store.import_evaluations([result])
    assert raised.value.field == "results.0.accuracy.top1"
    assert store.count_evaluations() == 1


def _valid_measurements() -> list[dict[str, Any]]:
    measurements = [make_measurement("offline", 1), make_measurement("offline", 8)]
    for m in measurements:
        m["validity"] = {"valid": True, "reasons": []}
    return measurements


def _evaluated(store: Store, framework: str, **sections: Any) -> str:
    id = store.create_evaluation(
        model={"name": "digits_cnn", "version": "1", "manifest_sha256": None},
        manifest={"name": "digits_cnn"},
        framework={"name": framework, "version": None},
        runner="inline",
        device="cpu",
        request={},
        created_at=T0,
    )
    store.start_evaluation(id, started_at=T0)
    store.finish_evaluation(
        id,
        system=make_system(),
        framework={"name": framework, "version": "1.0"},
        cold_start=COLD_START,
        measurements=_valid_measurements(),
        finished_at=T0 + timedelta(minutes=5),
        **sections,
    )
    return id


@pytest.mark.parametrize(
    "filters",
    [{}, {"since": T0 - timedelta(days=1)}, {"models": ["digits_cnn"]}],
    ids=["kept-keys", "counted-keys", "filtered-keys"],
)
def test_a_different_parity_makes_its_comparison_rows_invalid(store: Store, filters: dict[str, Any]) -> None:
    # Given three evaluations with valid measurements: one whose parity against PyTorch differs, one
    # whose parity is the same (with accuracy), and one with no sections at all
    different = _evaluated(store, "onnxruntime", accuracy=ACCURACY, parity=DIFFERENT)
    same = _evaluated(store, "tensorflow", accuracy={**ACCURACY, "top1": 0.5, "top5": None}, parity=PARITY)
    plain = _evaluated(store, "pytorch")

    # When compared (from the kept keys, or counting a time window)
    rows = store.compare(**filters)

    # Then the different one's rows are invalid with the reason named; the others stay valid
    by_id: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_id.setdefault(row["evaluation_id"], []).append(row)
    assert set(by_id) == {different, same, plain}
    for row in by_id[different]:
        assert row["valid"] is False
        assert row["reasons"] == ["parity different from pytorch"]
        assert (row["top1"], row["top5"], row["parity"], row["parity_against"]) == (
            0.975,
            0.997,
            "different",
            "pytorch",
        )
    for row in by_id[same]:
        assert row["valid"] is True and row["reasons"] == []
        assert (row["top1"], row["top5"], row["parity"], row["parity_against"]) == (
            0.5,
            None,
            "same",
            "pytorch",
        )
    for row in by_id[plain]:
        assert row["valid"] is True and row["reasons"] == []
        assert (row["top1"], row["top5"], row["parity"], row["parity_against"]) == (None,) * 4


def test_every_backend_applies_the_parity_rule_as_compare_rows_does(store: Store) -> None:
    # Given evaluations with and without sections
    _evaluated(store, "onnxruntime", accuracy=ACCURACY, parity=DIFFERENT)
    _evaluated(store, "tensorflow", parity=PARITY)
    _evaluated(store, "pytorch")

    # When compared, Then the database's rows are exactly the reference's over the public results
    assert store.compare() == compare_rows(store.list_evaluations(limit=100), CompareFilter())
