"""Leases: a running evaluation is held by a process that proves it is alive by renewing it.

The runner (a farm worker or `mlscope run`) takes the lease when it starts the evaluation and renews
it every third of its length until the evaluation ends; the sweeper (workers.sweeper) resolves a lease
that lapsed. The same mechanism for every runner, so nothing stays `running` because the process that
ran it died, whatever killed it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from mlscope.contract.errors import StoreUnavailable
from mlscope.store import Store
from mlscope.workers.periodic import every

__all__ = ["LEASE_S", "MAX_ATTEMPTS", "Lease", "kept", "run_owner"]

log = logging.getLogger("mlscope.workers")

# A lease lasts this long past its last renewal; renewed every third of it, it lapses only when its
# holder is dead (or frozen) for a while.
LEASE_S = 30.0
# A job started this many times without ending (each time its worker died) fails instead of running
# again: a job that kills its worker must not kill the whole farm, one worker after another.
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Lease:
    """Who holds a running evaluation, and for how long after each renewal.

    Attributes:
        owner: an agent id (a farm worker) or `run_owner()` (`mlscope run`).
        seconds: the lease's length.
        max_attempts: the starts allowed before the evaluation fails instead.
    """

    owner: str
    seconds: float = LEASE_S
    max_attempts: int = MAX_ATTEMPTS


def run_owner() -> str:
    """The lease owner of an evaluation this process runs in place: `run:<host>:<pid>`."""
    return f"run:{socket.gethostname()}:{os.getpid()}"


@contextlib.contextmanager
def kept(store: Store, evaluation_id: str | Sequence[str], lease: Lease | None) -> Iterator[None]:
    """Renew `lease` on `evaluation_id` (or on each of several: a brick job's) every third of its
    length while the block runs.

    A renewal the store does not take (unreachable) is logged and tried again at the next turn: the
    sweeper leaves alone an evaluation its live worker names, and the lease is renewed once the store
    is back.
    """
    if lease is None:
        yield
        return
    ids = [evaluation_id] if isinstance(evaluation_id, str) else list(evaluation_id)
    held = set(ids)
    warned = False

    def renew() -> bool:
        nonlocal warned
        for id in ids:
            if id not in held:
                continue
            try:
                if not store.renew_lease(id, owner=lease.owner, lease_s=lease.seconds):
                    log.info("evaluation %s: its lease is no longer %s's", id, lease.owner)
                    held.discard(id)
                    continue
                warned = False
            except StoreUnavailable as exc:
                if not warned:
                    log.warning("evaluation %s: cannot renew its lease: %s", id, exc.message)
                    warned = True
                return True
            except Exception:
                log.exception("evaluation %s: renewing its lease", id)
        return bool(held)

    with every(lease.seconds / 3, renew, name=f"lease-{ids[0][:8]}"):
        yield
