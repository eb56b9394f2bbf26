"""A farm worker's copies of uploaded models: `sha256:<hex>` → `<cache_dir>/models/<hex>.onnx`, fetched
from the API's /api/v1/models the first time (how, and what is checked: `upload_fetch`).
"""

from __future__ import annotations

from mlscope.registry.uploads import ModelFiles, UploadedModel
from mlscope.runtime.predictors.files import UPLOADED_MODELS
from mlscope.workers.upload_fetch import ApiUnreachable, UploadFetcher, UploadFetchError

__all__ = ["ApiUnreachable", "ModelFetchError", "ModelFetcher"]


class ModelFetchError(UploadFetchError):
    """The uploaded model cannot be had (the evaluation fails, phase `fetch`)."""


class ModelFetcher(UploadFetcher[UploadedModel]):
    """The worker's `ModelRegistry(uploads=...)`: digest → the verified local copy of the model."""

    RESOURCE = "models"
    KIND = "model"
    ERROR = ModelFetchError
    FILES = ModelFiles
    CACHE_SUBDIR = UPLOADED_MODELS
