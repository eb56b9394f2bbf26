"""Starts, attempts and leases: the running part of an evaluation's lifecycle.

A runner (a farm worker, `mlscope run`, a container) that starts an evaluation may take a lease on it
and renew it while it works; a runner that dies stops renewing, so its evaluation's lease expires and
`expired_leases` finds it, for a sweeper to send back to its queue (`requeue_evaluation`) or to mark
failed. Every start counts an attempt, so a job that keeps killing its runners can be told apart.

The public methods are `Store`'s (base.py: `start_evaluation`, `renew_lease`, `expired_leases`,
`requeue_evaluation`), which own validation and the clock; each backend implements the three
primitives under them (`StoreBackend._start`, `_leased_transition`, `_expired_leases` in backend.py),
each one atomic against concurrent callers. This module holds what they share: the keys a listing of
expired leases carries, and the check of a lease's length.
"""

from __future__ import annotations

import math
from typing import Any

from mlscope.contract.errors import UserError

__all__ = ["LEASE_KEYS", "check_lease_s"]

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


def check_lease_s(value: Any) -> float:
    """`value` as a lease length in seconds.

    Raises:
        UserError: naming `lease_s` when it is not a finite number greater than 0.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise UserError(f"lease_s={value!r} must be a number of seconds greater than 0", field="lease_s")
    return float(value)
