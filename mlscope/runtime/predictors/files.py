"""Model files named by a manifest (graphs, weights): local paths and file:// URLs, checked
against their SHA-256. Framework-neutral, so any predictor can use it without importing another's
framework."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import urlparse

from mlscope.runtime.predictors.base import PredictorError

__all__ = ["directory_digest", "file_sha256", "local_file", "model_files"]

# What save_pretrained writes besides config.json: the weights, in one file or shards with an index.
_WEIGHT_FILES = (
    "*.safetensors",
    "pytorch_model*.bin",
    "*.safetensors.index.json",
    "pytorch_model*.bin.index.json",
)


def local_file(url: str, sha256: str | None) -> Path:
    """The local file a `file://` URL or a path names, checked against its SHA-256.

    Raises:
        PredictorError: the file is missing, its hash differs, or the URL is remote (nothing is
            downloaded while an evaluation runs).
    """
    parsed = urlparse(url)
    if parsed.scheme in ("http", "https"):
        raise PredictorError(f"{url}: remote files are not fetched during an evaluation; download it first")
    path = Path(parsed.path if parsed.scheme == "file" else url).expanduser()
    if not path.is_file():
        raise PredictorError(f"{path}: no such file")
    if sha256:
        actual = file_sha256(path)
        if actual != sha256.lower():
            raise PredictorError(f"{path}: SHA-256 is {actual}, the manifest expects {sha256}")
    return path


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, as 64 lowercase hexadecimal digits (read 1 MiB at a time)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_files(directory: Path) -> list[Path]:
    """config.json and the weight files of a save_pretrained directory, config first."""
    found = {path for pattern in _WEIGHT_FILES for path in directory.glob(pattern) if path.is_file()}
    return [directory / "config.json", *sorted(found)]


def directory_digest(directory: Path, files: list[Path]) -> str:
    """One SHA-256 over a model directory's files: each file's name and SHA-256, sorted by name."""
    lines = [f"{path.relative_to(directory).as_posix()}\0{file_sha256(path)}\n" for path in sorted(files)]
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()
