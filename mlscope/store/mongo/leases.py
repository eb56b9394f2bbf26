"""The Mongo store's starts and leases (store/leases.py): each one conditional update, which the
server applies atomically, so concurrent starts count every attempt and a lease changes hands only
under the condition its caller gave.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ASCENDING, ReturnDocument
from pymongo.collection import Collection

from mlscope.contract.names import ACTIVE_STATUSES
from mlscope.store.errors import EvaluationNotFound
from mlscope.store.mongo.codec import decode, micros, to_datetime

__all__ = ["expired_leases", "leased_transition", "start"]

_LEASE_FIELDS = {
    "lease_owner": 1,
    "lease_expires_at": 1,
    "attempts": 1,
    "queue": 1,
    "request": 1,
    "trace_id": 1,
    "created_at": 1,
}


def start(evaluations: Collection[Any], id: str, update: dict[str, Any]) -> tuple[str, int]:
    """MongoStore._start, with `changes` already in stored form."""
    after = evaluations.find_one_and_update(
        {"_id": id, "status": {"$in": sorted(ACTIVE_STATUSES)}},
        # $inc counts a document without attempts (stored before they were kept) from 0.
        {"$set": update, "$inc": {"attempts": 1}},
        projection={"status": 1, "attempts": 1},
        return_document=ReturnDocument.AFTER,
    )
    found = after or evaluations.find_one({"_id": id}, {"status": 1, "attempts": 1})
    if found is None:
        raise EvaluationNotFound(id)
    return str(found["status"]), int(found.get("attempts") or 0)


def leased_transition(
    evaluations: Collection[Any],
    id: str,
    owner: str | None,
    expired_before: datetime | None,
    update: dict[str, Any],
) -> bool:
    """MongoStore._leased_transition, with `changes` already in stored form."""
    condition: dict[str, Any] = {"_id": id, "status": "running"}
    if owner is not None:
        condition["lease_owner"] = owner
    if expired_before is not None:
        condition["lease_expires_at"] = {"$lt": micros(expired_before)}
    if evaluations.update_one(condition, {"$set": update}).matched_count:
        return True
    if evaluations.find_one({"_id": id}, {"_id": 1}) is None:
        raise EvaluationNotFound(id)
    return False


def expired_leases(evaluations: Collection[Any], now: datetime, *, limit: int) -> list[dict[str, Any]]:
    """MongoStore._expired_leases: a range of the (status, lease_expires_at) index."""
    # $lt on a number matches numbers only: an evaluation running without a lease (null, or no field)
    # is never listed.
    found = (
        evaluations.find({"status": "running", "lease_expires_at": {"$lt": micros(now)}}, _LEASE_FIELDS)
        .sort([("lease_expires_at", ASCENDING), ("_id", ASCENDING)])
        .limit(limit)
    )
    return [
        {
            "id": document["_id"],
            "lease_owner": document.get("lease_owner"),
            "lease_expires_at": to_datetime(document["lease_expires_at"]),
            "attempts": int(document.get("attempts") or 0),
            "queue": document.get("queue"),
            "request": decode(document.get("request") or {}),
            "trace_id": document.get("trace_id"),
            "created_at": to_datetime(document["created_at"]),
        }
        for document in found
    ]
