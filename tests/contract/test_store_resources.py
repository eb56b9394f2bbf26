"""The Store contract, the resource sections (docs/cost.md): an evaluation's `memory` and each
measurement's `energy` and `cost` stored with a finish and read back as given, absent when not
measured, a bad one refused naming its field with nothing stored, carried by a bulk import, and the
cost (with the system's instance type) shown in comparison rows exactly as compare_rows shows it.
Every implementation in conftest.py must pass every test; each reads Given / When / Then."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from mlscope.contract.cost import cost_section
from mlscope.contract.errors import UserError
from mlscope.store import Store
from mlscope.store.records import CompareFilter, compare_rows
from tests.contract.builders import COLD_START, RESULT_KEYS, T0, make_measurement, make_system, run_to

PRICE = 0.68
MEMORY: dict[str, Any] = {"peak_rss_mb": 412.3, "peak_device_mb": None, "rss_scope": "evaluation"}
ENERGY: dict[str, Any] = {"joules_per_inference": 0.0123, "joules": 12.3, "samples": 1000, "source": "rapl"}
UNAVAILABLE: dict[str, Any] = {"unavailable": "/sys/class/powercap does not exist on this machine"}


def priced(scenario: str, batch_size: int, **extra: Any) -> dict[str, Any]:
    """A measurement as the pipeline stores it with a price: its cost section from the formula."""
    measurement = make_measurement(scenario, batch_size)
    cost = cost_section(measurement, PRICE)
    assert cost is not None
    return {**measurement, "cost": cost, **extra}


def finish_with(store: Store, id: str, measurements: list[dict[str, Any]], **sections: Any) -> None:
    store.finish_evaluation(
        id,
        system=make_system(instance_type="c7i.xlarge"),
        framework={"name": "onnxruntime", "version": "1.23.0"},
        cold_start=COLD_START,
        measurements=measurements,
        finished_at=T0 + timedelta(hours=1),
        **sections,
    )


def test_the_sections_read_back_as_they_were_given(store: Store) -> None:
    # Given a running evaluation
    id = run_to(store, "running")

    # When it finishes with its memory, one point's energy measured and another's unavailable, both priced
    measurements = [priced("offline", 1, energy=ENERGY), priced("offline", 8, energy=UNAVAILABLE)]
    finish_with(store, id, measurements, memory=MEMORY)

    # Then every section reads back exactly, alone, listed and iterated
    evaluation = store.get_evaluation(id)
    assert set(evaluation) == RESULT_KEYS | {"memory"}
    assert evaluation["memory"] == MEMORY
    by_size = {m["batch_size"]: m for m in evaluation["measurements"]}
    assert (by_size[1]["energy"], by_size[8]["energy"]) == (ENERGY, UNAVAILABLE)
    assert by_size[1]["cost"] == measurements[0]["cost"]
    [listed] = store.list_evaluations()
    assert listed["memory"] == MEMORY
    assert [e["memory"] for e in store.iter_evaluations()] == [MEMORY]


def test_a_result_without_them_has_no_such_keys(store: Store) -> None:
    # Given an evaluation finished with neither memory nor energy nor a price
    id = run_to(store, "succeeded")

    # Then it has no memory key, and its measurements no energy or cost key: absent, not zero-filled
    evaluation = store.get_evaluation(id)
    assert set(evaluation) == RESULT_KEYS
    assert all("energy" not in m and "cost" not in m for m in evaluation["measurements"])


BAD = [
    ({"memory": {**MEMORY, "peak_rss_mb": -1.0}}, "memory.peak_rss_mb"),
    ({"memory": {"peak_device_mb": 10.0}}, "memory.peak_rss_mb"),
    ({"memory": {**MEMORY, "peak_device_mb": "1 GiB"}}, "memory.peak_device_mb"),
    ({"energy": {"joules_per_inference": 0.1}}, "measurements[0].energy.source"),
    ({"energy": {"source": "rapl"}}, "measurements[0].energy.joules_per_inference"),
    ({"energy": {**ENERGY, "joules_per_inference": -0.1}}, "measurements[0].energy.joules_per_inference"),
    ({"energy": {"unavailable": ""}}, "measurements[0].energy.unavailable"),
    ({"cost": {"per_1k_inferences": 0.1}}, "measurements[0].cost.price_per_hour"),
    ({"cost": {"per_1k_inferences": 0.1, "price_per_hour": 1, "ci": [0.2, 0.1]}}, "measurements[0].cost.ci"),
    ({"cost": {"per_1k_inferences": "0.1", "price_per_hour": 1}}, "measurements[0].cost.per_1k_inferences"),
]


@pytest.mark.parametrize(("bad", "field"), BAD, ids=[field for _, field in BAD])
def test_a_bad_section_is_refused_and_nothing_is_stored(
    store: Store, bad: dict[str, Any], field: str
) -> None:
    # Given a running evaluation
    id = run_to(store, "running")

    # When it is finished with one bad field in a section
    memory = bad.get("memory", MEMORY)
    measurement = {**make_measurement("offline", 1), **{k: v for k, v in bad.items() if k != "memory"}}
    with pytest.raises(UserError) as raised:
        finish_with(store, id, [measurement], memory=memory)

    # Then the error names the field, and nothing was stored
    assert raised.value.field == field
    evaluation = store.get_evaluation(id)
    assert evaluation["status"] == "running" and evaluation["measurements"] == []
    assert "memory" not in evaluation and store.list_systems() == []


def test_an_import_carries_the_sections(store: Store) -> None:
    # Given a finished evaluation with every resource section, exported as get_evaluation returns it
    id = run_to(store, "running")
    finish_with(store, id, [priced("offline", 1, energy=ENERGY)], memory=MEMORY)
    exported = copy.deepcopy(store.get_evaluation(id, include_raw=True))

    # When imported again under a new id
    exported["id"] = "imported" + "0" * 24
    assert store.import_evaluations([exported]) == 1

    # Then the copy reads back with the same sections
    copied = store.get_evaluation(exported["id"])
    assert copied["memory"] == MEMORY
    assert copied["measurements"][0]["energy"] == ENERGY
    assert copied["measurements"][0]["cost"]["price_per_hour"] == PRICE


def test_comparison_rows_carry_the_cost_and_instance_type(store: Store) -> None:
    # Given one priced evaluation and one recorded without a price
    with_price, without = run_to(store, "running"), run_to(store, "running")
    finish_with(store, with_price, [priced("offline", 1), priced("single_stream", 1)])
    finish_with(store, without, [make_measurement("offline", 8)])

    # When compared
    rows = store.compare()

    # Then a priced row shows the price, the cost and its interval; the other blanks, not zeros
    by_key = {(row["evaluation_id"], row["scenario"]): row for row in rows}
    row = by_key[(with_price, "single_stream")]
    cost = priced("single_stream", 1)["cost"]
    assert (row["price_per_hour"], row["cost_per_1k"]) == (PRICE, pytest.approx(cost["per_1k_inferences"]))
    assert [row["cost_ci_low"], row["cost_ci_high"]] == pytest.approx(cost["ci"])
    assert row["cost_ci_low"] <= row["cost_per_1k"] <= row["cost_ci_high"]
    assert row["instance_type"] == "c7i.xlarge"
    plain = by_key[(without, "offline")]
    assert (plain["price_per_hour"], plain["cost_per_1k"], plain["cost_ci_low"]) == (None, None, None)

    # ... exactly as the reference over the public results
    assert rows == compare_rows(store.list_evaluations(limit=100), CompareFilter())
