"""The Mongo store's bulk import and retention: whole evaluations written through the store's own
insert and finish primitives (ids already present skipped), and the raw data of old evaluations —
latency chunks and spans — dropped, or the evaluations deleted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from pymongo.collection import Collection

from mlscope.contract.names import ACTIVE_STATUSES, TERMINAL_STATUSES
from mlscope.store.backend import StoreBackend
from mlscope.store.maintenance import PruneReport
from mlscope.store.mongo.codec import micros
from mlscope.store.records import EvaluationRecord

__all__ = ["bulk_insert", "prune"]


def bulk_insert(
    store: StoreBackend,
    evaluations: Collection[Any],
    records: Sequence[EvaluationRecord],
    systems: Mapping[str, dict[str, Any]],
) -> int:
    """Insert `records` not yet stored through `store`'s own primitives; how many were new."""
    for id, system in systems.items():
        store._insert_system(id, system)
    wanted = list(dict.fromkeys(record.id for record in records))
    present = {document["_id"] for document in evaluations.find({"_id": {"$in": wanted}}, {"_id": 1})}
    inserted = 0
    for record in records:
        if record.id in present:
            continue
        present.add(record.id)
        # Inserted queued, then moved to its status by the one conditional update every finish uses.
        store._insert_evaluation(replace(record, status="queued"))
        inserted += 1
        if record.status == "queued":
            continue
        changes: dict[str, Any] = {
            "status": record.status,
            "started_at": record.started_at,
            "finished_at": record.finished_at,
            "system_id": record.system_id,
            "machine_id": record.machine_id,
            "stack_id": record.stack_id,
            "framework_details": record.framework_details,
            "cold_start": record.cold_start,
            "error": record.error,
        }
        # Only the sections it has: a result without one stays without the field, as a finish leaves it.
        for name in ("accuracy", "parity", "memory"):
            section = getattr(record, name)
            if section is not None:
                changes[name] = section
        store._transition(
            record.id, allowed_from=ACTIVE_STATUSES, changes=changes, measurements=record.measurements
        )
    return inserted


def prune(
    evaluations: Collection[Any],
    chunks: Collection[Any],
    spans: Collection[Any],
    before: datetime,
    *,
    keep_summaries: bool,
) -> PruneReport:
    """Drop the raw data of evaluations ended before `before`, or the evaluations themselves."""
    cutoff = micros(before)
    ended = {
        "status": {"$in": sorted(TERMINAL_STATUSES)},
        "$or": [
            {"finished_at": {"$lt": cutoff}},
            {"finished_at": None, "created_at": {"$lt": cutoff}},
        ],
    }
    ids = [document["_id"] for document in evaluations.find(ended, {"_id": 1})]
    if not ids:
        return PruneReport(evaluations=0, raw_latencies=0, spans=0, deleted=not keep_summaries)
    dropped_spans = spans.delete_many({"evaluation": {"$in": ids}}).deleted_count
    with_raw = 0
    for document in evaluations.find({"_id": {"$in": ids}, "raw_token": {"$ne": None}}, {"measurements": 1}):
        measurements = document.get("measurements") or []
        with_raw += sum(1 for m in measurements if m.get("raw_count"))
        if keep_summaries:
            # No raw latencies are kept any more: the summary (latency_ms) still counts them all.
            kept = [{**m, "raw_count": None} for m in measurements]
            evaluations.update_one(
                {"_id": document["_id"]}, {"$set": {"raw_token": None, "measurements": kept}}
            )
    chunks.delete_many({"evaluation": {"$in": ids}})
    if not keep_summaries:
        evaluations.delete_many({"_id": {"$in": ids}})
    return PruneReport(
        evaluations=len(ids), raw_latencies=with_raw, spans=int(dropped_spans), deleted=not keep_summaries
    )
