"""The Mongo store's comparison and history pipelines read a measurement's schema-2 summary fields
(median_ms, p90_ms, p99_ms, ci_low_ms, ci_high_ms, sample_count, valid) where a measurement has them,
and the same figures from latency_ms and validity where it has not (measurements written before
them). On mongomock, through the shared in-process server of the contract suite."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from mlscope.store.mongo import MongoStore
from tests.contract.builders import finish, make_measurement, run_to
from tests.contract.mongomock_store import SharedMongomockClient

SUMMARY = {
    "median_ms": 11.0,
    "p90_ms": 12.0,
    "p99_ms": 13.0,
    "ci_low_ms": 10.5,
    "ci_high_ms": 11.5,
    "sample_count": 99,
    "valid": True,
}


@pytest.fixture
def store() -> Iterator[MongoStore]:
    database = f"mlscope_unit_{uuid.uuid4().hex[:12]}"
    with MongoStore(f"mongodb://127.0.0.1:27017/{database}", client_class=SharedMongomockClient) as opened:
        yield opened
    SharedMongomockClient().drop_database(database)


def finished(store: MongoStore, *, summary: bool) -> str:
    id = run_to(store, "running")
    finish(store, id, measurements=[make_measurement("single_stream", 1, mean=2.0)])
    # Set, or taken away as from a measurement written before schema 2 (whatever the store writes).
    fields = {f"measurements.0.{name}": value for name, value in SUMMARY.items()}
    store._evaluations.update_one({"_id": id}, {"$set": fields} if summary else {"$unset": fields})
    return id


def test_the_summary_fields_are_read_where_present(store: MongoStore) -> None:
    # Given a measurement whose summary fields differ from its latency_ms (to tell which is read)
    id = finished(store, summary=True)

    # When compared and read as history, Then the figures are the summary fields'
    [row] = store.compare()
    assert (row["evaluation_id"], row["median_ms"], row["p90_ms"], row["p99_ms"]) == (id, 11.0, 12.0, 13.0)
    assert (row["ci_low_ms"], row["ci_high_ms"], row["count"], row["valid"]) == (10.5, 11.5, 99, True)
    assert row["reasons"] == ["too few samples"]
    [point] = store.history(model="resnet18", framework="pytorch")
    assert (point["median_ms"], point["ci_low_ms"], point["ci_high_ms"], point["p99_ms"]) == (
        11.0,
        10.5,
        11.5,
        13.0,
    )
    assert point["valid"] is True


def test_latency_ms_and_validity_are_read_where_the_fields_are_absent(store: MongoStore) -> None:
    # Given a measurement stored without summary fields
    id = finished(store, summary=False)
    assert "median_ms" not in store._evaluations.find_one({"_id": id})["measurements"][0]

    # When compared and read as history, Then the figures come from latency_ms and validity
    [row] = store.compare()
    assert (row["median_ms"], row["p90_ms"], row["p99_ms"], row["count"], row["valid"]) == (
        2.0,
        pytest.approx(2.2),
        pytest.approx(2.6),
        5,
        False,
    )
    assert (row["ci_low_ms"], row["ci_high_ms"]) == (pytest.approx(1.9), pytest.approx(2.1))
    [point] = store.history(model="resnet18", framework="pytorch")
    assert (point["median_ms"], point["ci_low_ms"], point["valid"]) == (2.0, pytest.approx(1.9), False)


def test_a_median_ci_that_is_not_a_pair_reads_as_none(store: MongoStore) -> None:
    id = finished(store, summary=False)
    store._evaluations.update_one({"_id": id}, {"$set": {"measurements.0.latency_ms.median_ci": None}})
    [row] = store.compare()
    assert (row["ci_low_ms"], row["ci_high_ms"]) == (None, None)
