"""A worker's store writes kept on local disk while the store is away, and written when it returns.

A finished measurement costs minutes of a machine; a store outage must not throw it away. The worker's
pipeline writes through `DurableWrites`: a write the store takes now is done; one it cannot take
(StoreUnavailable) goes into the `Spool`, a directory of one file per write, each made durable (a
temporary file, fsync, rename) before the call returns, so neither a worker's crash nor its restart
loses it. A flusher thread replays the spool with backoff once the store answers again.

Replaying is safe because the store's transitions are idempotent: finishing, failing or cancelling an
evaluation that has already ended changes nothing, saving a span again stores nothing new, so a write
replayed after a crash between "the store took it" and "its file was removed" lands once. Writes for
one evaluation are replayed in the order they were made (start before finish), and once one of its
writes waits in the spool every later write for it queues behind.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from mlscope.contract.errors import StoreUnavailable, UserError
from mlscope.store import EvaluationNotFound, InvalidTransition, Store
from mlscope.workers.store_writes import StoreWrite, apply

__all__ = [
    "BACKOFF_MAX_S",
    "BACKOFF_MIN_S",
    "OPS",
    "DurableWrites",
    "Spool",
    "SpooledWrite",
    "StoreWrite",
    "spool_directory",
]

logger = logging.getLogger("mlscope.worker.spool")

# The Store methods a worker writes results with, by name (workers.store_writes.StoreWrite's values).
OPS = frozenset(op.value for op in StoreWrite)
# The flusher's wait between attempts while the store is away: doubling from the first to the last.
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 10.0
# How a datetime travels through JSON (the store wants aware datetimes back, not strings).
_DATETIME = "$datetime"
# A write's file: `<sequence>+<op>+<evaluation id, percent-encoded>.json`; "+" is never in the others.
_SEQUENCE_DIGITS = 12
_SUFFIX = ".json"
_TEMPORARY = ".tmp"
# File names longer than this are refused by common file systems (255 bytes), with room to spare.
_MAX_NAME = 240


def spool_directory(cache_dir: Path, agent_id: str) -> Path:
    """Where a worker keeps its spool: `<cache dir>/spool/<agent id>`, so a worker restarted under the
    same id finds what it left, and two workers on one host never share one."""
    return Path(cache_dir) / "spool" / quote(agent_id, safe="")


def adopt_spools(own: Path, store: Store, is_live: Callable[[str], bool]) -> int:
    """Write what gone agents of this host left in their spools, beside `own`: an agent restarted
    under another id (`<host>-2` after `<host>`) would never find its own. Best effort: a spool whose
    agent is alive is its own to flush, and a write the store cannot take now stays for later.

    Returns:
        How many writes the store took.
    """
    root = own.parent
    if not root.is_dir():
        return 0
    written = 0
    for directory in sorted(root.iterdir()):
        if directory == own or not directory.is_dir():
            continue
        agent_id = unquote(directory.name)
        try:
            if is_live(agent_id):
                continue
            spool = Spool(directory)
            if len(spool):
                done = spool.flush(store)
                written += done
                logger.info("spool of gone agent %s: %d writes stored", agent_id, done)
        except Exception as exc:
            logger.warning("spool of gone agent %s: %s", agent_id, exc)
    return written


class SpooledWrite:
    """One waiting write: `store.<op>(evaluation_id, **kwargs)` once read back."""

    def __init__(self, path: Path, sequence: int, op: StoreWrite, evaluation_id: str) -> None:
        self.path = path
        self.sequence = sequence
        self.op = op
        self.evaluation_id = evaluation_id

    def kwargs(self) -> dict[str, Any]:
        """The write's keyword arguments, datetimes decoded."""
        document = json.loads(self.path.read_text(encoding="utf-8"), object_hook=_decode)
        kwargs: dict[str, Any] = document["kwargs"]
        return kwargs

    def __repr__(self) -> str:
        return f"SpooledWrite({self.sequence}, {self.op}, {self.evaluation_id})"


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {_DATETIME: value.isoformat()}
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON-able")


def _decode(document: dict[str, Any]) -> Any:
    if len(document) == 1 and _DATETIME in document:
        return datetime.fromisoformat(document[_DATETIME])
    return document


def _fsync_directory(directory: Path) -> None:
    # A rename or unlink is durable only once the directory holding it is synced.
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class Spool:
    """The waiting writes, one file each in `directory` (created when missing).

    A new Spool on the directory an earlier worker used sees what it left: files are the only state.
    One worker uses a directory at a time (the directory is per agent id).

    Args:
        directory: where the writes are kept; the worker's `cache_dir / "spool" / <agent id>`.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # A temporary file left by a crash in the middle of `put` never became a write: its caller
        # was not told the write was kept.
        for leftover in self.directory.glob(f".*{_TEMPORARY}"):
            leftover.unlink(missing_ok=True)

    def _writes(self) -> list[SpooledWrite]:
        writes = []
        for path in self.directory.iterdir():
            name = path.name
            if name.startswith(".") or not name.endswith(_SUFFIX):
                continue
            sequence, _, rest = name[: -len(_SUFFIX)].partition("+")
            op, _, quoted = rest.partition("+")
            if not sequence.isdigit() or op not in OPS or not quoted:
                logger.warning("spool %s: %s is not a spooled write; left alone", self.directory, name)
                continue
            writes.append(SpooledWrite(path, int(sequence), StoreWrite(op), unquote(quoted)))
        return sorted(writes, key=lambda write: write.sequence)

    def writes(self) -> list[SpooledWrite]:
        """The waiting writes, oldest first."""
        with self._lock:
            return self._writes()

    def put(self, evaluation_id: str, op: StoreWrite, kwargs: dict[str, Any]) -> None:
        """Keep one store write, durably: once this returns, the write survives a crash.

        Args:
            evaluation_id: the evaluation it writes.
            op: the write (a StoreWrite, or its method name).
            kwargs: its keyword arguments besides the id; JSON-able, datetimes allowed.

        Raises:
            UserError: `op` is no StoreWrite, `evaluation_id` is empty or too long for a file name, or
                `kwargs` is not JSON-able (field "kwargs"); nothing is kept then.
        """
        op = StoreWrite.parse(op)
        quoted = quote(evaluation_id, safe="") if isinstance(evaluation_id, str) else ""
        if not quoted or len(quoted) > _MAX_NAME - _SEQUENCE_DIGITS - len(op) - 8:
            raise UserError(
                f"evaluation id {evaluation_id!r} cannot name a spooled write", field="evaluation_id"
            )
        try:
            body = json.dumps({"evaluation_id": evaluation_id, "op": op, "kwargs": kwargs}, default=_encode)
        except (TypeError, ValueError) as error:
            raise UserError(
                f"the {op} write for {evaluation_id} cannot be kept: {error}", field="kwargs"
            ) from None
        with self._lock:
            writes = self._writes()
            sequence = (writes[-1].sequence if writes else 0) + 1
            name = f"{sequence:0{_SEQUENCE_DIGITS}d}+{op}+{quoted}{_SUFFIX}"
            temporary = self.directory / f".{name}{_TEMPORARY}"
            with open(temporary, "w", encoding="utf-8") as file:
                file.write(body)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.directory / name)
            _fsync_directory(self.directory)

    def pending(self) -> list[str]:
        """The evaluations with writes waiting, each once, the one with the oldest write first."""
        return list(dict.fromkeys(write.evaluation_id for write in self.writes()))

    def has_pending(self, evaluation_id: str) -> bool:
        return any(write.evaluation_id == evaluation_id for write in self.writes())

    def __len__(self) -> int:
        """How many writes are waiting."""
        return len(self.writes())

    def _remove(self, write: SpooledWrite) -> None:
        with self._lock:
            write.path.unlink(missing_ok=True)
            _fsync_directory(self.directory)

    def flush(self, store: Store) -> int:
        """Replay the waiting writes, oldest first, removing each once the store took it.

        A write the store can never take is dropped with an error line, so one bad write cannot hold
        the spool forever: its evaluation is unknown to the store, or it was refused as invalid. A
        `start_evaluation` for an evaluation that has already ended is dropped quietly: the evaluation
        ended without it (cancelled meanwhile, or finished by a redelivery). An unexpected error keeps
        the write and skips the rest of that evaluation's writes until the next flush.

        Returns:
            How many writes the store took.

        Raises:
            Nothing from the store: the first StoreUnavailable ends the flush (the write kept).
        """
        written = 0
        stuck: set[str] = set()
        for write in self.writes():
            if write.evaluation_id in stuck:
                continue
            try:
                kwargs = write.kwargs()
            except (OSError, ValueError, KeyError) as error:
                logger.error(
                    "spool %s: %s is unreadable and was dropped: %s", self.directory, write.path, error
                )
                self._remove(write)
                continue
            try:
                apply(store, write.op, write.evaluation_id, kwargs)
            except StoreUnavailable:
                return written
            except EvaluationNotFound:
                logger.error(
                    "spooled %s for evaluation %s dropped: the store has no such evaluation",
                    write.op,
                    write.evaluation_id,
                )
            except InvalidTransition as error:
                logger.info("spooled %s for evaluation %s dropped: %s", write.op, write.evaluation_id, error)
            except UserError as error:
                logger.error(
                    "spooled %s for evaluation %s dropped: the store refused it: %s",
                    write.op,
                    write.evaluation_id,
                    error,
                )
            except Exception:
                logger.exception("spooled %s for evaluation %s failed; kept", write.op, write.evaluation_id)
                stuck.add(write.evaluation_id)
                continue
            else:
                written += 1
            self._remove(write)
        return written


class DurableWrites:
    """What the worker's pipeline calls instead of the store for its writes: the store now when it can,
    the spool when it cannot, and a flusher thread that empties the spool once the store is back.

    Args:
        store: the store the writes are for.
        spool: where writes wait.
        retry_s: the flusher's first wait after a failed flush; it doubles up to BACKOFF_MAX_S.
        log: where the two lines a reader of the worker's log needs go (the store went away with
            writes kept; the store came back and took them): the module's logger's warning by default.
    """

    def __init__(
        self,
        store: Store,
        spool: Spool,
        *,
        retry_s: float = BACKOFF_MIN_S,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.spool = spool
        self.retry_s = retry_s
        self._log = log or logger.warning
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # When the current outage began (the first write kept), for the "store back" line.
        self._outage_since: float | None = None
        self._state_lock = threading.Lock()

    def write(self, evaluation_id: str, op: StoreWrite, **kwargs: Any) -> bool:
        """`store.<op>(evaluation_id, **kwargs)` now, or kept in the spool for later.

        A write for an evaluation that already has writes waiting joins them, so its writes reach the
        store in the order they were made.

        Returns:
            True when the store took it now; False when it was kept (the store is unavailable).

        Raises:
            UserError: from the store (unknown evaluation, invalid transition, invalid field), or
                from `Spool.put`; what the store raises otherwise.
        """
        op = StoreWrite.parse(op)
        if not self.spool.has_pending(evaluation_id):
            try:
                apply(self.store, op, evaluation_id, kwargs)
                return True
            except StoreUnavailable as error:
                self._kept(evaluation_id, op, kwargs, reason=error.message)
                return False
        self._kept(evaluation_id, op, kwargs, reason=None)
        return False

    def _kept(
        self, evaluation_id: str, op: StoreWrite, kwargs: dict[str, Any], *, reason: str | None
    ) -> None:
        self.spool.put(evaluation_id, op, kwargs)
        with self._state_lock:
            first = self._outage_since is None
            if first:
                self._outage_since = time.monotonic()
        if first:
            why = f" ({reason})" if reason else ""
            self._log(
                f"store unreachable: {len(self.spool)} results kept in {self.spool.directory}, retrying{why}"
            )
        self._wake.set()

    def flush_now(self) -> int:
        """One flush; logs "store back" when it emptied the spool after an outage. Returns how many
        writes the store took."""
        written = self.spool.flush(self.store)
        if not len(self.spool):
            with self._state_lock:
                since, self._outage_since = self._outage_since, None
            # Said once per outage, also when every kept write turned out to be one to drop.
            if since is not None:
                self._log(
                    f"store back: {written} spooled writes stored after {time.monotonic() - since:.1f} s"
                )
        return written

    def _backoffs(self) -> Iterator[float]:
        wait = self.retry_s
        while True:
            yield wait
            wait = min(wait * 2, BACKOFF_MAX_S)

    def _run(self) -> None:
        backoff = self._backoffs()
        while not self._stopping.is_set():
            if not len(self.spool):
                # Nothing waits: sleep until a write is kept (or now and then, for a spool another
                # process filled).
                self._wake.wait(BACKOFF_MAX_S)
                self._wake.clear()
                backoff = self._backoffs()
                continue
            try:
                self.flush_now()
            except Exception:
                # The flusher must outlive any one failure; the writes stay in the spool.
                logger.exception("spool %s: flushing failed", self.spool.directory)
            if len(self.spool):
                self._stopping.wait(next(backoff))
            else:
                backoff = self._backoffs()

    def start_flusher(self) -> None:
        """Start the daemon thread that empties the spool; writes an earlier worker left are flushed
        first."""
        if self._thread is not None:
            return
        waiting = len(self.spool)
        if waiting:
            with self._state_lock:
                self._outage_since = time.monotonic()
            self._log(
                f"store writes waiting from before: {waiting} kept in {self.spool.directory}, writing them"
            )
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="mlscope-spool-flusher", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the flusher; writes still waiting stay in the spool for the next worker."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> DurableWrites:
        self.start_flusher()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
