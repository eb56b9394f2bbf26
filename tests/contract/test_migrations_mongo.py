"""Schema versions of the Mongo store: a version-1 document set (mlscope 0.1.0's shape: no
`mlscope_meta`, measurements without summary fields) is refused until `upgrade()` backfills it; a newer
version and another application's collections are refused with nothing changed.

All of it runs on mongomock (no MongoDB server can run here), through the shared in-process server the
contract suite's "mongomock" parameter uses."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.system_ids import system_ids
from mlscope.contract.workload import workload_key
from mlscope.store import records
from mlscope.store.mongo import MongoStore
from mlscope.store.mongo.codec import decode
from mlscope.store.mongo.schema import META, SCHEMA_VERSION
from tests.contract.builders import COLD_START, finish, make_measurement, make_system, run_to
from tests.contract.mongomock_store import SharedMongomockClient

# The fields version 2 adds to a measurement sub-document.
V2_FIELDS = (*records.summary_columns({}, {}), "raw_codec")


@pytest.fixture
def url() -> Iterator[str]:
    """A mongodb:// URL of a fresh database on the shared mongomock server."""
    database = f"mlscope_migrations_{uuid.uuid4().hex[:12]}"
    yield f"mongodb://scope:s3cret@127.0.0.1:27017/{database}"
    SharedMongomockClient().drop_database(database)


def database(url: str) -> Any:
    return SharedMongomockClient()[url.rsplit("/", 1)[1]]


def open_mongo(url: str, *, check_schema: bool = True) -> MongoStore:
    return MongoStore(url, client_class=SharedMongomockClient, check_schema=check_schema)


def snapshot(url: str) -> dict[str, list[Any]]:
    db = database(url)
    return {name: list(db[name].find().sort("_id", 1)) for name in sorted(db.list_collection_names())}


@pytest.fixture
def version_1(url: str) -> dict[str, dict[str, Any]]:
    """A store in version 1's shape: evaluations written, then the meta document and every field
    version 2 added taken away, as mlscope 0.1.0 left them. Returns the evaluations as they read."""
    with open_mongo(url) as store:
        with_raw = run_to(store, "succeeded")
        without_raw = run_to(store, "running")
        no_raw = make_measurement("offline", 8)
        del no_raw["latencies_ns"]
        finish(store, without_raw, measurements=[no_raw, make_measurement("server", 2, mean=3.0)])
        run_to(store, "failed")
        run_to(store, "queued")
        read = {id: store.get_evaluation(id, include_raw=True) for id in (with_raw, without_raw)}
    db = database(url)
    db.drop_collection(META)
    for document in db["evaluations"].find({"measurements.0": {"$exists": True}}):
        old = [{k: v for k, v in m.items() if k not in V2_FIELDS} for m in document["measurements"]]
        db["evaluations"].update_one({"_id": document["_id"]}, {"$set": {"measurements": old}})
    return read


def test_a_version_1_store_is_refused_then_upgraded_with_the_summary_fields(
    url: str, version_1: dict[str, dict[str, Any]]
) -> None:
    # Given a store in version 1's shape
    before = snapshot(url)
    # When it is opened
    with pytest.raises(UserError) as refused:
        open_mongo(url)
    # Then it is refused, saying what to run, with the password masked, and nothing changed
    message = str(refused.value)
    assert "has schema 1 (written by mlscope 0.1.0, which kept no schema version)" in message
    assert f"this mlscope needs schema {SCHEMA_VERSION}: run `mlscope store upgrade`" in message
    assert "s3cret" not in message and refused.value.field == "store_url"
    assert snapshot(url) == before

    # When it is upgraded
    with open_mongo(url, check_schema=False) as store:
        assert store.schema_status()["upgrade_needed"] is True
        done = store.upgrade()
    # Then every measurement was backfilled, and the meta document says the current version
    assert (done["from"], done["to"], done["steps"], done["backfilled"]) == ("1", "4", ["2", "3", "4"], 3)
    assert database(url)[META].find_one({"_id": "schema"})["version"] == SCHEMA_VERSION
    for document in database(url)["evaluations"].find({"measurements.0": {"$exists": True}}):
        for m in document["measurements"]:
            expected = records.summary_columns(decode(m["latency_ms"]), decode(m["validity"]))
            assert {name: m[name] for name in expected} == expected
            assert m["raw_codec"] == (None if m["raw_count"] is None else "int64le")
            stored = {k: decode(v) for k, v in document.items() if k in ("request", "manifest")}
            view = records.workload_view(document["model_name"], document["model_version"], **stored)
            assert m["workload_key"] == workload_key(view, m["scenario"])
            assert m["display_name"] == document["model_name"]
    # and it opens, reading exactly as before
    with open_mongo(url) as store:
        assert {id: store.get_evaluation(id, include_raw=True) for id in version_1} == version_1
        assert store.count_evaluations() == 4
        again = store.upgrade()
    assert (again["upgraded"], again["backfilled"]) == (False, 0)


def test_a_fresh_store_is_created_at_the_current_version_and_writes_the_summary(url: str) -> None:
    with open_mongo(url, check_schema=False) as store:
        assert store.schema_status()["state"] == "empty"
    with open_mongo(url) as store:
        assert store.schema_status()["state"] == "current"
        id = run_to(store, "succeeded")
    [m] = database(url)["evaluations"].find_one({"_id": id})["measurements"]
    expected = records.summary_columns(make_measurement()["latency_ms"], make_measurement()["validity"])
    assert {name: m[name] for name in expected} == expected
    assert (m["raw_codec"], m["raw_count"]) == ("int64le", 5)


def test_a_store_of_a_newer_mlscope_is_refused(url: str) -> None:
    open_mongo(url).close()
    database(url)[META].update_one({"_id": "schema"}, {"$set": {"version": SCHEMA_VERSION + 1}})
    before = snapshot(url)
    with pytest.raises(UserError, match=f"has schema {SCHEMA_VERSION + 1}, written by a newer mlscope"):
        open_mongo(url)
    with open_mongo(url, check_schema=False) as store, pytest.raises(UserError, match="upgrade mlscope"):
        store.upgrade()
    assert snapshot(url) == before


def test_another_applications_database_is_refused_and_left_alone(url: str) -> None:
    database(url)["invoices"].insert_one({"_id": 1, "total": 12})
    before = snapshot(url)
    with pytest.raises(UserError) as refused:
        open_mongo(url)
    assert "holds collections of another application (invoices): point MLSCOPE_STORE_URL" in str(
        refused.value
    )
    assert snapshot(url) == before


def test_evaluations_stored_before_leases_read_with_no_queue_no_attempt_and_no_lease(url: str) -> None:
    # Given evaluations an older mlscope wrote (no queue, attempts or lease fields), in a database
    # without the lease index
    with open_mongo(url) as store:
        queued = run_to(store, "queued")
        running = run_to(store, "running")
    evaluations = database(url)["evaluations"]
    gone = {"queue": "", "attempts": "", "lease_owner": "", "lease_expires_at": ""}
    evaluations.update_many({}, {"$unset": gone})
    evaluations.drop_index("status_1_lease_expires_at_1")
    # When the store is opened (the version is unchanged: the fields are optional)
    with open_mongo(url) as store:
        # Then the index is made, and the evaluations read with no queue and no attempt
        assert [("status", 1), ("lease_expires_at", 1)] in [
            index["key"] for index in evaluations.index_information().values()
        ]
        for id in (queued, running):
            assert (store.get_evaluation(id)["queue"], store.get_evaluation(id)["attempts"]) == (None, 0)
        # the running one holds no lease, so it is never taken for a dead runner's
        assert store.expired_leases(now=datetime.now(timezone.utc) + timedelta(days=1)) == []
        # and attempts count on from there
        assert store.start_evaluation(queued, lease_owner="worker-a", lease_s=10) == 1
        assert store.start_evaluation(running) == 1


def test_a_version_2_store_is_upgraded_to_one_comparison_row_per_workload(url: str) -> None:
    # Given a version-2 store (measurements without workload fields) holding two runs of one model
    # name with one `--config` and one with another, which version 2 compared as one row
    with open_mongo(url) as store:
        ids = [
            run_to(store, "succeeded", request={"model_options": {"config": {"n_layer": layers}}})
            for layers in (2, 2, 4)
        ]
        expected = store.compare()
    db = database(url)
    db[META].update_one({"_id": "schema"}, {"$set": {"version": 2}})
    for document in db["evaluations"].find({"_id": {"$in": ids}}):
        old = [
            {k: v for k, v in m.items() if k not in ("workload_key", "display_name")}
            for m in document["measurements"]
        ]
        db["evaluations"].update_one({"_id": document["_id"]}, {"$set": {"measurements": old}})
    with pytest.raises(UserError, match="has schema 2"):
        open_mongo(url)

    # When it is upgraded
    with open_mongo(url, check_schema=False) as store:
        done = store.upgrade()
    assert (done["from"], done["to"], done["steps"]) == ("2", "4", ["3", "4"])

    # Then its comparison has a row per workload, as the store wrote it fresh
    with open_mongo(url) as store:
        rows = store.compare()
    assert rows == expected
    assert sorted((r["display_name"], r["runs"]) for r in rows) == [
        ("resnet18[n_layer=2]", 2),
        ("resnet18[n_layer=4]", 1),
    ]


def test_a_version_3_store_is_upgraded_with_machine_and_stack_ids(url: str) -> None:
    # Given a version-3 store (evaluations without machine and stack ids): a succeeded run, one in an
    # image, and one still running
    image = {"name": "mlscope/pytorch", "id": "sha256:" + "1" * 64, "digest": "sha256:" + "2" * 64}
    with open_mongo(url) as store:
        plain = run_to(store, "succeeded")
        in_image = run_to(store, "running")
        store.finish_evaluation(
            in_image,
            system=make_system(),
            framework={"name": "pytorch", "version": "2.3.0", "image": image},
            cold_start=COLD_START,
            measurements=[make_measurement()],
        )
        running = run_to(store, "running")
        series = store.history_series()
    db = database(url)
    written = {d["_id"]: (d.get("machine_id"), d.get("stack_id")) for d in db["evaluations"].find()}
    db[META].update_one({"_id": "schema"}, {"$set": {"version": 3}})
    db["evaluations"].update_many({}, {"$unset": {"machine_id": "", "stack_id": ""}})

    # When it is upgraded
    with open_mongo(url, check_schema=False) as store:
        done = store.upgrade()

    # Then every evaluation with a system has the ids this mlscope writes, and the series are the same
    assert (done["from"], done["to"], done["steps"]) == ("3", "4", ["4"])
    assert {d["_id"]: (d.get("machine_id"), d.get("stack_id")) for d in db["evaluations"].find()} == written
    assert written[plain] == system_ids(make_system())
    assert written[in_image] == system_ids(make_system(), {"image": image}) != written[plain]
    assert written[running] == (None, None)
    with open_mongo(url) as store:
        assert store.history_series() == series
