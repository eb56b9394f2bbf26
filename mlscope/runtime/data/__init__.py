"""Datasets as the predictor process reads them: one materialised, content-addressed folder each.

The registry (`mlscope.registry.datasets`) turns a dataset reference (a built-in name, a local
folder, an upload) into such a folder in the cache, once; the predictor process (here, in a
container too: the cache is mounted) streams it in a fixed order, in batches, without importing
anything but numpy. Layout of a folder:

    meta.json     {"format": 1, "name", "kind", "task", "count", "classes", "sha256", ...}
    samples.bin   the samples' bytes, one after another (an encoded image for kind "image",
                  UTF-8 text for kind "text", raw array bytes for kind "array": meta's "shape"
                  and "dtype" say how to read them)
    offsets.npy   int64, count + 1: sample i is samples.bin[offsets[i]:offsets[i + 1]]
    labels.npy    int64, count: the class index of each sample, -1 where there is none
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlscope.contract.errors import UserError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["FORMAT", "KINDS", "Batch", "DatasetRef", "iter_batches", "read_meta", "write_dataset"]

FORMAT = 1
KINDS = ("image", "text", "array")


@dataclass(frozen=True)
class DatasetRef:
    """A materialised dataset, as a job carries it.

    Attributes:
        name: what the user called it (`digits`, a folder's name, `sha256:<hex>`).
        path: the materialised folder (the predictor's view of the cache).
        sha256: the content digest of the folder's samples, labels and classes.
        count: how many samples it holds.
        limit: evaluate only the first `limit` samples; None for all.
        task: what its labels mean (`image_classification`, ...).
        kind: how a sample is stored (KINDS).
        classes: the class names, by label index (may be empty).
    """

    name: str
    path: str
    sha256: str
    count: int
    limit: int | None = None
    task: str = "image_classification"
    kind: str = "image"
    classes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def used(self) -> int:
        """How many samples an evaluation reads."""
        return self.count if self.limit is None else min(self.limit, self.count)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["classes"] = list(self.classes)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DatasetRef:
        values = dict(data)
        values["classes"] = tuple(values.get("classes") or ())
        return cls(**values)


@dataclass(frozen=True)
class Batch:
    """Consecutive samples: their raw values (bytes, str or arrays, by kind) and labels."""

    start: int
    samples: list[Any]
    labels: np.ndarray


def read_meta(path: Path) -> dict[str, Any]:
    """The folder's meta.json.

    Raises:
        UserError: the folder holds no materialised dataset of this format.
    """
    try:
        meta: dict[str, Any] = json.loads((path / "meta.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} holds no materialised dataset (meta.json: {exc})") from None
    if meta.get("format") != FORMAT:
        raise UserError(f"{path}: dataset format {meta.get('format')!r}; this mlscope reads {FORMAT}")
    return meta


def _decode_sample(raw: bytes, meta: dict[str, Any]) -> Any:
    kind = meta["kind"]
    if kind == "image":
        return raw
    if kind == "text":
        return raw.decode("utf-8")
    import numpy as np

    return np.frombuffer(raw, dtype=np.dtype(meta["dtype"])).reshape(meta["shape"])


def iter_batches(ref: DatasetRef, batch_size: int) -> Iterator[Batch]:
    """The dataset's first `ref.used` samples in stored order, `batch_size` at a time (the last
    batch may be smaller). Samples are read from a memory map: the folder is never loaded whole.

    Raises:
        UserError: the folder is missing, of another format, or not the content `ref` names.
    """
    path = Path(ref.path)
    meta = read_meta(path)
    if meta.get("sha256") != ref.sha256:
        raise UserError(f"dataset {ref.name!r} at {path} has changed: expected {ref.sha256[:12]}…")
    import numpy as np

    offsets = np.load(path / "offsets.npy")
    labels = np.load(path / "labels.npy")
    blob = np.memmap(path / "samples.bin", dtype=np.uint8, mode="r") if offsets[-1] else np.zeros(0, np.uint8)
    for start in range(0, ref.used, batch_size):
        stop = min(start + batch_size, ref.used)
        samples = [_decode_sample(bytes(blob[offsets[i] : offsets[i + 1]]), meta) for i in range(start, stop)]
        yield Batch(start, samples, np.asarray(labels[start:stop], dtype=np.int64))


def write_dataset(
    path: Path,
    *,
    name: str,
    kind: str,
    task: str,
    samples: Iterable[bytes],
    labels: Sequence[int],
    classes: Sequence[str] = (),
    extra: dict[str, Any] | None = None,
) -> DatasetRef:
    """Write a dataset folder at `path` (replaced whole, so a reader never sees half of one).

    Args:
        samples: each sample's bytes, in the order an evaluation reads them.
        labels: one class index per sample (-1 for none).
        extra: more meta.json keys ("shape" and "dtype" for kind "array", a source description).

    Returns:
        The reference to the written folder (no limit).
    """
    if kind not in KINDS:
        raise ValueError(f"dataset kind must be one of {', '.join(KINDS)}; got {kind!r}")
    import numpy as np  # here, not at the top: admitting a request reads this module, not its arrays

    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    offsets = [0]
    with open(partial / "samples.bin", "wb") as out:
        for sample in samples:
            out.write(sample)
            digest.update(len(sample).to_bytes(8, "little"))
            digest.update(sample)
            offsets.append(offsets[-1] + len(sample))
    label_array = np.asarray(labels, dtype=np.int64)
    if len(label_array) != len(offsets) - 1:
        raise ValueError(f"{len(offsets) - 1} samples but {len(label_array)} labels")
    digest.update(label_array.tobytes())
    digest.update(json.dumps([kind, task, list(classes), extra or {}], sort_keys=True).encode())
    np.save(partial / "offsets.npy", np.asarray(offsets, dtype=np.int64))
    np.save(partial / "labels.npy", label_array)
    sha256 = digest.hexdigest()
    meta = {
        "format": FORMAT,
        "name": name,
        "kind": kind,
        "task": task,
        "count": len(label_array),
        "classes": list(classes),
        "sha256": sha256,
        **(extra or {}),
    }
    (partial / "meta.json").write_text(json.dumps(meta, indent=1))
    if path.exists():
        shutil.rmtree(path)
    os.replace(partial, path)
    return DatasetRef(name, str(path), sha256, len(label_array), None, task, kind, tuple(classes))
