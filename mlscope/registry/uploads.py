"""Uploaded models: ONNX files kept by their SHA-256, each as `<hex>.onnx` beside `<hex>.json`, its
description (the name it was uploaded under, its size, its graph's inputs and outputs). The api's
upload directory (`<cache_dir>/uploads`) and each worker's cache of the models it fetched
(`<cache_dir>/models`) are such directories.

A file arrives as a stream of bytes. It is written to a hidden partial file in the directory, hashed
and counted as it comes, checked, and only then renamed to its final name; a failure at any point (too
large, not ONNX, a digest that is not the one expected, the sender gone) removes the partial file.
Renames are atomic, so no reader ever sees part of a file under its final name, and two writers of
the same file both leave it whole.

`UploadedFiles` is that directory for any kind of file (the dataset zips of
`mlscope.registry.datasets.uploads` too); `ModelFiles` adds what is particular to ONNX models.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Generic, TypeVar

from mlscope.contract.errors import UserError
from mlscope.registry.onnx_files import manifest_name, read_signature
from mlscope.runtime.predictors.files import UPLOAD_URL, content_addressed

__all__ = [
    "DigestMismatch",
    "ModelFiles",
    "Partial",
    "UploadTooLarge",
    "UploadedFile",
    "UploadedFiles",
    "UploadedModel",
    "clean_filename",
    "upload_ref",
]

_MAX_FILENAME = 200


def upload_ref(digest: str) -> str:
    """The model reference of the upload whose SHA-256 is `digest`: `sha256:<hex>`."""
    return f"sha256:{digest}"


class UploadTooLarge(UserError):
    """The file is larger than the most accepted (field `file`).

    Attributes:
        max_bytes: the cap.
    """

    def __init__(self, max_bytes: int, setting: str = "MLSCOPE_MAX_UPLOAD_BYTES") -> None:
        super().__init__(
            f"the file is larger than {max_bytes} bytes, the most this API accepts (its {setting})",
            field="file",
        )
        self.max_bytes = max_bytes


class DigestMismatch(UserError):
    """The bytes received do not have the SHA-256 they were asked for by (field `model` or `dataset`)."""


_File = TypeVar("_File", bound="UploadedFile")


@dataclass(frozen=True)
class UploadedFile:
    """One uploaded file, as its sidecar describes it and the API answers it.

    Attributes:
        sha256: the file's SHA-256 (64 lowercase hex digits).
        size: its size in bytes.
        filename: the name it was uploaded under (its base name only).
        name: the name it gets in results: the file name's stem, lowercased, other characters as '-'.
        uploaded_at: when it was first uploaded (ISO 8601, UTC).
    """

    sha256: str
    size: int
    filename: str
    name: str
    uploaded_at: str

    @property
    def ref(self) -> str:
        return upload_ref(self.sha256)

    def to_dict(self) -> dict[str, Any]:
        """The API's answer: `ref` first, then every field."""
        return {"ref": self.ref, **asdict(self)}

    @classmethod
    def from_dict(cls: type[_File], data: dict[str, Any]) -> _File:
        known = {name for name in cls.__dataclass_fields__}
        return cls(**{key: value for key, value in data.items() if key in known})


@dataclass(frozen=True)
class UploadedModel(UploadedFile):
    """One uploaded model (`UploadedFile`'s fields, and its graph's signature).

    Attributes:
        inputs: the graph's inputs, {name, dtype, shape}; a dynamic axis is its symbol ("" unnamed).
        outputs: the graph's output names.
        opset: the graph's ONNX opset, when it names one.
    """

    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    opset: int | None = None


@dataclass(frozen=True)
class Partial:
    """A file being received: its partial path in the directory, its SHA-256 and size."""

    path: Path
    sha256: str
    size: int


def clean_filename(filename: str | None, digest: str, suffix: str = ".onnx") -> str:
    """The base name of what the client called the file (no directories), or `upload-<hex12><suffix>`."""
    base = PurePosixPath((filename or "").replace("\\", "/")).name.strip()
    base = "".join(c for c in base if c.isprintable())[:_MAX_FILENAME]
    return base if base and base not in (".", "..") else f"upload-{digest[:12]}{suffix}"


# mkstemp makes files only their owner may read; a kept model is as readable as any file written
# here (a docker runner's container, running as another user, reads the worker's cache).
_KEPT_MODE = 0o644


def _write_atomically(path: Path, text: str) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, _KEPT_MODE)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


Described = TypeVar("Described", bound=UploadedFile)


class UploadedFiles(ABC, Generic[Described]):
    """A directory of uploaded files of one kind, by SHA-256 (see the module's docstring).

    Args:
        directory: the directory; made when a first file arrives.
    """

    SUFFIX: ClassVar[str]
    # What the files are ("model"), the request field that names them, and the setting that caps them.
    KIND: ClassVar[str]
    DESCRIPTION: ClassVar[type[Any]]  # the `Described` class (a ClassVar cannot name a type variable)
    CAP_SETTING: ClassVar[str] = "MLSCOPE_MAX_UPLOAD_BYTES"
    HOW_TO_UPLOAD: ClassVar[str]

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, digest: str) -> Path:
        """Where the file with this SHA-256 is kept (whether or not it is there)."""
        return self.directory / f"{digest}{self.SUFFIX}"

    def sidecar(self, digest: str) -> Path:
        return self.directory / f"{digest}.json"

    def find(self, digest: str) -> Described | None:
        """The file with this SHA-256, or None when it is not kept here."""
        if not UPLOAD_URL.match(upload_ref(digest)) or not self.path(digest).is_file():
            return None
        try:
            data = json.loads(self.sidecar(digest).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return self.DESCRIPTION.from_dict(data) if isinstance(data, dict) else None

    def lookup(self, digest: str) -> Path:
        """The file with this SHA-256 (what resolves `sha256:<hex>` on the API).

        Raises:
            UserError: no such file was uploaded (field `KIND`).
        """
        if self.find(digest) is None:
            raise UserError(
                f"{upload_ref(digest)}: no {self.KIND} with this SHA-256 was uploaded to this API; "
                f"{self.HOW_TO_UPLOAD} and name it by the ref it answers",
                field=self.KIND,
            )
        return self.path(digest)

    @abstractmethod
    def add(
        self, chunks: Iterable[bytes], *, filename: str | None = None, max_bytes: int | None = None
    ) -> tuple[Described, bool]:
        """Receive an uploaded file, check that it is one of this kind, and keep it.

        Args:
            chunks: the file's bytes, as they arrive.
            filename: what the uploader called it.
            max_bytes: the most accepted.

        Returns:
            Its description, and whether it is new (False: the same bytes were uploaded before; the
            answer is the first upload's).

        Raises:
            UploadTooLarge: it is larger than `max_bytes`.
            UserError: it is not a file of this kind (field `file`).
        """

    @contextlib.contextmanager
    def receive(self, chunks: Iterable[bytes], *, max_bytes: int | None = None) -> Iterator[Partial]:
        """Write `chunks` to a partial file here, hashing and counting them; the partial file is
        removed when the block ends, unless `keep` renamed it into place.

        Raises:
            UploadTooLarge: more than `max_bytes` arrived (reading stops there).
            Whatever iterating `chunks` raises (the sender went away): nothing is left behind.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.directory, prefix=".upload-", suffix=".partial")
        path = Path(name)
        try:
            digest, size = hashlib.sha256(), 0
            with os.fdopen(fd, "wb") as handle:
                for chunk in chunks:
                    size += len(chunk)
                    if max_bytes is not None and size > max_bytes:
                        raise UploadTooLarge(max_bytes, self.CAP_SETTING)
                    digest.update(chunk)
                    handle.write(chunk)
            yield Partial(path, digest.hexdigest(), size)
        finally:
            path.unlink(missing_ok=True)

    def put(self, chunks: Iterable[bytes], described: Described) -> Path:
        """Receive the file `described` names (fetched from elsewhere) and keep it, with its description.

        Raises:
            DigestMismatch: the bytes received have another SHA-256; nothing is kept.
        """
        with self.receive(chunks) as partial:
            if partial.sha256 != described.sha256:
                raise DigestMismatch(
                    f"{described.ref}: the {partial.size} bytes received have SHA-256 {partial.sha256}, not "
                    f"{described.sha256}: the file changed or was damaged on the way; nothing was kept",
                    field=self.KIND,
                )
            self.keep(partial, described)
        return self.path(described.sha256)

    def keep(self, partial: Partial, described: Described) -> Described:
        """Rename the received file into place, its description first (so every kept file has one)."""
        _write_atomically(self.sidecar(described.sha256), json.dumps(asdict(described), indent=1) + "\n")
        os.chmod(partial.path, _KEPT_MODE)
        os.replace(partial.path, self.path(described.sha256))
        return described


class ModelFiles(UploadedFiles[UploadedModel]):
    """A directory of uploaded ONNX models, by SHA-256, each `<hex>.onnx` (see the module's docstring)."""

    SUFFIX = ".onnx"
    KIND = "model"
    DESCRIPTION = UploadedModel
    HOW_TO_UPLOAD = (
        "upload the ONNX file first (mlscope submit ./model.onnx uploads it, or POST /api/v1/models)"
    )

    def path(self, digest: str) -> Path:
        """Where the model with this SHA-256 is kept (whether or not it is there)."""
        return content_addressed(self.directory, digest)

    def add(
        self, chunks: Iterable[bytes], *, filename: str | None = None, max_bytes: int | None = None
    ) -> tuple[UploadedModel, bool]:
        """Receive an uploaded file, check that it is an ONNX model mlscope can feed, and keep it.

        Returns:
            The model, and whether it is new (False: the same bytes were uploaded before; the
            answer is the first upload's).

        Raises:
            UploadTooLarge: it is larger than `max_bytes`.
            UserError: it is not a valid ONNX model, or an input mlscope cannot feed (field `file`).
        """
        with self.receive(chunks, max_bytes=max_bytes) as partial:
            known = self.find(partial.sha256)
            if known is not None:
                return known, False
            name = clean_filename(filename, partial.sha256)
            called = name if filename else "the uploaded file"
            if partial.size == 0:
                raise UserError(f"{called}: the file is empty; send the ONNX file's bytes", field="file")
            try:
                signature = read_signature(partial.path)
            except UserError as exc:
                raise UserError(exc.message.replace(str(partial.path), called), field="file") from None
            model = UploadedModel(
                sha256=partial.sha256,
                size=partial.size,
                filename=name,
                name=manifest_name(PurePosixPath(name).stem),
                uploaded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                inputs=[{"name": i.name, "dtype": i.dtype, "shape": list(i.dims)} for i in signature.inputs],
                outputs=list(signature.outputs),
                opset=signature.opset,
            )
            return self.keep(partial, model), True
