"""A farm worker's copies of uploaded datasets: `sha256:<hex>` → `<cache_dir>/datasets/uploaded/<hex>.zip`,
fetched from the API's /api/v1/datasets the first time (how, and what is checked: `upload_fetch`);
`resolve_dataset(ref, cache_dir, uploads=DatasetFetcher(settings))` then materialises it.
"""

from __future__ import annotations

from mlscope.registry.datasets.uploads import DatasetFiles, UploadedDataset
from mlscope.workers.upload_fetch import UploadFetcher, UploadFetchError

__all__ = ["DatasetFetchError", "DatasetFetcher"]


class DatasetFetchError(UploadFetchError):
    """The uploaded dataset cannot be had (the evaluation fails, phase `fetch`)."""


class DatasetFetcher(UploadFetcher[UploadedDataset]):
    """Digest → the verified local copy of an uploaded dataset's zip (`resolve_dataset`'s `uploads`)."""

    RESOURCE = "datasets"
    KIND = "dataset"
    ERROR = DatasetFetchError
    FILES = DatasetFiles
    CACHE_SUBDIR = "datasets/uploaded"
