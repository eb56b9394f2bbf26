"""ONNX files, `./model.onnx`: inputs, dtypes and shapes read from the graph (`mlscope.registry.onnx_files`),
the dynamic axes sized by `--input-shape`. Only where this machine's files are read.
"""

from __future__ import annotations

from pathlib import Path

from mlscope.contract.manifest import Manifest
from mlscope.registry.model_options import ModelOptions
from mlscope.registry.onnx_files import onnx_file_manifest
from mlscope.registry.resolvers.base import Resolver, check_framework, frameworks_with_source
from mlscope.registry.resolvers.forms import looks_like_path

__all__ = ["OnnxFileResolver"]


class OnnxFileResolver(Resolver):
    """A path to a file ending in .onnx, or a path ending in .onnx with no file there yet (reading
    it names what is missing). A file of another suffix is no kind: the dispatcher refuses it.

    Args:
        cache_dir: where graph signatures are kept by the file's SHA-256 (see `onnx_file_manifest`);
            None: each resolution parses the graph.
    """

    kind = "onnx"

    def __init__(self, cache_dir: Path | None = None) -> None:
        self._cache_dir = cache_dir

    def matches(self, ref: str) -> bool:
        if not looks_like_path(ref):
            return False
        path = Path(ref).expanduser()
        if path.is_file():
            return path.suffix.lower() == ".onnx"
        return ref.lower().endswith(".onnx")

    def frameworks(self, ref: str) -> list[str]:
        return frameworks_with_source("onnx")

    def resolve(self, ref: str, framework: str, options: ModelOptions) -> Manifest:
        check_framework(ref, framework, self.frameworks(ref))
        return onnx_file_manifest(
            Path(ref), input_shapes=options.input_shapes, cache_dir=self._cache_dir, framework=framework
        )
