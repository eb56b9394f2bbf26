"""Many writers at once, each a real process, into PostgreSQL and into SQLite (WAL), while another
process reads: no measurement lost, none duplicated, every redelivered finish a no-op."""

from __future__ import annotations

import multiprocessing
import time
from datetime import datetime, timezone
from typing import Any

from mlscope.store import open_store

WRITERS = 4
PER_WRITER = 25


def _finish(store: Any, evaluation_id: str, writer: int, index: int) -> None:
    store.finish_evaluation(
        evaluation_id,
        system={"id": f"box-{writer}", "hostname": f"box-{writer}", "cpu": {"model": "x"}, "gpus": []},
        framework={"name": "onnxruntime", "version": "1.23"},
        cold_start={"import_ms": 1.0, "load_ms": 1.0, "first_inference_ms": 1.0},
        measurements=[
            {
                "scenario": "single_stream",
                "batch_size": batch,
                "latency_ms": {"count": 20, "median": float(index + batch), "median_ci": [0.9, 1.1]},
                "throughput": 1.0,
                "validity": {"valid": True, "reasons": []},
                "latencies_ns": [index * 1000 + k for k in range(20)],
            }
            for batch in (1, 8)
        ],
        finished_at=datetime.now(timezone.utc),
    )


def _writer(url: str, writer: int, ids: list[str], start: Any) -> None:
    """A worker's life, many times over: create, start, finish — and every third job delivered twice
    (a redelivery: started again and finished again)."""
    start.wait()
    with open_store(url) as store:
        for index, evaluation_id in enumerate(ids):
            store.create_evaluation(
                id=evaluation_id,
                model={"name": f"model{writer}", "version": "1", "manifest_sha256": None},
                manifest={},
                framework={"name": "onnxruntime", "version": None},
                runner="process",
                device="cpu",
                request={},
            )
            store.start_evaluation(evaluation_id)
            _finish(store, evaluation_id, writer, index)
            if index % 3 == 0:  # the same job finished again by a second delivery
                _finish(store, evaluation_id, writer, index + 1000)


def _reader(url: str, start: Any, stop: Any, seen: Any) -> None:
    start.wait()
    with open_store(url) as store:
        while not stop.is_set():
            for row in store.list_evaluations(limit=100):
                assert row["status"] in ("queued", "running", "succeeded")
            store.compare()
            seen.value += 1
            time.sleep(0.01)


def test_concurrent_writers_lose_and_duplicate_nothing(shared_url: str) -> None:
    # Given a store made once, WRITERS writer processes and a reader process, started together
    open_store(shared_url).close()
    context = multiprocessing.get_context("spawn")
    start, stop = context.Event(), context.Event()
    seen = context.Value("i", 0)
    ids = {w: [f"w{w}-{i:03d}-" + "0" * 24 for i in range(PER_WRITER)] for w in range(WRITERS)}
    writers = [context.Process(target=_writer, args=(shared_url, w, ids[w], start)) for w in range(WRITERS)]
    reader = context.Process(target=_reader, args=(shared_url, start, stop, seen))
    for process in (*writers, reader):
        process.start()
    # When they all write at once
    start.set()
    for process in writers:
        process.join(timeout=300)
    stop.set()
    reader.join(timeout=60)
    # Then every process ended cleanly, the reader read throughout
    assert [p.exitcode for p in writers] == [0] * WRITERS and reader.exitcode == 0
    assert seen.value > 0
    # ... and every evaluation is stored once, with exactly its first finish's two measurements
    with open_store(shared_url) as store:
        assert store.count_evaluations() == WRITERS * PER_WRITER
        assert store.count_evaluations(status="succeeded") == WRITERS * PER_WRITER
        for writer, evaluation_ids in ids.items():
            for index, evaluation_id in enumerate(evaluation_ids):
                stored = store.get_evaluation(evaluation_id, include_raw=True)
                points = stored["measurements"]
                assert [m["batch_size"] for m in points] == [1, 8]
                assert [m["latency_ms"]["median"] for m in points] == [index + 1.0, index + 8.0]
                assert points[0]["latencies_ns"] == [index * 1000 + k for k in range(20)]
                assert stored["system"]["id"] == f"box-{writer}"
        rows = store.compare()
        assert sum(row["runs"] for row in rows) == WRITERS * PER_WRITER * 2
