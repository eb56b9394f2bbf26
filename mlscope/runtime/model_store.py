"""The per-machine model store (TrIMS warm starts): each model's weights written once, on shared
memory, and mapped read-only by every predictor process that evaluates it.

An entry is a directory under the store's root, named by what determines the weights (framework,
manifest SHA-256, seed, and the framework's own variant: ONNX Runtime's optimisation level):

    <root>/store.lock            exclusive while an entry is added or evicted, shared while one is opened
    <root>/<entry>/weights.bin   every tensor's bytes, each at a 64-byte aligned offset
    <root>/<entry>/index.json    name -> dtype, shape, offset, size; named blobs; the entry's files
    <root>/<entry>/<file>        a framework's own model files, opened by path (ONNX Runtime's graph and
                                 its external data, pre-packed weights included)
    <root>/<entry>/ref.lock      a shared flock per process that maps the entry: its reference count
    <root>/<entry>/used          touched on every open: the LRU order

A reference is a shared `flock` the kernel drops when its process ends, however it ends, so a killed
predictor leaves no count behind. Eviction takes the entry's lock exclusively without waiting: it
succeeds only when no process maps the entry. Adding an entry that would pass the budget evicts the
least recently used unreferenced ones first; a model larger than the whole budget is refused before
anything is evicted or written.

Framework-free: the adapters (`predictors/<framework>/warm.py`) turn tensors into bytes and mapped
bytes back into tensors.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import mmap
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlscope.contract.errors import MlscopeError, UserError

__all__ = [
    "ALIGNMENT",
    "MappedModel",
    "ModelStore",
    "ModelStoreBusy",
    "StoredTensor",
    "WeightsToStore",
    "entry_key",
]

ALIGNMENT = 64  # bytes: a cache line, and what SIMD kernels want a weight to start on
# Linux: the page tables filled when the entry is mapped (from memory: the pages are shared memory's),
# so a warm load is complete when it returns, and its first inference takes no page faults.
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_MB = 2**20


class ModelStoreBusy(MlscopeError):
    """The model fits the budget, but the models that fill it are all in use: nothing was evicted
    and nothing written (the evaluation carries on without a warm start, saying why)."""


def entry_key(framework: str, manifest_sha256: str, seed: int, variant: str = "", name: str = "") -> str:
    """The entry's directory name: readable (framework, model name) and exact (a digest of what
    determines the weights)."""
    digest = hashlib.sha256(
        json.dumps([framework, manifest_sha256, seed, variant], separators=(",", ":")).encode()
    ).hexdigest()[:24]
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{framework}-{name}")[:64]
    return f"{readable}-{digest}"


@dataclass(frozen=True)
class StoredTensor:
    """One tensor's place in `weights.bin`: `dtype` is the framework adapter's own name for it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class WeightsToStore:
    """What a loaded predictor hands the store: (name, dtype, shape, C-contiguous bytes) per tensor,
    their total size, named blobs stored with them (a graph stripped of its weights), and `files`: a
    directory of files that join the entry as they are, for a framework that opens its model by path
    and maps its weights itself (ONNX Runtime). The store takes that directory: its files are moved
    into the entry (or dropped, when another process published the entry first) and it is removed.
    `size_bytes` counts the tensors only; the store adds the blobs and files."""

    tensors: list[tuple[str, str, tuple[int, ...], memoryview]]
    size_bytes: int
    blobs: dict[str, bytes] = field(default_factory=dict)
    files: Path | None = None


@dataclass
class MappedModel:
    """An entry mapped read-only into this process and referenced (its shared lock held) until
    `close`. The tensors' memory is the page cache's: every process mapping it shares the pages."""

    key: str
    path: Path
    tensors: dict[str, StoredTensor]
    blobs: dict[str, StoredTensor]
    size_bytes: int
    published: bool
    files: dict[str, int] = field(default_factory=dict)  # name -> size in bytes
    _mapping: mmap.mmap | None = field(repr=False, default=None)
    _reference: int | None = field(repr=False, default=None)

    def view(self, name: str) -> memoryview:
        """The bytes of tensor `name`, in place (no copy)."""
        return self._slice(self.tensors[name])

    def blob(self, name: str) -> bytes:
        """A named blob's bytes (a copy: blobs are small, a stripped graph)."""
        return bytes(self._slice(self.blobs[name]))

    def _slice(self, item: StoredTensor) -> memoryview:
        if self._mapping is None:
            raise ValueError(f"model store entry {self.key} is closed")
        return memoryview(self._mapping)[item.offset : item.offset + item.nbytes]

    @property
    def weights_file(self) -> Path:
        return self.path / "weights.bin"

    def file(self, name: str) -> Path:
        """The path of one of the entry's files (see `WeightsToStore.files`): a framework opens it
        itself, and it stays in place while this entry is referenced."""
        if name not in self.files:
            raise KeyError(f"model store entry {self.key} has no file {name!r}")
        return self.path / name

    def close(self) -> None:
        """Drop this process's reference. The mapping itself lives as long as a tensor uses it."""
        if self._reference is not None:
            os.close(self._reference)  # releases the shared flock
            self._reference = None
        if self._mapping is not None:
            with contextlib.suppress(BufferError):  # tensors still view it: unmapped when they go
                self._mapping.close()
            self._mapping = None


def _aligned(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT


@contextlib.contextmanager
def _locked(path: Path, operation: int) -> Iterator[None]:
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(descriptor, operation)
        yield
    finally:
        os.close(descriptor)


def _size_of(entry: Path) -> int:
    """The bytes an entry holds: weights.bin and its files (index.json and the lock files are tiny)."""
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for item in entry.iterdir():
            with contextlib.suppress(FileNotFoundError):
                total += item.stat().st_size
    return total


def _files_in(folder: Path | None) -> dict[str, int]:
    if folder is None:
        return {}
    return {item.name: item.stat().st_size for item in sorted(folder.iterdir()) if item.is_file()}


class ModelStore:
    """The store at `directory`, holding at most `budget_bytes` of weights.

    Args:
        directory: the store's root (created on first use, readable by every user of the machine's
            predictors).
        budget_bytes: the most bytes of weights the store holds; > 0.
    """

    def __init__(self, directory: Path, budget_bytes: int) -> None:
        if budget_bytes <= 0:
            raise UserError(
                f"setting model_store_mb: the model store's budget must be > 0 MB, "
                f"not {budget_bytes / _MB:g}",
                field="model_store_mb",
            )
        self.directory = Path(directory)
        self.budget_bytes = budget_bytes

    def _prepare(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        return self.directory / "store.lock"

    def entries(self) -> list[tuple[str, int, float, bool]]:
        """Every entry: (key, size in bytes, last use as a timestamp, referenced by a process now)."""
        found: list[tuple[str, int, float, bool]] = []
        if not self.directory.is_dir():
            return found
        for entry in sorted(self.directory.iterdir()):
            if not (entry / "index.json").is_file():
                continue
            try:
                used = (entry / "used").stat().st_mtime
            except FileNotFoundError:
                used = 0.0
            found.append((entry.name, _size_of(entry), used, self._referenced(entry)))
        return found

    @staticmethod
    def _referenced(entry: Path) -> bool:
        try:
            descriptor = os.open(entry / "ref.lock", os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(descriptor)  # releases the exclusive lock, when it was taken
        return False

    def open(self, key: str) -> MappedModel | None:
        """The entry `key`, mapped and referenced; None when the store does not hold it."""
        lock = self._prepare()
        with _locked(lock, fcntl.LOCK_SH):  # no eviction between finding the entry and referencing it
            entry = self.directory / key
            if not (entry / "index.json").is_file():
                return None
            return self._map(entry, published=False)

    def _map(self, entry: Path, *, published: bool) -> MappedModel:
        index = json.loads((entry / "index.json").read_text())
        reference = os.open(entry / "ref.lock", os.O_RDONLY)  # flock needs no write access
        fcntl.flock(reference, fcntl.LOCK_SH)
        (entry / "used").touch()
        with open(entry / "weights.bin", "rb") as weights:
            size = os.fstat(weights.fileno()).st_size
            mapping = (
                mmap.mmap(weights.fileno(), size, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ)
                if size
                else None
            )
        files = {name: int(nbytes) for name, nbytes in index.get("files", {}).items()}

        def records(kind: str) -> dict[str, StoredTensor]:
            return {
                name: StoredTensor(name, item["dtype"], tuple(item["shape"]), item["offset"], item["nbytes"])
                for name, item in index[kind].items()
            }

        return MappedModel(
            key=entry.name,
            path=entry,
            tensors=records("tensors"),
            blobs=records("blobs"),
            size_bytes=size + sum(files.values()),
            published=published,
            files=files,
            _mapping=mapping,
            _reference=reference,
        )

    def publish(
        self, key: str, weights: WeightsToStore, description: dict[str, Any] | None = None
    ) -> MappedModel:
        """Add the entry `key` (unless another process added it first) and map it.

        Args:
            key: from `entry_key`.
            weights: the tensors and blobs; their size is checked against the budget before anything
                is evicted or written.
            description: what the entry holds, for people (model name, framework, ...).

        Raises:
            UserError: the model is larger than the whole budget (field `model_store_mb`).
            ModelStoreBusy: it fits the budget, but not beside the models in use now.
        """
        try:
            return self._publish(key, weights, description)
        finally:
            if weights.files is not None:  # the store took it: moved into the entry, or not needed
                shutil.rmtree(weights.files, ignore_errors=True)

    def _publish(self, key: str, weights: WeightsToStore, description: dict[str, Any] | None) -> MappedModel:
        blobs, files = weights.blobs, _files_in(weights.files)
        size_bytes = weights.size_bytes + sum(files.values())
        total = size_bytes + sum(len(b) for b in blobs.values()) + ALIGNMENT * (len(blobs) + 1)
        if size_bytes > self.budget_bytes:
            raise UserError(
                f"the model's weights take {size_bytes / _MB:.1f} MB in the store, more than the whole "
                f"model store budget of {self.budget_bytes / _MB:.1f} MB (setting model_store_mb): raise "
                "the budget or unset it to run without warm starts",
                field="model_store_mb",
            )
        lock = self._prepare()
        with _locked(lock, fcntl.LOCK_EX):
            entry = self.directory / key
            if (entry / "index.json").is_file():
                return self._map(entry, published=False)
            self._remove_leftovers()
            self._make_room(total)
            partial = Path(tempfile.mkdtemp(prefix=f".partial-{os.getpid()}-", dir=self.directory))
            try:
                self._write(partial, weights.tensors, blobs, description or {})
                if weights.files is not None:
                    self._take_files(partial, weights.files, files)
                os.chmod(partial, 0o755)
                partial.rename(entry)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            return self._map(entry, published=True)

    @staticmethod
    def _take_files(partial: Path, folder: Path, files: dict[str, int]) -> None:
        """Move `folder`'s files into the partial entry (a rename on one file system, else a copy) and
        list them in its index."""
        reserved = {"weights.bin", "index.json", "ref.lock", "used"}
        clash = reserved & set(files)
        if clash:
            raise ValueError(f"an entry's files cannot be named {', '.join(sorted(clash))}")
        for name in files:
            shutil.move(folder / name, partial / name)
            os.chmod(partial / name, 0o644)
        index_file = partial / "index.json"
        index = json.loads(index_file.read_text())
        index["files"] = files
        index_file.write_text(json.dumps(index))

    @staticmethod
    def _write(
        partial: Path,
        tensors: Iterable[tuple[str, str, tuple[int, ...], memoryview]],
        blobs: dict[str, bytes],
        description: dict[str, Any],
    ) -> None:
        index: dict[str, Any] = {
            "description": description,
            "alignment": ALIGNMENT,
            "tensors": {},
            "blobs": {},
            "files": {},
        }
        offset = 0
        with open(partial / "weights.bin", "wb") as weights:

            def put(data: memoryview | bytes) -> tuple[int, int]:
                nonlocal offset
                start = _aligned(offset)
                weights.write(b"\0" * (start - offset))
                view = memoryview(data).cast("B")
                weights.write(view)
                offset = start + view.nbytes
                return start, view.nbytes

            for name, dtype, shape, data in tensors:
                start, nbytes = put(data)
                index["tensors"][name] = {
                    "dtype": dtype,
                    "shape": list(shape),
                    "offset": start,
                    "nbytes": nbytes,
                }
            for name, blob in blobs.items():
                start, nbytes = put(blob)
                index["blobs"][name] = {
                    "dtype": "bytes",
                    "shape": [nbytes],
                    "offset": start,
                    "nbytes": nbytes,
                }
        (partial / "index.json").write_text(json.dumps(index))
        (partial / "ref.lock").touch()
        (partial / "used").touch()

    def _make_room(self, needed: int) -> None:
        """Evict the least recently used unreferenced entries until `needed` more bytes fit."""
        entries = sorted(self.entries(), key=lambda item: item[2])
        excess = sum(size for _, size, _, _ in entries) + needed - self.budget_bytes
        for key, size, _, _ in entries:
            if excess <= 0:
                return
            if self._evict(self.directory / key):
                excess -= size
        if excess > 0:
            in_use = ", ".join(
                f"{key} ({size / _MB:.1f} MB)" for key, size, _, referenced in entries if referenced
            )
            raise ModelStoreBusy(
                f"the model store's budget of {self.budget_bytes / _MB:.1f} MB is taken by models in use "
                f"({in_use}); {needed / _MB:.1f} MB more do not fit"
            )

    @staticmethod
    def _evict(entry: Path) -> bool:
        """Remove the entry if no process references it; True when it was removed."""
        try:
            descriptor = os.open(entry / "ref.lock", os.O_RDONLY)
        except FileNotFoundError:
            shutil.rmtree(entry, ignore_errors=True)
            return True
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return False
        try:
            # Renamed first, so no reader finds a half-removed entry under its key.
            doomed = entry.with_name(f".evicted-{os.getpid()}-{entry.name}")
            entry.rename(doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        finally:
            os.close(descriptor)
        return True

    def _remove_leftovers(self) -> None:
        """Partial entries of processes that died while writing one (the store lock is held)."""
        for leftover in self.directory.glob(".partial-*"):
            pid = leftover.name.split("-")[1]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(leftover, ignore_errors=True)
        for leftover in self.directory.glob(".evicted-*"):
            shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
