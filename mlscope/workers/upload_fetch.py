"""A farm worker's copies of uploaded files (models, datasets): a `sha256:<hex>` reference resolves to
the file in a directory of the worker's cache (`<cache_dir>/models/<hex>.onnx` for a model), fetched
from the API (MLSCOPE_API_URL, `/api/v1/<resource>/sha256:<hex>[/file]`, with the token `client_token`
picks: MLSCOPE_API_TOKEN, else the first of MLSCOPE_API_TOKENS) the first time, and reused after.
`UploadFetcher` does it for any kind of upload; `model_fetch` and `dataset_fetch` name the kinds.

The bytes are hashed as they are written: a file whose SHA-256 is not the one asked for is not kept,
and the evaluation fails (phase `fetch`). A download is written under a name of its own and renamed
into place once verified, so a partial file is never seen under the final name; a lock per model
keeps two workers of one host from fetching it twice. A cached copy is hashed the first time this
process uses it, then trusted while its inode, size and modification time stay the same (the
predictor hashes a model again before it loads it).
"""

from __future__ import annotations

import fcntl
import logging
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import requests

from mlscope.contract.errors import MlscopeError, UserError
from mlscope.contract.settings import Settings, client_token
from mlscope.registry.uploads import DigestMismatch, UploadedFile, UploadedFiles, upload_ref
from mlscope.runtime.predictors.files import file_sha256

__all__ = ["ApiUnreachable", "UploadFetchError", "UploadFetcher"]

log = logging.getLogger("mlscope.worker")
_CHUNK = 1 << 20


class UploadFetchError(UserError):
    """The uploaded file cannot be had: the API does not know it, refuses the token, or sent bytes of
    another SHA-256. The evaluation fails (phase `fetch`); sending the job back would not help."""


class ApiUnreachable(MlscopeError):
    """The API did not answer: an infrastructure failure, so the worker sends the job back."""


Described = TypeVar("Described", bound=UploadedFile)


class UploadFetcher(Generic[Described]):
    """Digest → the verified local copy of an uploaded file (a `ModelRegistry(uploads=...)`, or the
    `uploads` of `resolve_dataset`).

    Args:
        settings: the API's URL, the token, and the cache directory.
        timeout_s: how long the API may take to answer (and between two chunks of a download).
    """

    # The API's resource (`models`), the request field and word for the files (`model`), the error
    # their failures raise, the directory class and where in the cache it is.
    RESOURCE: ClassVar[str]
    KIND: ClassVar[str]
    ERROR: ClassVar[type[UploadFetchError]]
    FILES: ClassVar[type[UploadedFiles[Any]]]
    CACHE_SUBDIR: ClassVar[str]

    def __init__(self, settings: Settings, *, timeout_s: float = 60) -> None:
        self.api_url = settings.api_url.rstrip("/")
        self.token = client_token(settings)
        self.files: UploadedFiles[Described] = self.FILES(settings.cache_dir / self.CACHE_SUBDIR)
        self.timeout_s = timeout_s
        self._verified: dict[str, tuple[int, int, int]] = {}

    def __call__(self, digest: str) -> Path:
        """The local copy of the uploaded file with this SHA-256, fetched when it is not cached.

        Raises:
            UploadFetchError: the API does not have it, refuses the token, or sent other bytes.
            ApiUnreachable: the API did not answer.
        """
        cached = self._cached(digest)
        if cached is not None:
            return cached
        self.files.directory.mkdir(parents=True, exist_ok=True)
        with open(self.files.path(digest).with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            cached = self._cached(digest)  # another worker of this host may have fetched it meanwhile
            if cached is not None:
                return cached
            path = self._fetch(digest)
        log.info("fetched %s from %s into %s", upload_ref(digest), self.api_url, path)
        cached = self._cached(digest)
        assert cached is not None
        return cached

    def _cached(self, digest: str) -> Path | None:
        path = self.files.path(digest)
        if self.files.find(digest) is None:
            return None
        stat = path.stat()
        identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if self._verified.get(digest) == identity:
            return path
        actual = file_sha256(path)
        if actual != digest:
            log.warning("%s has SHA-256 %s, not its name's: fetching it again", path, actual)
            path.unlink(missing_ok=True)
            return None
        self._verified[digest] = identity
        return path

    def _get(self, ref: str, suffix: str = "", *, stream: bool = False) -> requests.Response:
        path = f"/api/v1/{self.RESOURCE}/{ref}{suffix}"
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        url = f"{self.api_url}{path}"
        try:
            response = requests.get(url, headers=headers, timeout=self.timeout_s, stream=stream)
        except requests.RequestException as exc:
            raise ApiUnreachable(f"cannot fetch {url}: {exc} (check MLSCOPE_API_URL)") from exc
        if response.status_code in (401, 403):
            raise self.ERROR(
                f"the API at {self.api_url} refused this worker's token for {path} ({response.status_code}): "
                "set MLSCOPE_API_TOKEN (or MLSCOPE_API_TOKENS) on the worker to one of the API's tokens",
                field=self.KIND,
            )
        if response.status_code == 404:
            raise self.ERROR(
                f"the API at {self.api_url} has no uploaded {self.KIND} {ref}: upload it there, or check "
                "that this worker's MLSCOPE_API_URL names the API it was uploaded to",
                field=self.KIND,
            )
        if response.status_code >= 400:
            raise ApiUnreachable(f"GET {url}: {response.status_code} {response.text[:200]}")
        return response

    def _fetch(self, digest: str) -> Path:
        ref = upload_ref(digest)
        described: Described = self.files.DESCRIPTION.from_dict(self._get(ref).json())
        if described.sha256 != digest:
            raise self.ERROR(f"the API described {ref} as {described.ref}", field=self.KIND)
        with self._get(ref, "/file", stream=True) as response:
            try:
                return self.files.put(response.iter_content(_CHUNK), described)
            except DigestMismatch as exc:
                raise self.ERROR(exc.message, field=self.KIND) from None
            except requests.RequestException as exc:
                raise ApiUnreachable(f"the download of {ref} from {self.api_url} broke off: {exc}") from exc
