"""The model registry: every manifest mlscope knows, the shipped ones and the user's, by (name, framework),
and the catalogue's architectures (`torchvision:resnet18`, `hf:bert`, ...), each resolved to a manifest
when it is first asked for.

Manifests are read from the `mlscope.manifests` package directory, then from each extra
directory in order (the user's `MLSCOPE_MANIFESTS`); a later layer replaces an earlier one's
manifest for the same (name, framework). A broken file fails the whole load: skipping it would
make a model silently disappear. A manifest file named like a catalogue entry replaces the entry.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest, ManifestError, load_manifest, parse_manifest_text
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.onnx_files import onnx_file_manifest
from mlscope.registry.references import (
    UPLOAD_REF,
    ModelOptions,
    apply_options,
    factory_manifest,
    hf_directory_manifest,
    is_factory_ref,
    looks_like_path,
    read_hf_config,
    reference_kind,
)
from mlscope.registry.uploads import ModelFiles
from mlscope.runtime.frameworks import FRAMEWORKS

__all__ = ["ModelRegistry"]

_SUFFIXES = (".yaml", ".yml")


def _duplicate(first: Manifest, second: Manifest) -> ManifestError:
    name, framework = second.key
    return ManifestError(
        second.origin,
        [
            (
                "",
                f"model {name!r} for framework {framework!r} is already defined by {first.origin}; "
                "keep one of the two",
            )
        ],
    )


def _index(manifests: Iterable[Manifest]) -> dict[tuple[str, str], Manifest]:
    indexed: dict[tuple[str, str], Manifest] = {}
    for manifest in manifests:
        if manifest.key in indexed:
            raise _duplicate(indexed[manifest.key], manifest)
        indexed[manifest.key] = manifest
    return indexed


def _shipped_files(node: Traversable) -> Iterator[Traversable]:
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.is_dir() and not child.name.startswith((".", "__")):
            yield from _shipped_files(child)
        elif child.is_file() and child.name.endswith(_SUFFIXES):
            yield child


def _exists(name: str) -> bool:
    """Whether a file or directory is called `name` here; False for a name no path can have (too
    long, a NUL byte)."""
    try:
        return Path(name).exists()
    except (OSError, ValueError):
        return False


def _load_shipped() -> list[Manifest]:
    loaded = []
    for resource in _shipped_files(resources.files("mlscope.manifests")):
        # An installed package is a directory in practice; a zipped one has no directory to resolve against.
        if isinstance(resource, Path):
            loaded.append(load_manifest(resource))
        else:
            loaded.append(parse_manifest_text(resource.read_text(encoding="utf-8"), str(resource)))
    return loaded


def _load_directory(directory: Path) -> list[Manifest]:
    if not directory.exists():
        raise UserError(
            f"manifest directory {directory} does not exist (check MLSCOPE_MANIFESTS)", field="manifests"
        )
    if not directory.is_dir():
        raise UserError(
            f"manifest directory {directory} is not a directory (check MLSCOPE_MANIFESTS)", field="manifests"
        )
    files = sorted(
        path
        for path in directory.rglob("*")
        if path.suffix in _SUFFIXES
        and path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(directory).parts)
    )
    return [load_manifest(path) for path in files]


def _check_framework(name: str, framework: str, frameworks: list[str]) -> None:
    if framework not in frameworks:
        raise UserError(
            f"{name} cannot run on framework {framework!r}; it can on: {', '.join(frameworks)}",
            field="framework",
        )


class ModelRegistry:
    """The manifests that can be evaluated, looked up by model name and framework.

    Args:
        manifests: at most one manifest per (name, framework).
        catalogue: architectures named `library:name`, resolved to manifests on demand; none when
            omitted.
        local_files: whether references to this machine's files resolve (`./model.onnx`,
            `net.py:make_model`, a Hugging Face directory, `--weights`): True for the CLI and the
            Python API, False for a farm's api and workers, where a path would name the wrong
            machine's file and a factory would be code on the wire.
        uploads: where `sha256:<hex>` references find their ONNX file: a function from the digest
            to a local path holding it (fetched and verified), its description beside it (a
            `ModelFiles` directory: the name it was uploaded under); None: uploads are not resolved
            here.
        dataset_uploads: the same for uploaded datasets (`--dataset sha256:<hex>`): the API's
            lookup, a worker's fetcher; None: uploaded datasets are not resolved here.

    Raises:
        ManifestError: two manifests share a (name, framework); names both files.
    """

    def __init__(
        self,
        manifests: Iterable[Manifest] = (),
        catalogue: Catalogue | None = None,
        *,
        local_files: bool = True,
        uploads: Callable[[str], Path] | None = None,
        dataset_uploads: Callable[[str], Path] | None = None,
    ) -> None:
        self._by_key = _index(manifests)
        self._catalogue = catalogue
        self._local_files = local_files
        self._uploads = uploads
        self.dataset_uploads = dataset_uploads
        self._resolved: dict[tuple[str, str], Manifest] = {}

    @classmethod
    def load(
        cls,
        extra_dirs: Sequence[Path] = (),
        *,
        local_files: bool = True,
        uploads: Callable[[str], Path] | None = None,
        dataset_uploads: Callable[[str], Path] | None = None,
    ) -> ModelRegistry:
        """Read the shipped manifests, then each extra directory (recursively, *.yaml and *.yml), and
        the catalogue.

        Args:
            extra_dirs: the user's manifest directories; each replaces manifests with the same
                (name, framework) from the shipped set and from directories before it.

        Returns:
            The registry.

        Raises:
            UserError: an extra directory does not exist.
            ManifestError: a file is not a valid manifest, or two files in one layer (the
                shipped set, or one extra directory) define the same (name, framework).
        """
        layers = [_load_shipped()] + [_load_directory(Path(directory)) for directory in extra_dirs]
        merged: dict[tuple[str, str], Manifest] = {}
        for layer in layers:
            merged.update(_index(layer))
        return cls(
            merged.values(),
            catalogue=Catalogue.load(),
            local_files=local_files,
            uploads=uploads,
            dataset_uploads=dataset_uploads,
        )

    @property
    def catalogue(self) -> Catalogue | None:
        """The catalogue behind `library:name` references, if this registry has one."""
        return self._catalogue

    def __len__(self) -> int:
        return len(self._by_key)

    def all(self) -> list[Manifest]:
        """Every manifest file's manifest (not the catalogue's), sorted by (name, framework)."""
        return [self._by_key[key] for key in sorted(self._by_key)]

    @property
    def local_files(self) -> bool:
        """Whether references to this machine's files resolve here (see the class's Args)."""
        return self._local_files

    def names(self) -> list[str]:
        """The sorted model names of the manifest files (the catalogue's are `catalogue.entries()`)."""
        return sorted({name for name, _ in self._by_key})

    def frameworks_for(self, name: str) -> list[str]:
        """The sorted frameworks that have a manifest for model `name`, or can run what the
        reference `name` names (an ONNX file, a factory, a Hugging Face directory, an upload).

        Raises:
            UserError: no manifest and no catalogue entry has that name; suggests close ones. Or a
                path that leads nowhere, a local reference where local files are not read, an
                upload that `uploads` cannot find.
        """
        kind = self._kind(name)
        if kind == "directory":
            return self.frameworks_for(f"hf:{read_hf_config(Path(name).expanduser())['model_type']}")
        if kind == "upload" and self._uploads is not None:
            self._uploads(name.partition(":")[2])  # an unknown upload is named here, with what to do
        if kind != "name":
            source = {"upload": "onnx", "onnx": "onnx", "factory": "python"}[kind]
            return sorted(
                spec.name for spec in FRAMEWORKS.values() if source in spec.sources and not spec.unavailable
            )
        frameworks = sorted(framework for model, framework in self._by_key if model == name)
        if frameworks:
            return frameworks
        entry = self._entry(name)
        if entry is None:
            raise self._unknown_model(name)
        return sorted(entry.frameworks)

    def get(self, name: str, framework: str, options: ModelOptions | None = None) -> Manifest:
        """The manifest of model `name` (any reference, see `mlscope.registry.references`) for
        `framework`, with the model options applied.

        Raises:
            UserError: the model is unknown (suggests close names), it has no manifest for this
                framework (lists the frameworks it has), a local reference where local files are
                not read, or a file that is missing, invalid, or does not fit the options.
        """
        options = options or ModelOptions()
        kind = self._kind(name)
        if options.weights:
            self._refuse_local(name, "weights")
        if kind == "name":
            return apply_options(self._named(name, framework), options)
        if kind == "directory":
            directory = Path(name).expanduser()
            config = read_hf_config(directory)  # read once: it names the catalogue entry too
            template_ref = f"hf:{config['model_type']}"
            _check_framework(name, framework, self.frameworks_for(template_ref))
            template = self._named(template_ref, framework)
            return hf_directory_manifest(directory, config, framework, options, template)
        _check_framework(name, framework, self.frameworks_for(name))
        if kind == "onnx":
            return onnx_file_manifest(Path(name), input_shapes=options.input_shapes)
        if kind == "factory":
            return factory_manifest(name, framework, options)
        return self._uploaded(name, options)

    def _uploaded(self, name: str, options: ModelOptions) -> Manifest:
        match = UPLOAD_REF.match(name)
        assert match is not None
        if self._uploads is None:
            raise UserError(
                f"{name} names a model uploaded to a farm's API; submit it there (mlscope submit) or run the "
                "ONNX file itself here (mlscope run ./model.onnx)",
                field="model",
            )
        digest = match.group(1)
        path = self._uploads(digest)
        described = ModelFiles(path.parent).find(digest)
        return onnx_file_manifest(
            path,
            input_shapes=options.input_shapes,
            url=name,
            sha256=digest,
            name=described.name if described is not None else f"upload-{digest[:12]}",
            filename=described.filename if described is not None else None,
            origin=name,
        )

    def _kind(self, name: str) -> str:
        """The reference's kind (`reference_kind`); where local files are not read, a path or a
        factory is refused before anything looks at this machine's files."""
        if self._local_files or UPLOAD_REF.match(name):
            return reference_kind(name)
        if is_factory_ref(name):
            self._refuse_local(name, "factory")
        if looks_like_path(name):
            self._refuse_local(name, "path")
        return "name"

    def _refuse_local(self, name: str, kind: str) -> None:
        if self._local_files:
            return
        if kind == "factory":
            raise UserError(
                f"{name}: Python factories are not accepted here (no code travels over the wire); upload the "
                "exported ONNX file instead (mlscope submit ./model.onnx), or install the module on the "
                "workers and name its factory in a manifest (MLSCOPE_MANIFESTS)",
                field="model",
            )
        what = "a checkpoint path (--weights)" if kind == "weights" else f"{name}"
        raise UserError(
            f"{what}: a path on your machine means nothing here; upload an ONNX file (mlscope submit "
            "./model.onnx, or POST /api/v1/models) and name it by the sha256:<hex> reference it returns",
            field="model_options.weights" if kind == "weights" else "model",
        )

    def _named(self, name: str, framework: str) -> Manifest:
        frameworks = self.frameworks_for(name)
        manifest = self._by_key.get((name, framework))
        if manifest is not None:
            return manifest
        if framework in frameworks and self._catalogue is not None:
            key = (name, framework)
            if key not in self._resolved:
                self._resolved[key] = self._catalogue.manifest(name, framework)
            return self._resolved[key]
        has = ", ".join(frameworks)
        raise UserError(
            f"model {name!r} has no manifest for framework {framework!r}; it has: {has}",
            field="framework",
        )

    def _entry(self, name: str) -> Any:
        if self._catalogue is None or not self._catalogue.has(name):
            return None
        return self._catalogue.get(name)

    def listing(self) -> list[tuple[str, str, str | None]]:
        """(name, origin, family) of every model, as `mlscope models` and GET /api/v1/models list them:
        the manifest files' names ("manifest"), then the catalogue's entries ("catalogue") that no
        manifest file of the same name replaces."""
        named = self.names()
        listed: list[tuple[str, str, str | None]] = [(name, "manifest", None) for name in named]
        if self._catalogue is not None:
            taken = set(named)
            listed += [
                (entry.ref, "catalogue", entry.family)
                for entry in self._catalogue.entries()
                if entry.ref not in taken
            ]
        return listed

    def _unknown_model(self, name: str) -> UserError:
        names = self.names()
        refs = self._catalogue.refs() if self._catalogue is not None else []
        close = difflib.get_close_matches(name.lower(), names + refs, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        if self._local_files and _exists(name):
            hint += f"(for the file or directory {name}, write ./{name}) "
        known = ", ".join(names) or "none"
        more = f" and {len(refs)} catalogue architectures (`mlscope models` lists them)" if refs else ""
        return UserError(f"unknown model {name!r}; {hint}known models: {known}{more}", field="model")
