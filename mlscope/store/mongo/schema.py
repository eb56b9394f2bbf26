"""The MongoDB store's document shape, versioned: the `mlscope_meta` collection holds
{_id: "schema", version: N}.

- Version 1, mlscope 0.1.0's: no meta document, an `evaluations` collection with documents.
- Version 2: each measurement sub-document also carries its summary (sample_count, mean_ms,
  median_ms, p90_ms, p95_ms, p99_ms, ci_low_ms, ci_high_ms, valid: records.summary_columns) and, where
  it has raw latencies, raw_codec ("int64le", the packing of its latency chunks) beside raw_count.
- Version 3: each measurement sub-document also carries workload_key (contract.workload.workload_key
  of its evaluation and scenario) and display_name (its evaluation's), so that the comparison table
  has one row per workload.
- Version 4: each evaluation with a system also carries machine_id and stack_id
  (contract.system_ids), which history series group by.

`read_state` says what a database holds without changing it, `mark_current` records the current
version in an empty database, and `upgrade` backfills older evaluations in batches and then writes
the meta document: an interrupted upgrade leaves the version it found, and running it again is
harmless.
"""

from __future__ import annotations

import contextlib
from typing import Any

from pymongo import ASCENDING
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from mlscope.contract.system_ids import system_ids
from mlscope.store.mongo.codec import decode, measurement_summary, measurement_workload
from mlscope.store.mongo.documents import DOCUMENTS
from mlscope.store.schema import SchemaState

__all__ = ["META", "SCHEMA_VERSION", "mark_current", "read_state", "upgrade"]

META = "mlscope_meta"
SCHEMA_ID = "schema"
SCHEMA_VERSION = 4
STORE_COLLECTIONS = frozenset(document._meta["collection"] for document in DOCUMENTS) | {META}
# Evaluations read and rewritten per round trip.
BATCH_DOCUMENTS = 500
_UNVERSIONED_NOTE = "written by mlscope 0.1.0, which kept no schema version"
# What upgrade reads of an evaluation: its measurements and what their workload keys are of.
_UPGRADE_READS = ("measurements", "model_name", "model_version", "request", "manifest")


def read_state(db: Database[Any], *, location: str) -> SchemaState:
    """What the database holds, read without changing anything.

    Args:
        db: the store's database.
        location: the store URL with its password masked, for the state.
    """
    required = str(SCHEMA_VERSION)

    def state(name: str, current: str | None, note: str = "", found: tuple[str, ...] = ()) -> SchemaState:
        return SchemaState("mongodb", location, name, current, required, note, found, "collections")

    names = {name for name in db.list_collection_names() if not name.startswith("system.")}
    meta = db[META].find_one({"_id": SCHEMA_ID}) if META in names else None
    if meta is not None:
        version = meta.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            return state("foreign", None, found=(f"{META} with version {version!r}", *sorted(names - {META})))
        if version == SCHEMA_VERSION:
            return state("current", required)
        if version > SCHEMA_VERSION:
            return state("newer", str(version))
        return state("older", str(version), "written by an older mlscope")
    if names and not names & STORE_COLLECTIONS:
        return state("foreign", None, found=tuple(sorted(names)))
    if "evaluations" in names and db["evaluations"].find_one({}, {"_id": 1}) is not None:
        return state("older", "1", _UNVERSIONED_NOTE)
    # Nothing, or only mlscope's collections with no evaluation in them (indexes made on an open).
    return state("empty", None)


def mark_current(db: Database[Any]) -> None:
    """Records the current version in a database that has none (an empty one)."""
    # Several processes may open a fresh database at once: the first insert wins, the same for all.
    with contextlib.suppress(DuplicateKeyError):
        db[META].update_one({"_id": SCHEMA_ID}, {"$setOnInsert": {"version": SCHEMA_VERSION}}, upsert=True)


def upgrade(db: Database[Any]) -> int:
    """Brings a version-1, 2 or 3 database to the current version: every measurement gets the
    version-2 and version-3 fields, evaluation by evaluation in batches, every evaluation with a
    system the version-4 ids, then the meta document says so.

    Returns:
        How many measurement sub-documents were backfilled.
    """
    backfilled = _backfill_measurements(db)
    _fill_system_ids(db)
    db[META].update_one({"_id": SCHEMA_ID}, {"$set": {"version": SCHEMA_VERSION}}, upsert=True)
    return backfilled


def _fill_system_ids(db: Database[Any]) -> int:
    """Sets machine_id and stack_id of every evaluation with a system and no machine_id, from its
    system's stored description and its framework details' image; returns how many were set."""
    evaluations, systems = db["evaluations"], db["systems"]
    filled, last = 0, None
    while True:
        query: dict[str, Any] = {"system_id": {"$ne": None}, "machine_id": None}
        if last is not None:
            query["_id"] = {"$gt": last}
        batch = list(
            evaluations.find(query, {"system_id": 1, "framework_details": 1})
            .sort("_id", ASCENDING)
            .limit(BATCH_DOCUMENTS)
        )
        if not batch:
            return filled
        wanted = sorted({document["system_id"] for document in batch})
        described = {s["_id"]: decode(s.get("data")) for s in systems.find({"_id": {"$in": wanted}})}
        for document in batch:
            system = described.get(document["system_id"])
            if not isinstance(system, dict):
                continue
            machine, stack = system_ids(system, decode(document.get("framework_details")))
            evaluations.update_one(
                {"_id": document["_id"]}, {"$set": {"machine_id": machine, "stack_id": stack}}
            )
            filled += 1
        last = batch[-1]["_id"]


def _backfill_measurements(db: Database[Any]) -> int:
    """The version-2 and version-3 fields of every measurement; returns how many were backfilled."""
    evaluations = db["evaluations"]
    backfilled, last = 0, None
    while True:
        query: dict[str, Any] = {"measurements.0": {"$exists": True}}
        if last is not None:
            query["_id"] = {"$gt": last}
        batch = list(
            evaluations.find(query, dict.fromkeys(_UPGRADE_READS, 1))
            .sort("_id", ASCENDING)
            .limit(BATCH_DOCUMENTS)
        )
        if not batch:
            break
        for document in batch:
            measurements = [
                {
                    **m,
                    **measurement_summary(
                        decode(m.get("latency_ms") or {}), decode(m.get("validity") or {}), m.get("raw_count")
                    ),
                    **measurement_workload(document, m["scenario"]),
                }
                for m in document["measurements"]
            ]
            # One update per evaluation rather than a bulk_write: mongomock, which the tests run on,
            # cannot take pymongo's current bulk operations. A finished evaluation's measurements
            # never change again, so nothing written meanwhile is overwritten.
            evaluations.update_one({"_id": document["_id"]}, {"$set": {"measurements": measurements}})
            backfilled += len(measurements)
        last = batch[-1]["_id"]
    return backfilled
