"""Bulk import and retention, on every store: whole results imported as exported (ids present skipped,
a bad one named by its index), and `prune` dropping old raw data but never a summary."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.store import Store

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _result(index: int, *, status: str = "succeeded", days: int = 0) -> dict[str, Any]:
    created = T0 + timedelta(days=days, minutes=index)
    ended = status in ("succeeded", "failed", "cancelled")
    result: dict[str, Any] = {
        "id": f"imported{index:04d}" + "0" * 20,
        "status": status,
        "model": {"name": f"model{index % 3}", "version": "1", "manifest_sha256": "ab" * 32},
        "framework": {"name": "onnxruntime", "version": "1.23.0", "threads": 2},
        "system": {
            "id": f"box-{index % 2}",
            "hostname": f"box-{index % 2}",
            "cpu": {"model": "x"},
            "gpus": [],
        }
        if status == "succeeded"
        else None,
        "runner": "process",
        "device": "cpu",
        "trace_level": "NO_TRACE",
        "trace_id": None,
        "cold_start": {"import_ms": 1.0, "load_ms": 2.0, "first_inference_ms": 3.0}
        if status == "succeeded"
        else None,
        "measurements": [
            {
                "scenario": "single_stream",
                "batch_size": batch,
                "latency_ms": {
                    "count": 50,
                    "mean": 10.0 + index + batch,
                    "median": 10.0 + index + batch,
                    "p90": 11.0 + index + batch,
                    "p99": 12.0 + index + batch,
                    "median_ci": [9.9, 10.1],
                },
                "throughput": 100.0,
                "validity": {"valid": True, "reasons": []},
                "latencies_ns": [10_000_000 + index * 1000 + k for k in range(50)],
            }
            for batch in (1, 8)
        ]
        if status == "succeeded"
        else [],
        "error": {"type": "Crash", "message": "exit 137", "phase": "measure"} if status == "failed" else None,
        "created_at": created.isoformat(),
        "started_at": (created + timedelta(seconds=1)).isoformat() if status != "queued" else None,
        "finished_at": (created + timedelta(seconds=30)).isoformat() if ended else None,
        "request": {"model": f"model{index % 3}"},
        "manifest": {"name": f"model{index % 3}"},
    }
    return result


def test_imported_results_read_back_as_they_were_exported(store: Store) -> None:
    # Given results of every status, as another store exports them
    results = [_result(0), _result(1, status="failed"), _result(2, status="queued"), _result(3)]
    # When they are imported in small batches
    assert store.import_evaluations(results, batch_size=3) == 4
    # Then each reads back as it was, raw latencies included
    for result in results:
        stored = store.get_evaluation(result["id"], include_raw=True)
        for key in ("status", "model", "framework", "runner", "device", "error", "cold_start", "request"):
            assert stored[key] == result[key], key
        assert stored["created_at"] == result["created_at"]
        assert stored["finished_at"] == result["finished_at"]
        assert [m["latencies_ns"] for m in stored["measurements"]] == [
            m["latencies_ns"] for m in result["measurements"]
        ]
        if result["system"] is not None:
            assert stored["system"]["id"] == result["system"]["id"]
    # ... compare sees them like any finished evaluation
    rows = store.compare(models=["model0"])
    assert {row["batch_size"] for row in rows} == {1, 8}
    # When the same results are imported again: nothing is duplicated
    assert store.import_evaluations(results) == 0
    assert store.count_evaluations() == 4


def test_a_bad_result_is_named_by_its_index_and_earlier_batches_are_kept(store: Store) -> None:
    results = [_result(0), _result(1), _result(2)]
    results[2]["model"] = {"name": "", "version": "1", "manifest_sha256": None}
    with pytest.raises(UserError) as failure:
        store.import_evaluations(results, batch_size=2)
    assert failure.value.field is not None and failure.value.field.startswith("results.2.model")
    # The first batch (results 0 and 1) was stored; nothing of the batch holding the bad one
    assert store.count_evaluations() == 2
    with pytest.raises(UserError, match="batch_size"):
        store.import_evaluations([], batch_size=0)


def test_an_ended_result_without_its_finish_time_is_refused(store: Store) -> None:
    # An ended evaluation without finished_at could be neither ordered nor counted as the latest
    result = _result(0)
    result["finished_at"] = None
    with pytest.raises(UserError, match="finished_at") as failure:
        store.import_evaluations([result])
    assert failure.value.field == "results.0.finished_at"
    assert store.count_evaluations() == 0


def _spans(count: int) -> list[dict[str, Any]]:
    base = int(T0.timestamp() * 1e9)
    return [
        {
            "trace_id": "0123456789abcdef" * 2,
            "span_id": f"{k + 1:016x}",
            "parent_id": None,
            "name": "inference",
            "level": "MODEL",
            "start_ns": base + k * 1000,
            "end_ns": base + k * 1000 + 500,
            "attributes": {},
        }
        for k in range(count)
    ]


def test_prune_drops_old_raw_data_but_never_a_summary(store: Store) -> None:
    # Given an old and a recent succeeded evaluation, an old failed one and an old queued one
    old, recent = _result(0, days=0), _result(1, days=60)
    old_failed, old_queued = _result(2, status="failed", days=0), _result(3, status="queued", days=0)
    store.import_evaluations([old, recent, old_failed, old_queued])
    store.save_spans(old["id"], _spans(5))
    store.save_spans(recent["id"], _spans(3))
    summary_before = store.get_evaluation(old["id"])["measurements"]
    # When raw data of what ended before day 30 is pruned
    report = store.prune(before=T0 + timedelta(days=30))
    # Then the old ended evaluations lost their raw latencies and spans, not their summaries
    assert report.to_dict() == {"evaluations": 2, "raw_latencies": 2, "spans": 5, "deleted": False}
    pruned = store.get_evaluation(old["id"], include_raw=True)
    assert pruned["status"] == "succeeded" and store.count_spans(old["id"]) == 0
    assert all("latencies_ns" not in m or not m["latencies_ns"] for m in pruned["measurements"])
    assert [m["latency_ms"] for m in store.get_evaluation(old["id"])["measurements"]] == [
        m["latency_ms"] for m in summary_before
    ]
    assert {row["evaluation_id"] for row in store.compare(models=["model0"])} == {old["id"]}
    # ... the recent one and the queued one are untouched
    assert len(store.get_evaluation(recent["id"], include_raw=True)["measurements"][0]["latencies_ns"]) == 50
    assert store.count_spans(recent["id"]) == 3
    assert store.get_evaluation(old_queued["id"])["status"] == "queued"
    # When old evaluations are deleted whole
    report = store.prune(before=T0 + timedelta(days=30), keep_summaries=False)
    assert report.deleted and report.evaluations == 2
    assert store.count_evaluations() == 2  # the recent one and the queued one
    with pytest.raises(UserError, match="before"):
        store.prune(before=datetime(2026, 1, 1))  # naive: refused
