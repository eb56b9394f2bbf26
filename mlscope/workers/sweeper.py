"""The sweeper: no evaluation stays `running` or held by a dead process.

Every running evaluation holds a lease in the store that its runner (a farm worker, `mlscope run`)
renews while it lives. A sweep resolves the leases that expired:

- held by a live agent (its heartbeat still renews the registry: the store was unreachable and its
  renewals failed): left alone, its worker renews the lease once the store is back;
- from a queue: back to `queued` under the same id, its message back on its queue at once (on Redis,
  taken out of the dead worker's unacknowledged messages; on RabbitMQ, a new message: the one it
  redelivered when the dead worker's connection dropped may have been dropped as a second copy of a
  running job), and failed instead once it has been started MAX_ATTEMPTS times;
- run in place (`mlscope run`, no queue): failed with "interrupted: its process died".

On Redis it also gives back messages a dead worker took but never started (killed before its first
store write): an unacknowledged message older than ORPHAN_GRACE_S that no live agent names as its
current job goes back to its queue, instead of waiting out Redis's visibility timeout (which follows
the longest job's time limit, broker.app.visibility_timeout_s).

Sweeps run in every worker's heartbeat and in `mlscope api`; a farm-wide lock in the registry makes
one sweep at a time. A sweep only changes what has expired: running it too often costs an indexed
query.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mlscope.store import EvaluationNotFound, Store
from mlscope.workers.leases import MAX_ATTEMPTS
from mlscope.workers.periodic import every

if TYPE_CHECKING:
    from celery import Celery

    from mlscope.registry.agents import AgentRegistry

__all__ = ["ORPHAN_GRACE_S", "SWEEP_EVERY_S", "SweepReport", "Sweeper", "sweeping"]

log = logging.getLogger("mlscope.sweeper")

# An unacknowledged message no live agent claims goes back to its queue after this long.
ORPHAN_GRACE_S = 30.0
# How often the api sweeps (a worker sweeps at each heartbeat); one sweep at a time in the farm.
SWEEP_EVERY_S = 5.0
# The sweep lock lapses after this long unless its holder sweeps again: another takes over soon after
# the holder dies. (The lock only saves work: every change a sweep makes is an atomic transition that
# two sweepers cannot both make.)
_LOCK_S = 10.0


@dataclass
class SweepReport:
    """What one sweep changed (evaluation ids)."""

    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    skipped: bool = False

    def __bool__(self) -> bool:
        return bool(self.requeued or self.failed or self.restored)


class Sweeper:
    """Resolves expired leases and orphaned messages.

    Args:
        store: the farm's store.
        registry: the agent registry (live agents, the sweep lock); None for a store without a farm
            (`mlscope run`'s embedded store): then only leases without a queue are resolved.
        app: the Celery app of the farm's broker, to put requeued jobs back; None without a farm.
        holder: who sweeps (for the lock and the log).
    """

    def __init__(
        self,
        store: Store,
        registry: AgentRegistry | None = None,
        app: Celery | None = None,
        *,
        holder: str = "sweeper",
        grace_s: float = ORPHAN_GRACE_S,
        max_attempts: int = MAX_ATTEMPTS,
    ) -> None:
        self.store = store
        self.registry = registry
        self.app = app
        self.holder = holder
        self.grace_s = grace_s
        self.max_attempts = max_attempts

    def sweep(self, *, now: datetime | None = None) -> SweepReport:
        """One pass. Store or broker errors propagate (the caller logs them and sweeps again later)."""
        report = SweepReport()
        if self.registry is not None and not self.registry.try_lock("sweeper", self.holder, _LOCK_S):
            report.skipped = True
            return report
        held = self._held_jobs()
        listed_at = now or datetime.now(timezone.utc)
        for lease in self.store.expired_leases(now=listed_at):
            if lease["id"] not in held:
                self._resolve(lease, listed_at, report)
        if self._on_redis():
            self._restore_orphans(held, report)
        return report

    # ----- expired leases ------------------------------------------------------------------------

    def _held_jobs(self) -> set[str]:
        """Evaluations a live agent says it is running, or keeps results of in its spool for a store
        that was unreachable (it writes them when the store is back: requeueing them would measure
        them twice)."""
        if self.registry is None:
            return set()
        held: set[str] = set()
        for agent in self.registry.live():
            held.update(agent.spooled)
            if agent.current_job:
                held.add(agent.current_job)
        return held

    def _resolve(self, lease: dict[str, Any], listed_at: datetime, report: SweepReport) -> None:
        id, owner, attempts, queue = lease["id"], lease["lease_owner"], lease["attempts"], lease["queue"]
        expired = lease["lease_expires_at"].astimezone(timezone.utc).strftime("%H:%M:%S UTC")
        if queue is not None and self.app is None:
            return  # a farm's job: the farm's sweepers (workers, api) put it back on its queue
        if queue is None:
            self._fail(
                id,
                "Interrupted",
                f"interrupted: its process died ({owner} stopped renewing its lease, which expired at "
                f"{expired})",
                report,
            )
        elif attempts >= self.max_attempts:
            self._fail(
                id,
                "TooManyAttempts",
                f"started {attempts} times and never ended: each time its worker died (the last was "
                f"{owner}, silent since {expired}); not trying again",
                report,
            )
        # Only if still expired when requeued: a runner that renewed meanwhile keeps its evaluation.
        elif self.store.requeue_evaluation(id, owner=owner, expired_before=listed_at):
            self._redeliver(id, lease)
            report.requeued.append(id)
            log.warning(
                "evaluation %s: its worker %s died (lease expired at %s): back on %s (attempt %d of %d)",
                id,
                owner,
                expired,
                queue,
                attempts + 1,
                self.max_attempts,
            )

    def _fail(self, id: str, kind: str, message: str, report: SweepReport) -> None:
        try:
            self.store.fail_evaluation(id, error={"type": kind, "message": message, "phase": "run"})
        except EvaluationNotFound:
            return
        report.failed.append(id)
        log.warning("evaluation %s failed: %s", id, message)

    def _redeliver(self, id: str, lease: dict[str, Any]) -> None:
        """Put the job back on its queue: the dead worker's own message when the broker still holds it
        unacknowledged (Redis), else a new message (the stored request is the job).

        On RabbitMQ a new message is always sent. The broker redelivered the dead worker's message
        when its connection dropped, but an idle worker that took it while the dead one's registry
        entry was still live dropped it as a second copy of a running job, and nothing would have
        brought the job back. Two copies are harmless: the first start wins, and a later copy finds
        the job running on a live agent or ended."""
        if self.app is None:
            return
        if self._on_redis():
            with self._redis_channel() as channel:
                for tag, task_id, _ in _unacked(channel):
                    if task_id == id:
                        channel.qos.restore_by_tag(tag, leftmost=False)
                        return
                if _queued(channel, lease["queue"], id):
                    return
        # The broker's modules (Celery, the request schema) only here: a sweep without a farm (`mlscope
        # results`'s, over `mlscope run`'s store) never imports them.
        from mlscope.broker.app import send_evaluation
        from mlscope.broker.tasks import EvaluationMessage
        from mlscope.contract.request import parse_request

        message = EvaluationMessage(id, parse_request(lease["request"]), lease["queue"])
        send_evaluation(self.app, message)

    # ----- Redis: orphaned messages --------------------------------------------------------------

    def _on_redis(self) -> bool:
        return self.app is not None and str(self.app.conf.broker_url).startswith(("redis://", "rediss://"))

    @contextmanager
    def _redis_channel(self) -> Iterator[Any]:
        assert self.app is not None
        with self.app.connection_for_write() as connection:
            yield connection.default_channel

    def _restore_orphans(self, held: set[str], report: SweepReport) -> None:
        with self._redis_channel() as channel:
            for tag, task_id, taken_at in _unacked(channel):
                if task_id in held or time.time() - taken_at < self.grace_s:
                    continue
                try:
                    status = self.store.get_evaluation(task_id)["status"] if task_id else None
                except EvaluationNotFound:
                    status = None
                if status == "running":
                    continue  # its lease decides (above), or it was requeued and redelivered just now
                if status not in ("queued", None):  # it ended: nothing to run, only a message to forget
                    channel.client.pipeline().zrem(channel.unacked_index_key, tag).hdel(
                        channel.unacked_key, tag
                    ).execute()
                    continue
                channel.qos.restore_by_tag(tag, leftmost=False)
                report.restored.append(task_id or tag)
                log.warning(
                    "job %s: taken %.0f s ago by a worker that is gone, never started: back on its queue",
                    task_id,
                    time.time() - taken_at,
                )


def _unacked(channel: Any) -> list[tuple[str, str, float]]:
    """Kombu's unacknowledged messages on Redis: (delivery tag, task id, when taken)."""
    client = channel.client
    entries = client.hgetall(channel.unacked_key)
    found = []
    for raw_tag, raw in entries.items():
        tag = raw_tag.decode() if isinstance(raw_tag, bytes) else str(raw_tag)
        try:
            payload = json.loads(raw)[0]
            task_id = str(payload.get("headers", {}).get("id") or "")
        except (ValueError, IndexError, AttributeError, TypeError):
            task_id = ""
        score = client.zscore(channel.unacked_index_key, tag)
        found.append((tag, task_id, float(score) if score is not None else 0.0))
    return found


def _queued(channel: Any, queue: str, task_id: str, limit: int = 10_000) -> bool:
    """Whether a message of `task_id` waits in `queue` (the first `limit` messages looked at)."""
    for raw in channel.client.lrange(queue, 0, limit - 1):
        try:
            if json.loads(raw).get("headers", {}).get("id") == task_id:
                return True
        except (ValueError, AttributeError):
            continue
    return False


@contextmanager
def sweeping(sweeper: Sweeper, *, every_s: float = SWEEP_EVERY_S) -> Iterator[None]:
    """Sweep every `every_s` in a daemon thread while the block runs (`mlscope api`)."""

    def sweep() -> None:
        try:
            sweeper.sweep()
        except Exception as exc:
            log.warning("sweep: %s", exc)

    with every(every_s, sweep, name="mlscope-sweeper"):
        yield
