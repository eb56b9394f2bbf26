"""The Python client's uploads: an ONNX model (`/api/v1/models`) or a dataset (`/api/v1/datasets`),
streamed from disk; the API keeps each by its SHA-256 and answers the `sha256:<hex>` that names it.
`mlscope.client.Client.upload_model` and `upload_dataset` call these.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlscope.contract.errors import UserError

if TYPE_CHECKING:
    from mlscope.client import Client

__all__ = ["upload_dataset", "upload_model"]

_V1 = "/api/v1"


def upload_model(client: Client, path: str | Path, *, filename: str | None = None) -> dict[str, Any]:
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
    return _upload(client, "models", source, filename or source.name, "MLSCOPE_MAX_UPLOAD_BYTES")


def upload_dataset(client: Client, path: str | Path, *, filename: str | None = None) -> dict[str, Any]:
    """Upload a dataset: a folder (ImageFolder layout, or images with a labels file), zipped
    here into a temporary file, or a .zip of one; the API keeps it by its SHA-256. Name it by the
    answer's `ref` (`sha256:<hex>`) in a request's `dataset`.

    Returns:
        The API's description of the upload and `created` (False when it had these bytes).

    Raises:
        UserError: no such folder or zip (field `dataset`).
        ApiError: 413 larger than the API's MLSCOPE_MAX_DATASET_BYTES, 422 an image that does
            not decode or a bad layout (field `file`), 401/403 no or a wrong token.
    """
    import tempfile
    import zipfile

    source = Path(path).expanduser()
    if source.is_file() and source.suffix == ".zip":
        return _upload(client, "datasets", source, filename or source.name, "MLSCOPE_MAX_DATASET_BYTES")
    if not source.is_dir():
        raise UserError(f"{path}: no such folder or .zip", field="dataset")
    with tempfile.TemporaryDirectory(prefix="mlscope-dataset-") as scratch:
        archive = Path(scratch) / f"{source.resolve().name}.zip"
        # Sorted, with fixed timestamps: the same folder always makes the same bytes (one upload).
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as out:
            for file in sorted(f for f in source.rglob("*") if f.is_file()):
                info = zipfile.ZipInfo(file.relative_to(source).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
                out.writestr(info, file.read_bytes())
        return _upload(client, "datasets", archive, filename or archive.name, "MLSCOPE_MAX_DATASET_BYTES")


def _upload(client: Client, resource: str, source: Path, filename: str, cap_setting: str) -> dict[str, Any]:
    """POST a file to /api/v1/<resource>, streamed; the answer and whether it was new."""
    from mlscope.client import ApiError  # the client's module imports this one

    with source.open("rb") as handle:
        try:
            # Sending a large file takes as long as it takes; the API then reads all of it.
            response = client._request(
                "POST",
                f"{_V1}/{resource}",
                params={"filename": filename},
                data=handle,
                content_type="application/octet-stream",
                timeout=(client.timeout_s, max(client.timeout_s, 600.0)),
            )
        except ApiError as exc:
            if exc.status != 413 or exc.errors:
                raise
            # Refused by the HTTP server in front of the API, before the API saw it.
            size = source.stat().st_size
            raise ApiError(
                exc.method,
                exc.path,
                413,
                {
                    **exc.problem,
                    "detail": f"{source} ({size} bytes) is larger than the API accepts "
                    f"(its {cap_setting}): {exc.problem.get('detail')}",
                },
            ) from None
    answer: dict[str, Any] = response.json()
    return {**answer, "created": response.status_code == 201}
