"""Model files named by a manifest (graphs, weights): local paths, file:// URLs and uploaded models
(`sha256:<hex>`, found in the cache where a farm worker fetched them), checked against their SHA-256.
Framework-neutral, so any predictor can use it without importing another's framework."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from mlscope.runtime.predictors.base import PredictorError

__all__ = [
    "UPLOADED_MODELS",
    "UPLOAD_URL",
    "content_addressed",
    "directory_digest",
    "file_sha256",
    "local_file",
    "made_by_child",
    "model_file",
    "model_files",
]

# An uploaded model's URL in a manifest: its SHA-256, which is also its file's name in a directory
# of uploads (the api's, and each worker's cache under UPLOADED_MODELS).
UPLOAD_URL = re.compile(r"^sha256:([0-9a-f]{64})$")
UPLOADED_MODELS = "models"

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


def content_addressed(directory: Path, digest: str) -> Path:
    """The file of the model whose SHA-256 is `digest` in a directory of uploads: `<digest>.onnx`."""
    return Path(directory) / f"{digest}.onnx"


def model_file(url: str, sha256: str | None, cache_dir: Path) -> Path:
    """The local file a manifest's URL names: for an uploaded model (`sha256:<hex>`) its copy in
    `<cache_dir>/models/` (a farm worker fetched it there before the evaluation), else as `local_file`;
    checked against its SHA-256 either way.

    Raises:
        PredictorError: as `local_file`; or the uploaded model is not in the cache.
    """
    match = UPLOAD_URL.match(url)
    if match is None:
        return local_file(url, sha256)
    path = content_addressed(Path(cache_dir) / UPLOADED_MODELS, match.group(1))
    if not path.is_file():
        raise PredictorError(
            f"{url}: the uploaded model is not in the cache ({path}); a farm worker fetches it from the "
            "API before the evaluation starts"
        )
    return local_file(str(path), sha256 or match.group(1))


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, as 64 lowercase hexadecimal digits (hashlib.file_digest's reads
    into one reused buffer where Python has it, 3.11 on; else 1 MiB at a time)."""
    with path.open("rb") as handle:
        if hasattr(hashlib, "file_digest"):
            return hashlib.file_digest(handle, "sha256").hexdigest()
        digest = hashlib.sha256()
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
        return digest.hexdigest()


def made_by_child(
    target: Path,
    argv: list[str],
    *,
    stdin: str | None = None,
    stdout_to: Path | None = None,
    beside: tuple[str, ...] = (),
    timeout_s: float,
    unwritable: str | Callable[[OSError], Exception],
    failed: str | Callable[[subprocess.CompletedProcess[str]], Exception],
) -> None:
    """Make `target` once, by a child process (`argv` and then the path of a partial file it writes),
    for a converter or exporter the measuring process must not import: concurrent callers wait on a
    lock instead of making it twice, and a partial file never becomes visible under the final name. A
    file already there is only read: no lock, no write, so a cache mounted read-only serves it. What
    the child prints is kept in `stdout_to` when given, and the files it writes beside the partial one
    (its name with each suffix of `beside`) are moved beside `target`, all before `target` appears.

    Raises:
        PredictorError: `failed` followed by the child's last lines of standard error, when it exits
            other than 0 or writes nothing; `unwritable` followed by the reason, when the file is not
            there and its directory cannot be written. Where `failed` or `unwritable` is a function,
            what it makes of the child's outcome or the OSError is raised instead.
        subprocess.TimeoutExpired: the child ran longer than `timeout_s`.
    """
    if target.is_file():
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = open(target.with_suffix(".lock"), "w")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        if callable(unwritable):
            raise unwritable(exc) from exc
        raise PredictorError(f"{unwritable} ({exc.strerror or exc})") from exc
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return
        partial = target.with_suffix(f".{os.getpid()}.partial")
        completed = subprocess.run(
            [*argv, str(partial)],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if completed.returncode != 0 or not partial.is_file():
            for path in (partial, *(partial.with_suffix(suffix) for suffix in beside)):
                path.unlink(missing_ok=True)
            if callable(failed):
                raise failed(completed)
            tail = "\n".join(completed.stderr.strip().splitlines()[-5:])
            raise PredictorError(f"{failed}: {tail}")
        if stdout_to is not None:
            stdout_to.write_text(completed.stdout)
        for suffix in beside:
            partial.with_suffix(suffix).rename(target.with_suffix(suffix))
        partial.rename(target)


def model_files(directory: Path) -> list[Path]:
    """config.json and the weight files of a save_pretrained directory, config first."""
    found = {path for pattern in _WEIGHT_FILES for path in directory.glob(pattern) if path.is_file()}
    return [directory / "config.json", *sorted(found)]


def directory_digest(directory: Path, files: list[Path]) -> str:
    """One SHA-256 over a model directory's files: each file's name and SHA-256, sorted by name."""
    lines = [f"{path.relative_to(directory).as_posix()}\0{file_sha256(path)}\n" for path in sorted(files)]
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()
