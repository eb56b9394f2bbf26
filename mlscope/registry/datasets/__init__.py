"""Datasets as references: a name, a folder or an upload, resolved to a materialised folder in the cache.

    digits, sample_photos    a built-in (`BUILTIN_DATASETS`; `builtin.py`)
    ./my-images/             a folder on this machine, ImageFolder layout or with a labels file
                             (`folders.py`); never over HTTP
    sha256:<hex>             a zip of such a folder uploaded to a farm's API (`uploads.py`)

`resolve_dataset` materialises each once, in the format `mlscope.runtime.data` reads, under
`<cache_dir>/datasets/`: a built-in by its name and recipe version, a folder and an upload by the
SHA-256 of their content (an edited folder is materialised again). A lock per entry keeps two
processes from writing the same one. Performance runs need no dataset: they feed synthetic inputs.
"""

from __future__ import annotations

import dataclasses
import fcntl
import tempfile
from collections.abc import Callable
from pathlib import Path

from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings
from mlscope.registry.datasets.builtin import BUILTIN_DATASETS, BUILTINS, RECIPE
from mlscope.registry.datasets.folders import FolderDataset, check_image, scan_folder
from mlscope.registry.datasets.uploads import DATASET_REF, extract_dataset_zip
from mlscope.runtime.data import DatasetRef, read_meta, write_dataset

__all__ = [
    "BUILTIN_DATASETS",
    "DATASET_REF",
    "DatasetUploads",
    "check_dataset_reference",
    "dataset_kind",
    "materialise_folder",
    "resolve_dataset",
]

# What resolves `sha256:<hex>` to the uploaded zip on this machine: the API's DatasetFiles.lookup, or
# a worker's DatasetFetcher (which fetches it from the API first).
DatasetUploads = Callable[[str], Path]


def _looks_like_path(reference: str) -> bool:
    return "/" in reference or "\\" in reference or reference.startswith((".", "~"))


def dataset_kind(reference: str) -> str:
    """What a dataset reference names: "builtin", "upload" or "folder".

    Raises:
        UserError: an unknown name (the message lists the built-ins; field `dataset`).
    """
    if reference in BUILTINS:
        return "builtin"
    if DATASET_REF.match(reference):
        return "upload"
    if _looks_like_path(reference) or Path(reference).is_dir():
        return "folder"
    raise UserError(
        f"unknown dataset {reference!r}: a built-in ({', '.join(sorted(BUILTINS))}), a folder of images "
        "(./my-images/: one sub-folder per class, or a labels.txt), or an uploaded sha256:<hex>",
        field="dataset",
    )


def check_dataset_reference(
    reference: str, *, local_files: bool, uploads: DatasetUploads | None = None
) -> None:
    """Validate a dataset reference cheaply (no image is read), as admission does.

    Args:
        reference: a built-in name, a folder path, or `sha256:<hex>`.
        local_files: whether a folder on this machine may be named (False over HTTP).
        uploads: when given, an upload's digest is looked up with it (it raises when unknown).

    Raises:
        UserError: an unknown name, a path where paths mean nothing, a missing folder, or an unknown
            upload; field `dataset`.
    """
    kind = dataset_kind(reference)
    if kind == "folder":
        if not local_files:
            raise UserError(
                f"{reference}: a path on your machine means nothing here; upload the folder as a zip "
                "(POST /api/v1/datasets) and name it by the sha256:<hex> it answers",
                field="dataset",
            )
        if not Path(reference).expanduser().is_dir():
            raise UserError(f"{reference}: no such folder", field="dataset")
    elif kind == "upload" and uploads is not None:
        uploads(reference.removeprefix("sha256:"))


def _reuse(path: Path) -> DatasetRef | None:
    if not (path / "meta.json").is_file():
        return None
    try:
        meta = read_meta(path)
    except UserError:
        return None
    return DatasetRef(
        name=meta["name"],
        path=str(path),
        sha256=meta["sha256"],
        count=int(meta["count"]),
        task=meta["task"],
        kind=meta["kind"],
        classes=tuple(meta.get("classes") or ()),
    )


def _materialised(path: Path, build: Callable[[Path], DatasetRef]) -> DatasetRef:
    """The dataset at `path`, built by `build(path)` unless a previous run did (under a lock)."""
    found = _reuse(path)
    if found is not None:
        return found
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _reuse(path)  # another process may have built it while this one waited
        return found if found is not None else build(path)


def _over_cap(what: str, size: int, cap: int) -> UserError:
    return UserError(
        f"{what} is {size} bytes, more than the {cap} bytes mlscope takes (MLSCOPE_MAX_DATASET_BYTES)",
        field="dataset",
    )


def materialise_folder(
    folder: FolderDataset, path: Path, *, name: str, shown: str | None = None
) -> DatasetRef:
    """Check that every image of a scanned folder decodes, then write the dataset at `path`.

    Args:
        folder: the scanned folder.
        path: where to write it.
        name: the dataset's name.
        shown: how messages name the folder's root (its path when None).

    Raises:
        UserError: an image does not decode (naming the file).
    """
    for file in folder.files:
        relative = file.relative_to(folder.root).as_posix()
        check_image(file, f"{shown}/{relative}" if shown else None)
    return write_dataset(
        path,
        name=name,
        kind="image",
        task="image_classification",
        samples=(file.read_bytes() for file in folder.files),
        labels=folder.labels,
        classes=folder.classes,
        extra={"layout": folder.layout},
    )


def resolve_dataset(
    reference: str,
    cache_dir: Path,
    *,
    limit: int | None = None,
    uploads: DatasetUploads | None = None,
    max_bytes: int | None = None,
) -> DatasetRef:
    """The materialised dataset a reference names, materialised under `<cache_dir>/datasets/` first
    when it is not there yet.

    Args:
        reference: a built-in name, a folder on this machine, or `sha256:<hex>` (an uploaded zip).
        cache_dir: the cache (MLSCOPE_CACHE_DIR).
        limit: evaluate only the first `limit` samples (None: all).
        uploads: resolves an upload's digest to its zip on this machine; needed for `sha256:<hex>`.
        max_bytes: the largest dataset taken, in bytes; MLSCOPE_MAX_DATASET_BYTES when None.

    Returns:
        The reference to the materialised folder, with `limit` set.

    Raises:
        UserError: an unknown name, a folder or zip that is not a dataset (an image that does not
            decode, an unknown label, a labels file naming a missing file, nothing in it), a dataset
            over the cap, an unknown upload; field `dataset`.
    """
    if limit is not None and limit < 1:
        raise UserError(f"limit must be at least 1; got {limit}", field="limit")
    cap = max_bytes if max_bytes is not None else load_settings().max_dataset_bytes
    base = Path(cache_dir) / "datasets"
    kind = dataset_kind(reference)
    if kind == "builtin":
        ref = _materialised(base / "builtin" / f"{reference}-r{RECIPE}", BUILTINS[reference].build)
    elif kind == "folder":
        root = Path(reference).expanduser()
        folder = scan_folder(root)
        size = folder.size
        if size > cap:
            raise _over_cap(f"dataset {reference}", size, cap)
        name = root.resolve().name
        ref = _materialised(
            base / "folder" / folder.digest(), lambda path: materialise_folder(folder, path, name=name)
        )
        ref = dataclasses.replace(ref, name=name)
    else:
        if uploads is None:
            raise UserError(
                f"{reference}: uploaded datasets are resolved by a farm's workers and API only",
                field="dataset",
            )
        digest = reference.removeprefix("sha256:")
        archive = uploads(digest)

        def build(path: Path) -> DatasetRef:
            with tempfile.TemporaryDirectory(prefix=".extract-", dir=path.parent) as scratch:
                root = extract_dataset_zip(archive, Path(scratch), max_bytes=cap, shown=reference)
                try:
                    folder = scan_folder(root)
                except UserError as exc:
                    raise UserError(exc.message.replace(str(root), reference), field="dataset") from None
                return materialise_folder(folder, path, name=reference, shown=reference)

        ref = _materialised(base / "upload" / digest, build)
    return dataclasses.replace(ref, limit=limit)
