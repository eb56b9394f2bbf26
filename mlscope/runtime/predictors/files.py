"""Model files named by a manifest (graphs, weights): local paths and file:// URLs, checked
against their SHA-256. Framework-neutral, so any predictor can use it without importing another's
framework."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import urlparse

from mlscope.runtime.predictors.base import PredictorError

__all__ = ["local_file"]


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
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != sha256.lower():
            raise PredictorError(f"{path}: SHA-256 is {digest.hexdigest()}, the manifest expects {sha256}")
    return path
