"""Uploads, `sha256:<hex>`: an ONNX file uploaded to a farm's API, found by its digest. The only
reference to a file that resolves where this machine's files are not read; it needs the registry's
`uploads` lookup (the API's upload directory, a worker's fetcher).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest
from mlscope.registry.model_options import ModelOptions
from mlscope.registry.onnx_files import onnx_file_manifest
from mlscope.registry.resolvers.base import Resolver, check_framework, frameworks_with_source
from mlscope.registry.resolvers.forms import UPLOAD_REF
from mlscope.registry.uploads import ModelFiles

__all__ = ["UploadResolver"]


class UploadResolver(Resolver):
    """`sha256:<hex>`: runs on every framework that builds a model from an ONNX source.

    Args:
        uploads: from a digest to the local path of its file (fetched and verified), its description
            beside it; None: uploads are named as such but not resolved here.
        cache_dir: where graph signatures are kept (see `onnx_file_manifest`); None: not kept.
    """

    kind = "upload"

    def __init__(self, uploads: Callable[[str], Path] | None, *, cache_dir: Path | None = None) -> None:
        self._uploads = uploads
        self._cache_dir = cache_dir

    def matches(self, ref: str) -> bool:
        return UPLOAD_REF.match(ref) is not None

    def frameworks(self, ref: str) -> list[str]:
        self._path(ref)  # an unknown upload is named here, with what to do
        return frameworks_with_source("onnx")

    def resolve(self, ref: str, framework: str, options: ModelOptions) -> Manifest:
        path = self._path(ref)
        check_framework(ref, framework, frameworks_with_source("onnx"))
        if path is None:
            raise UserError(
                f"{ref} names a model uploaded to a farm's API; submit it there (mlscope submit) or run the "
                "ONNX file itself here (mlscope run ./model.onnx)",
                field="model",
            )
        digest = _digest(ref)
        described = ModelFiles(path.parent).find(digest)
        return onnx_file_manifest(
            path,
            input_shapes=options.input_shapes,
            url=ref,
            sha256=digest,
            name=described.name if described is not None else f"upload-{digest[:12]}",
            filename=described.filename if described is not None else None,
            origin=ref,
            cache_dir=self._cache_dir,
            framework=framework,
        )

    def _path(self, ref: str) -> Path | None:
        """The upload's local file, None without a lookup.

        Raises:
            UserError: the lookup has no upload of this digest.
        """
        return self._uploads(_digest(ref)) if self._uploads is not None else None


def _digest(ref: str) -> str:
    match = UPLOAD_REF.match(ref)
    assert match is not None, "matches() chose this resolver"
    return match.group(1)
