"""What the Mongo store promises beyond the contract suite: raw latencies in bounded chunks, the losing
finisher of a race leaving nothing behind, several stores in one process, the indexes, and stored keys
MongoDB would refuse. All of it runs on mongomock (no MongoDB server can run here), through the same
shared in-process server the contract suite's "mongomock" parameter uses."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import bson
import pytest

from mlscope.store.mongo import MongoStore
from mlscope.store.mongo import store as mongo
from mlscope.store.records import RAW_CODEC, unpack_latencies
from tests.contract.builders import COLD_START, finish, make_measurement, make_system, run_to
from tests.contract.mongomock_store import SharedMongomockClient


@pytest.fixture
def url() -> Iterator[str]:
    """A mongodb:// URL of a fresh database on the shared mongomock server."""
    database = f"mlscope_unit_{uuid.uuid4().hex[:12]}"
    yield f"mongodb://127.0.0.1:27017/{database}"
    SharedMongomockClient().drop_database(database)


@pytest.fixture
def store(url: str) -> Iterator[MongoStore]:
    with MongoStore(url, client_class=SharedMongomockClient) as opened:
        yield opened


def chunks_of(store: MongoStore, id: str) -> list[dict[str, Any]]:
    return list(store._chunks.find({"evaluation": id}).sort([("finish", 1), ("seq", 1)]))


def test_raw_latencies_are_stored_in_bounded_chunks_outside_the_evaluation(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given chunks of 1000 samples, and measurements of 2500, zero and no raw latencies
    monkeypatch.setattr(mongo, "RAW_CHUNK_SAMPLES", 1000)
    latencies = list(range(2**40, 2**40 + 2500))
    id = run_to(store, "running")
    no_raw = {**make_measurement("server", 1)}
    del no_raw["latencies_ns"]
    finish(
        store,
        id,
        measurements=[
            {**make_measurement("offline", 8), "latencies_ns": latencies},
            {**make_measurement("offline", 1), "latencies_ns": []},
            no_raw,
        ],
    )

    # When it is stored
    chunks = chunks_of(store, id)
    document = store._evaluations.find_one({"_id": id})

    # Then the 2500 samples are three chunks of at most 1000 int64s, none in the evaluation document
    assert [(c["scenario"], c["batch_size"], c["seq"], c["count"]) for c in chunks] == [
        ("offline", 8, 0, 1000),
        ("offline", 8, 1, 1000),
        ("offline", 8, 2, 500),
    ]
    # (each packed with its codec: byte-shuffled and compressed, under 8 bytes a sample)
    assert all(
        c["codec"] == RAW_CODEC and len(unpack_latencies(c["data"], c["codec"])) == c["count"] for c in chunks
    )
    assert all(len(c["data"]) < 8 * c["count"] for c in chunks)
    assert [m["raw_count"] for m in document["measurements"]] == [2500, 0, None]
    assert "latencies_ns" not in str(document)
    # and they come back exactly, an empty list as empty and none as none
    raw = {
        (m["scenario"], m["batch_size"]): m["latencies_ns"]
        for m in store.get_evaluation(id, include_raw=True)["measurements"]
    }
    assert raw == {("offline", 8): latencies, ("offline", 1): [], ("server", 1): None}


def test_a_chunk_stays_far_below_the_document_limit() -> None:
    chunk = {"data": bson.Binary(b"\0" * 8 * mongo.RAW_CHUNK_SAMPLES), "evaluation": "e" * 64}
    assert len(bson.encode(chunk)) <= 16 * 2**20 // 2


def test_the_losing_finisher_leaves_no_latencies_behind(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given two workers with their own stores on one database, both holding the same running job
    with (
        MongoStore(url, client_class=SharedMongomockClient) as first,
        MongoStore(url, client_class=SharedMongomockClient) as second,
    ):
        id = run_to(first, "running")
        written = MongoStore._write_raw

        # When the second has written its raw latencies and the first finishes before it can commit
        def write_then_lose(self: MongoStore, *args: Any) -> None:
            written(self, *args)
            monkeypatch.setattr(MongoStore, "_write_raw", written)
            finish(first, id, system=make_system(1), measurements=[make_measurement("offline", 1, mean=1.0)])

        monkeypatch.setattr(MongoStore, "_write_raw", write_then_lose)
        finish(second, id, system=make_system(2), measurements=[make_measurement("offline", 8, mean=9.0)])

        # Then the evaluation holds the first finisher's results only, and only its chunks remain
        evaluation = first.get_evaluation(id, include_raw=True)
        assert [(m["batch_size"], m["latency_ms"]["mean"]) for m in evaluation["measurements"]] == [(1, 1.0)]
        assert evaluation["system"]["id"] == "sys-1"
        tokens = {c["finish"] for c in chunks_of(first, id)}
        assert tokens == {first._evaluations.find_one({"_id": id})["raw_token"]}
        assert [c["batch_size"] for c in chunks_of(first, id)] == [1]


def test_latencies_of_a_finish_that_never_committed_are_never_read(store: MongoStore) -> None:
    # Given a finished evaluation, and chunks a crashed finisher wrote under a token of its own
    id = run_to(store, "succeeded")
    before = store.get_evaluation(id, include_raw=True)
    store._chunks.insert_one(
        {"evaluation": id, "finish": "crashed", "scenario": "single_stream", "batch_size": 1, "seq": 0}
        | {"count": 1, "data": bson.Binary(b"\1" * 8)}
    )
    # When it is read, Then the orphan is invisible
    assert store.get_evaluation(id, include_raw=True) == before


def test_stores_on_different_databases_coexist_in_one_process(url: str) -> None:
    # Given two stores open at once on two databases
    other_url = url + "_other"
    try:
        with MongoStore(url, client_class=SharedMongomockClient) as first:
            second = MongoStore(other_url, client_class=SharedMongomockClient)
            assert first._alias != second._alias
            a, b = run_to(first, "queued"), run_to(second, "running")

            # Then each sees only its own evaluations
            assert [e["id"] for e in first.list_evaluations()] == [a]
            assert [e["id"] for e in second.list_evaluations()] == [b]
            # and closing one leaves the other working
            second.close()
            second.close()
            assert first.get_evaluation(a)["status"] == "queued"
    finally:
        SharedMongomockClient().drop_database(other_url.rsplit("/", 1)[1])


def test_the_database_defaults_to_mlscope() -> None:
    with MongoStore("mongodb://127.0.0.1:27017", client_class=SharedMongomockClient) as store:
        assert store._db.name == "mlscope"


def test_the_queries_have_their_indexes(store: MongoStore) -> None:
    def keys(collection: Any) -> set[tuple[tuple[str, int], ...]]:
        return {
            tuple((k, int(d)) for k, d in index["key"]) for index in collection.index_information().values()
        }

    evaluations = keys(store._evaluations)
    for field in ("status", "model_name", "framework_name", "system_id"):
        assert ((field, 1), ("created_at", -1)) in evaluations
    assert (("created_at", -1), ("_id", 1)) in evaluations
    spans = keys(store._spans)
    assert (("evaluation", 1), ("start_ns", 1), ("span_id", 1)) in spans
    assert (("trace_id", 1),) in spans
    assert (("evaluation", 1), ("finish", 1), ("scenario", 1), ("batch_size", 1), ("seq", 1)) in keys(
        store._chunks
    )


def test_keys_mongodb_refuses_round_trip_everywhere(store: MongoStore) -> None:
    # Given a submit and a system whose JSON holds keys with dots, a leading $, % and NUL
    odd = {"torch.version": "2.3", "$set": {"a.b": 1}, "50%": "%2E", "nul\0": [{"x.y": None}]}
    id = store.create_evaluation(
        model={"name": "m"},
        manifest={"inputs": odd},
        framework={"name": "pytorch", "version": None},
        runner="inline",
        device="cpu",
        request=odd,
    )
    store.start_evaluation(id)
    store.finish_evaluation(
        id,
        system=make_system(1, software=odd),
        framework={"name": "pytorch", "version": "2.3.0", "build.flags": odd},
        cold_start=COLD_START,
        measurements=[{**make_measurement(), "settings": odd}],
    )

    # When it is read back, Then every key is exactly as given, while MongoDB holds escaped ones
    evaluation = store.get_evaluation(id)
    assert evaluation["request"] == odd and evaluation["manifest"] == {"inputs": odd}
    assert evaluation["framework"]["build.flags"] == odd
    assert evaluation["system"]["software"] == odd
    assert evaluation["measurements"][0]["settings"] == odd
    assert set(store._evaluations.find_one({"_id": id})["request"]) == {
        "torch%2Eversion",
        "%24set",
        "50%25",
        "nul%00",
    }


def test_only_keys_are_escaped_never_values(store: MongoStore) -> None:
    # Given spans whose names and layer types look like escaped keys
    id = run_to(store, "succeeded")
    spans = [
        {"trace_id": "1" * 32, "span_id": f"{n:016x}", "name": "op%2E$1", "level": "FRAMEWORK"}
        | {"start_ns": n, "end_ns": n + 1, "attributes": {"layer_type": "%24Conv", "a.b": "%25"}}
        for n in (1, 2)
    ]
    store.save_spans(id, spans)

    # When read and broken down, Then every value is as given
    assert [s["name"] for s in store.get_spans(id)] == ["op%2E$1", "op%2E$1"]
    assert store.get_spans(id)[0]["attributes"] == {"layer_type": "%24Conv", "a.b": "%25"}
    assert [r["key"] for r in store.layer_breakdown(id)] == ["op%2E$1"]
    assert [r["key"] for r in store.layer_breakdown(id, group_by="layer_type")] == ["%24Conv"]
