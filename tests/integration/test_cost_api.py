"""The resource sections through the HTTP API, on SQLite and the real PostgreSQL: a result's memory,
energy and cost served as stored, the comparison's cost columns in JSON and CSV, rows recorded without
a price priced by `price_per_hour`, and a price that is not a positive number answered 422 naming it.
Given / When / Then in each test's comments."""

from __future__ import annotations

import csv
import io

import pytest
from flask.testing import FlaskClient

from mlscope.store import Store
from tests.contract.builders import COLD_START, make_measurement, make_system
from tests.contract.test_store_resources import ENERGY, MEMORY, PRICE, priced
from tests.integration.test_api_reads import assert_problem, evaluate, store

__all__ = ["store"]  # the fixture this module borrows (app and http are the suite's)


def test_the_sections_and_the_cost_columns_are_served(http: FlaskClient, store: Store) -> None:
    # Given a result with memory, energy and a price, and one recorded without a price
    id = evaluate(store, 1, status="queued")
    store.finish_evaluation(
        id,
        system=make_system(1, instance_type="c7i.large"),
        framework={"name": "pytorch", "version": "2.3.0"},
        cold_start=COLD_START,
        measurements=[priced("single_stream", 1, energy=ENERGY)],
        memory=MEMORY,
    )
    plain = evaluate(store, 2, system=2, measurements=[make_measurement("single_stream", 1)])

    # When the result and the comparison are read
    one = http.get(f"/api/v1/evaluations/{id}").get_json()
    compared = http.get("/api/v1/compare").get_json()

    # Then the sections come as stored
    assert one["memory"] == MEMORY
    assert one["measurements"][0]["energy"] == ENERGY
    assert one["measurements"][0]["cost"]["price_per_hour"] == PRICE
    # ... the priced row has its cost, the other blanks, in JSON and CSV
    rows = {row["evaluation_id"]: row for row in compared["rows"]}
    assert rows[id]["cost_per_1k"] == pytest.approx(PRICE / 3.6 / rows[id]["throughput"])
    assert rows[id]["instance_type"] == "c7i.large" and rows[plain]["cost_per_1k"] is None
    lines = list(csv.DictReader(io.StringIO(http.get("/api/v1/compare?format=csv").get_data(as_text=True))))
    assert {line["evaluation_id"]: line["cost_per_1k"] == "" for line in lines} == {id: False, plain: True}
    # ... and the OpenAPI document spells the sections out
    properties = http.get("/api/openapi.json").get_json()["components"]["schemas"]["Evaluation"]["properties"]
    assert properties["memory"]["required"] == ["peak_rss_mb"]


def test_rows_without_a_price_are_priced_at_read_time(http: FlaskClient, store: Store) -> None:
    # Given two systems' results recorded without a price
    first = evaluate(store, 1, system=1, measurements=[make_measurement("single_stream", 1)])
    second = evaluate(store, 2, system=2, measurements=[make_measurement("single_stream", 1)])

    # When compared with a price for one host and one for every other
    compared = http.get("/api/v1/compare?price_per_hour=host-2=3.0,1.5").get_json()

    # Then each row is priced at its own
    rows = {row["evaluation_id"]: row for row in compared["rows"]}
    assert (rows[first]["price_per_hour"], rows[second]["price_per_hour"]) == (1.5, 3.0)
    assert rows[first]["cost_ci_low"] <= rows[first]["cost_per_1k"] <= rows[first]["cost_ci_high"]


@pytest.mark.parametrize("query", ["price_per_hour=-1", "price_per_hour=cheap", "price_per_hour=box=0"])
def test_a_bad_price_is_a_422_naming_it(http: FlaskClient, query: str) -> None:
    # The list's first item is the one named (as for every list field: batch_sizes.1, targets.0)
    problem = assert_problem(http.get(f"/api/v1/compare?{query}"), 422, "price_per_hour.0")
    assert f"{query.split('=', 1)[1]} is not a price" in problem["errors"]["price_per_hour.0"][0]
