"""This host's measuring turn: two agents on one machine never measure at the same time, and an agent
that waits for its turn holds no job.

The turn is a host-wide file lock. An agent takes it, without waiting, when a job arrives; when the
other agent has it, the job goes straight back to its queue (where any idle agent of another host can
take it) and this agent stops consuming until the turn is free again (`ConsumerGate`). Holding a job
while waiting for the lock, as an agent once did, stranded the job when the waiting agent was killed,
and kept it from idle agents elsewhere.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, ClassVar

from celery import Celery, bootsteps

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no host lock
    fcntl = None  # type: ignore[assignment]

__all__ = ["HOST_LOCK", "ConsumerGate", "HostTurn"]

log = logging.getLogger("mlscope.worker")

# Shared by every mlscope worker of the host, whatever its user's cache directory.
HOST_LOCK = Path(tempfile.gettempdir()) / "mlscope-host-measure.lock"
# How often a closed gate looks whether the turn is free again.
GATE_POLL_S = 1.0


class HostTurn:
    """The host-wide measuring lock, taken without waiting.

    Args:
        path: the lock file.
        exclusive: False for a worker that runs side by side with the others (`--shared-host`): the
            turn is then always free.
    """

    def __init__(self, path: Path = HOST_LOCK, *, exclusive: bool = True) -> None:
        self.path = path
        self.exclusive = exclusive and fcntl is not None
        self._held: IO[bytes] | None = None

    def try_take(self) -> bool:
        """Take the turn if no other agent of this host has it; True when this agent has it now."""
        if not self.exclusive or self._held is not None:
            return True
        handle = open(self.path, "a+b")  # noqa: SIM115 - held open for as long as the turn lasts
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        self._held = handle
        return True

    def release(self) -> None:
        if self._held is not None:
            fcntl.flock(self._held, fcntl.LOCK_UN)
            self._held.close()
            self._held = None

    def is_free(self) -> bool:
        """Whether no other agent of this host holds the turn now (taken and given back at once)."""
        if not self.exclusive or self._held is not None:
            return True
        if not self.try_take():
            return False
        self.release()
        return True


class ConsumerGate:
    """Stops and restarts a Celery worker's consuming of its queues, from inside its own event loop.

    `close()` is called by the task (the solo pool runs it in the event loop's thread) when the turn is
    taken; a timer of the same loop reopens the gate once the turn is free. Both are what Celery's
    remote-control commands `cancel_consumer` and `add_consumer` do, without the round trip through the
    broker.
    """

    def __init__(self, turn: HostTurn, queues: Sequence[str]) -> None:
        self.turn = turn
        self.queues = list(queues)
        self.closed = False
        self._consumer: Any = None
        self._polling = False

    def attach(self, app: Celery) -> None:
        """Install the gate in `app`'s worker (before `worker_main`)."""
        gate = self

        class GateStep(bootsteps.StartStopStep):
            requires: ClassVar[set[str]] = {"celery.worker.consumer.tasks:Tasks"}

            def start(self, consumer: Any) -> None:
                gate._consumer = consumer
                if not gate._polling:
                    gate._polling = True
                    consumer.timer.call_repeatedly(GATE_POLL_S, gate.poll)

        app.steps["consumer"].add(GateStep)

    def close(self) -> None:
        """Stop consuming every queue until the turn is free."""
        if self.closed or self._consumer is None:
            return
        log.info("this host's other agent is measuring: not taking jobs until it is done")
        for queue in self.queues:
            self._consumer.cancel_task_queue(queue)
        self.closed = True

    def poll(self) -> None:
        """Reopen a closed gate when the turn is free (a timer calls it in the event loop)."""
        if not self.closed or self._consumer is None or not self.turn.is_free():
            return
        for queue in self.queues:
            self._consumer.add_task_queue(queue)
        self.closed = False
        log.info("this host's turn is free: taking jobs again")
