"""What the Python client sends when it uploads a dataset: a folder (ImageFolder layout, or images
with a labels file) zipped into a temporary file, reproducibly (the same folder always makes the
same bytes, so the API keeps it once), or a .zip as it is. `Client.upload_dataset` posts it.
"""

from __future__ import annotations

import contextlib
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from mlscope.contract.errors import UserError

__all__ = ["dataset_archive"]

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
