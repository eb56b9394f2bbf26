"""Model references resolved to manifests: one resolver per kind of reference, chosen once.

The kind is chosen by asking each resolver's `matches` in this order; the first that matches
resolves the reference, alone (none calls back here):

    1. upload     `sha256:<hex>`                    (`upload.py`)
    2. factory    `path/to/file.py:name`            (`factory.py`)
    3. manifest   a manifest file's name             (`manifest.py`)
    4. catalogue  a catalogue entry's ref            (`catalogue.py`)
    5. directory  a Hugging Face directory           (`hf_directory.py`)
    6. onnx       an ONNX file                       (`onnx_file.py`)

A name (a reference that does not look like a path, see `looks_like_path`) that neither a manifest
file nor the catalogue has is an unknown model (close names suggested); a path that is neither a
directory nor an ONNX file is refused (a file of another suffix, or nothing there). Where this
machine's files are not read (a farm's api and workers), a factory or a path is refused before any
resolver looks at a file, and so is a checkpoint (`--weights`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.model_options import ModelOptions
from mlscope.registry.resolvers.base import Resolver, refuse_local, unknown_model
from mlscope.registry.resolvers.catalogue import CatalogueResolver
from mlscope.registry.resolvers.factory import FactoryResolver
from mlscope.registry.resolvers.forms import is_factory_ref, looks_like_path
from mlscope.registry.resolvers.hf_directory import HfDirectoryResolver
from mlscope.registry.resolvers.manifest import ManifestResolver
from mlscope.registry.resolvers.onnx_file import OnnxFileResolver
from mlscope.registry.resolvers.upload import UploadResolver

__all__ = ["ORDER", "Resolver", "Resolvers", "reference_kind"]

# The kinds, in the order they are tried.
ORDER = ("upload", "factory", "manifest", "catalogue", "directory", "onnx")


class Resolvers:
    """The resolvers of one registry, in `ORDER`, and the one choice among them.

    Args:
        manifests: the manifest files' manifests by (name, framework).
        catalogue: the catalogue behind `library:name` references, or its loader (called when a
            name is first looked up); None: no catalogue names.
        local_files: whether references to this machine's files resolve (see `ModelRegistry`).
        uploads: where `sha256:<hex>` references find their file (see `UploadResolver`).
        cache_dir: where ONNX files' graph signatures are kept (see `onnx_file_manifest`); None:
            not kept.
    """

    def __init__(
        self,
        manifests: Mapping[tuple[str, str], Manifest],
        catalogue: Catalogue | Callable[[], Catalogue] | None,
        *,
        local_files: bool,
        uploads: Callable[[str], Path] | None,
        cache_dir: Path | None = None,
    ) -> None:
        self.manifests = ManifestResolver(manifests)
        self.catalogue = CatalogueResolver(catalogue)
        self.local_files = local_files
        self._upload = UploadResolver(uploads, cache_dir=cache_dir)
        self.order: tuple[Resolver, ...] = (
            self._upload,
            FactoryResolver(),
            self.manifests,
            self.catalogue,
            HfDirectoryResolver(self.manifests, self.catalogue),
            OnnxFileResolver(cache_dir),
        )
        assert tuple(resolver.kind for resolver in self.order) == ORDER

    def choose(self, ref: str) -> Resolver:
        """The resolver of `ref`: the first in `ORDER` that matches.

        Raises:
            UserError: an unknown name (with close names), a path to nothing or to a file that is
                not .onnx, or a factory or path where this machine's files are not read.
        """
        self._refuse_local(ref)
        resolver = self.first(ref)
        if resolver is None:
            raise _unmatched(ref, self._unknown)
        return resolver

    def first(self, ref: str) -> Resolver | None:
        """The first resolver in `ORDER` that matches `ref`, None if none does (no refusal here)."""
        return next((resolver for resolver in self.order if resolver.matches(ref)), None)

    def frameworks(self, ref: str) -> list[str]:
        """The sorted frameworks `ref` can run on (see `ModelRegistry.frameworks_for`)."""
        return self.choose(ref).frameworks(ref)

    def resolve(self, ref: str, framework: str, options: ModelOptions | None = None) -> Manifest:
        """The manifest of `ref` for `framework`, the options applied (see `ModelRegistry.get`)."""
        options = options or ModelOptions()
        if options.weights and not self.local_files:
            self._refuse_local(ref)  # a factory or a path is refused as such first
            raise refuse_local(ref, "weights")
        return self.choose(ref).resolve(ref, framework, options)

    def _refuse_local(self, ref: str) -> None:
        """Where this machine's files are not read, refuses a factory or a path (an upload is not a
        path), before any resolver looks at a file."""
        if self.local_files or self._upload.matches(ref):
            return
        if is_factory_ref(ref):
            raise refuse_local(ref, "factory")
        if looks_like_path(ref):
            raise refuse_local(ref, "path")

    def _unknown(self, name: str) -> UserError:
        names, refs = self.manifests.names(), self.catalogue.refs()
        return unknown_model(name, names, refs, local_files=self.local_files)


def _unmatched(ref: str, unknown: Callable[[str], UserError]) -> UserError:
    """The error for a reference no resolver matched."""
    if not looks_like_path(ref):
        return unknown(ref)
    if Path(ref).expanduser().is_file():
        return UserError(
            f"{ref}: a model file must be an ONNX graph ending in .onnx (or a Python factory "
            "file.py:make_model, or a Hugging Face directory)",
            field="model",
        )
    return UserError(
        f"{ref}: no such file or directory (a model reference is a name, an .onnx file, file.py:factory "
        "or a Hugging Face directory)",
        field="model",
    )


_NO_REGISTRY = Resolvers({}, None, local_files=True, uploads=None)


def reference_kind(ref: str) -> str:
    """What `ref` names by its form alone, with no registry to ask: the kind of the resolver
    `ORDER` chooses, "name" for any name (a manifest file's or the catalogue's, known or not).

    Raises:
        UserError: it looks like a path and nothing is there, or a file that is not .onnx.
    """
    resolver = _NO_REGISTRY.first(ref)  # no manifest or catalogue name matches here
    if resolver is not None:
        return resolver.kind
    if not looks_like_path(ref):
        return "name"
    raise _unmatched(ref, _NO_REGISTRY._unknown)
