"""Starts, attempts and leases: the running part of an evaluation's lifecycle.

A runner (a farm worker, `mlscope run`, a container) that starts an evaluation may take a lease on it
and renew it while it works; a runner that dies stops renewing, so its evaluation's lease expires and
`expired_leases` finds it, for a sweeper to send back to its queue (`requeue_evaluation`) or to mark
failed. Every start counts an attempt, so a job that keeps killing its runners can be told apart.

`StoreLeases` is mixed into `Store` (base.py): the public methods own validation and the clock; each
backend implements the three primitives under them, each one atomic against concurrent callers.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.store.errors import InvalidTransition
from mlscope.store.paging import MAX_LIST_LIMIT
from mlscope.store.records import check_aware, check_int, check_optional_text, check_text

__all__ = ["LEASE_KEYS", "StoreLeases"]

# What `expired_leases` tells about each evaluation: enough to requeue its job or fail it, unread.
LEASE_KEYS = (
    "id",
    "lease_owner",
    "lease_expires_at",
    "attempts",
    "queue",
    "request",
    "trace_id",
    "created_at",
)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _check_lease_s(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise UserError(f"lease_s={value!r} must be a number of seconds greater than 0", field="lease_s")
    return float(value)


class StoreLeases(ABC):
    """Starting an evaluation, and the leases of the runners that run them."""

    def start_evaluation(
        self,
        id: str,
        *,
        started_at: datetime | None = None,
        lease_owner: str | None = None,
        lease_s: float | None = None,
    ) -> int:
        """Marks the evaluation running and counts the attempt. A redelivered job may start again:
        running → running, one more attempt, the lease taken over by the new runner.

        Args:
            id: the full evaluation id.
            started_at: aware datetime; now when None.
            lease_owner: who runs it (a worker's agent id, a process); with `lease_s`, or neither.
            lease_s: seconds the lease lasts from now unless renewed (`renew_lease`); greater than 0.
                Without a lease, any lease an earlier start took is dropped.

        Returns:
            How many times the evaluation has been started, this start included.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
            InvalidTransition: when the evaluation has already ended.
            UserError: naming `lease_owner` or `lease_s` when one is given without the other or is
                invalid.
        """
        checked_id = check_text(id, "id")
        changes: dict[str, Any] = {
            "status": "running",
            "started_at": check_aware(started_at, "started_at") or _now(),
            "lease_owner": None,
            "lease_expires_at": None,
        }
        if (lease_owner is None) != (lease_s is None):
            missing = "lease_s" if lease_s is None else "lease_owner"
            raise UserError(
                f"a lease needs both lease_owner and lease_s; {missing} is missing", field=missing
            )
        if lease_owner is not None:
            changes["lease_owner"] = check_text(lease_owner, "lease_owner")
            changes["lease_expires_at"] = _now() + timedelta(seconds=_check_lease_s(lease_s))
        status, attempts = self._start(checked_id, changes=changes)
        if status != "running":
            raise InvalidTransition(id, status, "running")
        return attempts

    def renew_lease(self, id: str, *, owner: str, lease_s: float) -> bool:
        """Extends the lease of a running evaluation to `lease_s` seconds from now, if `owner` holds it.

        Returns:
            True when renewed; False, changing nothing, when the evaluation is not running or another
            runner (or none) holds its lease: its runner should stop, its work is someone else's now.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
            UserError: naming `owner` or `lease_s` when invalid.
        """
        checked_owner = check_text(owner, "owner")
        expires_at = _now() + timedelta(seconds=_check_lease_s(lease_s))
        return self._leased_transition(
            check_text(id, "id"),
            owner=checked_owner,
            expired_before=None,
            changes={"lease_expires_at": expires_at},
        )

    def expired_leases(self, *, now: datetime | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Running evaluations whose lease expired before `now`: their runners stopped renewing.
        Evaluations running without a lease are never listed.

        Args:
            now: aware datetime; the current time when None.
            limit: at most this many, 1 to MAX_LIST_LIMIT.

        Returns:
            The oldest expiry first (then by id), each {"id", "lease_owner", "lease_expires_at" (aware
            datetime), "attempts", "queue" (None: it came from no queue), "request", "trace_id",
            "created_at" (aware datetime)}.

        Raises:
            UserError: naming `now` or `limit` when invalid.
        """
        checked_now = check_aware(now, "now") or _now()
        check_int("limit", limit, 1)
        if limit > MAX_LIST_LIMIT:
            raise UserError(f"limit={limit} is too large: at most {MAX_LIST_LIMIT}", field="limit")
        return self._expired_leases(checked_now, limit=limit)

    def requeue_evaluation(
        self, id: str, *, owner: str | None, expired_before: datetime | None = None
    ) -> bool:
        """Sends a running evaluation back to queued, as it was before it started: lease and
        started_at cleared, its attempts kept (the next start counts one more).

        Args:
            id: the full evaluation id.
            owner: only if this runner holds its lease; None: whoever holds it (a sweeper).
            expired_before: aware datetime; when given, only if its lease expired before then, so that
                a sweeper never takes an evaluation whose runner renewed it after it was listed.

        Returns:
            True when it went back to queued; False, changing nothing, when it is not running or the
            condition does not hold.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
            UserError: naming the invalid argument.
        """
        changes = {"status": "queued", "started_at": None, "lease_owner": None, "lease_expires_at": None}
        return self._leased_transition(
            check_text(id, "id"),
            owner=check_optional_text(owner, "owner"),
            expired_before=check_aware(expired_before, "expired_before"),
            changes=changes,
        )

    # ----- the backends' primitives ----------------------------------------------------------------

    @abstractmethod
    def _start(self, id: str, *, changes: Mapping[str, Any]) -> tuple[str, int]:
        """In one transaction, and with the evaluation locked against concurrent transitions: if it is
        queued or running, set `changes` and add one to its attempts; otherwise change nothing. Two
        concurrent starts count two attempts.

        Returns:
            Its status after the call ("running" when it started, else the status it ended in) and
            its attempts after the call.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
        """

    @abstractmethod
    def _leased_transition(
        self, id: str, *, owner: str | None, expired_before: datetime | None, changes: Mapping[str, Any]
    ) -> bool:
        """Atomically: if the evaluation is running, its lease_owner is `owner` (any, None included,
        when `owner` is None) and its lease expired before `expired_before` (when given), set `changes`.

        Returns:
            Whether it changed.

        Raises:
            EvaluationNotFound: when no evaluation has this id.
        """

    @abstractmethod
    def _expired_leases(self, now: datetime, *, limit: int) -> list[dict[str, Any]]:
        """Running evaluations with lease_expires_at < `now`, read through an index on (status,
        lease_expires_at), oldest expiry first, then by id; each with the LEASE_KEYS, timestamps aware
        UTC datetimes."""
