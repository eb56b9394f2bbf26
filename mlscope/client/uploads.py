"""What the Python client sends when it uploads a dataset: a folder (ImageFolder layout, or images
with a labels file) zipped into a temporary file, reproducibly (the same folder always makes the
same bytes, so the API keeps it once), or a .zip as it is. `Client.upload_dataset` posts it.
"""

from __future__ import annotations

import contextlib
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import requests

from mlscope.client.errors import ApiError
from mlscope.contract.errors import UserError

__all__ = ["UploadMethods", "dataset_archive"]

# Fixed member timestamps: zip stores one, and the folder's mtimes must not change the digest.
_EPOCH = (1980, 1, 1, 0, 0, 0)


@contextlib.contextmanager
def dataset_archive(path: str | Path) -> Iterator[Path]:
    """The zip to upload for `path`: the file itself for a .zip, else the folder zipped (members
    sorted, fixed timestamps, stored uncompressed: images are compressed already) into a temporary
    file removed afterwards.

    Raises:
        UserError: no such folder or .zip (field `dataset`).
    """
    source = Path(path).expanduser()
    if source.is_file() and source.suffix == ".zip":
        yield source
        return
    if not source.is_dir():
        raise UserError(f"{path}: no such folder or .zip", field="dataset")
    with tempfile.TemporaryDirectory(prefix="mlscope-dataset-") as scratch:
        archive = Path(scratch) / f"{source.resolve().name}.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as out:
            for file in sorted(f for f in source.rglob("*") if f.is_file()):
                out.writestr(zipfile.ZipInfo(file.relative_to(source).as_posix(), _EPOCH), file.read_bytes())
        yield archive


class UploadMethods:
    """The Client's uploads (mlscope.client.Client mixes them in): a file streamed from disk to
    /api/v1/models or /api/v1/datasets."""

    timeout_s: float
    _request: Callable[..., requests.Response]  # the Client's

    def upload_model(self, path: str | Path, *, filename: str | None = None) -> dict[str, Any]:
        """Upload an ONNX file, streamed from disk (never read whole into memory); the API keeps it
        by its SHA-256. Name the model by the answer's `ref` (`sha256:<hex>`) in any request.

        Args:
            path: the .onnx file.
            filename: what to call it on the API (the model's name is its stem); default: its name.

        Returns:
            {ref, sha256, size, filename, name, uploaded_at, inputs, outputs, opset} and `created`:
            False when the API had these bytes already (its answer is then the first upload's).

        Raises:
            UserError: there is no such file (field `model`).
            ApiError: 413 larger than the API's MLSCOPE_MAX_UPLOAD_BYTES, 422 not a valid ONNX model
                (field `file`), 401/403 no or a wrong token.
        """
        source = Path(path).expanduser()
        if not source.is_file():
            raise UserError(f"{path}: no such file", field="model")
        return self._upload("models", source, filename or source.name, "MLSCOPE_MAX_UPLOAD_BYTES")

    def upload_dataset(self, path: str | Path, *, filename: str | None = None) -> dict[str, Any]:
        """Upload a dataset, a folder (zipped here, see `dataset_archive`) or a .zip;
        the API keeps it by its SHA-256. Name it by the answer's `ref` in a request's `dataset`.

        Returns:
            The API's description of the upload and `created` (False when it had these bytes).

        Raises:
            UserError: no such folder or zip (field `dataset`).
            ApiError: 413 larger than the API's MLSCOPE_MAX_DATASET_BYTES, 422 an image that does
                not decode or a bad layout (field `file`), 401/403 no or a wrong token.
        """
        with dataset_archive(path) as archive:
            return self._upload("datasets", archive, filename or archive.name, "MLSCOPE_MAX_DATASET_BYTES")

    def _upload(self, resource: str, source: Path, filename: str, cap_setting: str) -> dict[str, Any]:
        """POST a file to /api/v1/<resource>, streamed; the answer and whether it was new."""
        with source.open("rb") as handle:
            try:
                # Sending a large file takes as long as it takes; the API then reads all of it.
                response = self._request(
                    "POST",
                    f"/api/v1/{resource}",
                    params={"filename": filename},
                    data=handle,
                    content_type="application/octet-stream",
                    timeout=(self.timeout_s, max(self.timeout_s, 600.0)),
                )
            except ApiError as exc:
                if exc.status != 413 or exc.errors:
                    raise
                # Refused by the HTTP server in front of the API, before the API saw it.
                raise ApiError(
                    exc.method,
                    exc.path,
                    413,
                    {
                        **exc.problem,
                        "detail": f"{source} ({source.stat().st_size} bytes) is larger than the API "
                        f"accepts (its {cap_setting}): {exc.problem.get('detail')}",
                    },
                ) from None
        answer: dict[str, Any] = response.json()
        return {**answer, "created": response.status_code == 201}
