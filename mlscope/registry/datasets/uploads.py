"""Uploaded datasets: a zip of a dataset folder (ImageFolder layout, or images and a labels file), kept
by its SHA-256 as `<hex>.zip` beside `<hex>.json`, its description, in the API's upload directory
(`<cache_dir>/dataset-uploads`) and in each worker's cache of the ones it fetched. Receiving, hashing,
capping and keeping are `mlscope.registry.uploads.UploadedFiles`'; what is particular to datasets is
here: the zip is opened, its members checked (no path leaves the folder, the uncompressed total is
under MLSCOPE_MAX_DATASET_BYTES), extracted to a scratch folder and scanned, and every image decoded,
before it is kept. A zip whose only member is one folder holding the dataset is read from inside it.
"""

from __future__ import annotations

import re
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from mlscope.contract.errors import UserError
from mlscope.contract.settings import DEFAULT_MAX_DATASET_BYTES
from mlscope.registry.datasets.folders import LABEL_FILES, check_image, scan_folder
from mlscope.registry.uploads import UploadedFile, UploadedFiles, clean_filename

__all__ = ["DATASET_REF", "DatasetFiles", "UploadedDataset", "extract_dataset_zip"]

DATASET_REF = re.compile(r"^sha256:([0-9a-f]{64})$")


@dataclass(frozen=True)
class UploadedDataset(UploadedFile):
    """One uploaded dataset (`UploadedFile`'s fields, and what its folder holds).

    Attributes:
        count: how many images.
        classes: the class names, by label index (empty when a labels file gives bare integers).
        layout: "imagefolder" or the labels file's name.
    """

    count: int = 0
    classes: list[str] = field(default_factory=list)
    layout: str = "imagefolder"


def _dataset_root(folder: Path) -> Path:
    """`folder`, or the one folder it holds when the zip wrapped the dataset in a folder of its own."""
    while True:
        children = [c for c in folder.iterdir() if not c.name.startswith((".", "__MACOSX"))]
        if len(children) != 1 or not children[0].is_dir():
            return folder
        inner = children[0]
        holds_dataset = any(c.is_dir() for c in inner.iterdir()) or any(
            (inner / n).is_file() for n in LABEL_FILES
        )
        if not holds_dataset:
            return folder  # a single class folder of images: the dataset is `folder` itself
        folder = inner


def extract_dataset_zip(archive: Path, into: Path, *, max_bytes: int, shown: str) -> Path:
    """Extract a dataset zip into the folder `into`, after checking its members.

    Args:
        archive: the zip file.
        into: an empty scratch folder.
        max_bytes: the most its members may hold together, uncompressed.
        shown: how messages name the zip.

    Returns:
        The dataset's root inside `into`.

    Raises:
        UserError: not a zip, a member whose path leaves the folder, or more than `max_bytes`
            uncompressed (field `dataset`).
    """
    try:
        with zipfile.ZipFile(archive) as opened:
            members = opened.infolist()
            for member in members:
                parts = PurePosixPath(member.filename.replace("\\", "/")).parts
                if member.filename.startswith(("/", "\\")) or ".." in parts or ":" in member.filename:
                    raise UserError(f"{shown}: member {member.filename!r} leaves the folder", field="dataset")
            total = sum(member.file_size for member in members)
            if total > max_bytes:
                raise UserError(
                    f"{shown}: its files are {total} bytes uncompressed, more than the {max_bytes} bytes "
                    "mlscope takes (MLSCOPE_MAX_DATASET_BYTES)",
                    field="dataset",
                )
            opened.extractall(into)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
        raise UserError(f"{shown}: not a readable zip file ({exc})", field="dataset") from None
    return _dataset_root(into)


class DatasetFiles(UploadedFiles[UploadedDataset]):
    """A directory of uploaded dataset zips, by SHA-256, each `<hex>.zip`."""

    SUFFIX = ".zip"
    KIND = "dataset"
    DESCRIPTION = UploadedDataset
    CAP_SETTING = "MLSCOPE_MAX_DATASET_BYTES"
    HOW_TO_UPLOAD = "upload a zip of the folder first (POST /api/v1/datasets)"

    def add(
        self, chunks: Iterable[bytes], *, filename: str | None = None, max_bytes: int | None = None
    ) -> tuple[UploadedDataset, bool]:
        """Receive an uploaded zip, check that it holds a dataset whose every image decodes, and keep it.

        Args:
            chunks: the zip's bytes, as they arrive.
            filename: what the uploader called it (the dataset's name is its stem).
            max_bytes: the most the zip, and its members uncompressed, may hold (default 2 GiB).

        Returns:
            The dataset, and whether it is new (False: the same bytes were uploaded before).

        Raises:
            UploadTooLarge: the zip is larger than `max_bytes`.
            UserError: not a zip, not a dataset folder, or an image that does not decode, naming the
                member (field `file`).
        """
        cap = DEFAULT_MAX_DATASET_BYTES if max_bytes is None else max_bytes
        with self.receive(chunks, max_bytes=cap) as partial:
            known = self.find(partial.sha256)
            if known is not None:
                return known, False
            name = clean_filename(filename, partial.sha256, ".zip")
            called = name if filename else "the uploaded file"
            with tempfile.TemporaryDirectory(prefix=".check-", dir=self.directory) as scratch:
                try:
                    root = extract_dataset_zip(partial.path, Path(scratch), max_bytes=cap, shown=called)
                    folder = scan_folder(root)
                    for file in folder.files:
                        check_image(file, f"{called}: {file.relative_to(root).as_posix()}")
                except UserError as exc:
                    raise UserError(exc.message.replace(str(Path(scratch)), called), field="file") from None
            dataset = UploadedDataset(
                sha256=partial.sha256,
                size=partial.size,
                filename=name,
                name=PurePosixPath(name).stem,
                uploaded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                count=len(folder.files),
                classes=list(folder.classes),
                layout=folder.layout,
            )
            return self.keep(partial, dataset), True
