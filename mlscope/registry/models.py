"""The model registry: every manifest mlscope knows, the shipped ones and the user's, by (name, framework),
and the catalogue's architectures (`torchvision:resnet18`, `hf:bert`, ...), each resolved to a manifest
when it is first asked for.

Manifests are read from the `mlscope.manifests` package directory, then from each extra
directory in order (the user's `MLSCOPE_MANIFESTS`); a later layer replaces an earlier one's
manifest for the same (name, framework). A broken file fails the whole load: skipping it would
make a model silently disappear. The user's directories are read when the registry loads, so their
errors surface at once; the shipped set and the catalogue are read when a name is first looked up,
so that a reference to a file (`./model.onnx`), which no name can be, does not pay for parsing them.
A manifest file named like a catalogue entry replaces the entry.
Each model reference is resolved by the resolver of its kind (`mlscope.registry.resolvers`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest, ManifestError, load_manifest, parse_manifest_text
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.model_options import ModelOptions
from mlscope.registry.resolvers import Resolvers

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


class LazyManifests(Mapping[tuple[str, str], Manifest]):
    """Manifests by (name, framework), built by `load` when first looked at (once, under a lock:
    the API resolves from several threads).

    Args:
        load: builds the mapping; what it raises, the first look raises (and the next tries again).
    """

    def __init__(self, load: Callable[[], dict[tuple[str, str], Manifest]]) -> None:
        self._load = load
        self._by_key: dict[tuple[str, str], Manifest] | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the manifests have been built."""
        return self._by_key is not None

    def _loaded(self) -> dict[tuple[str, str], Manifest]:
        if self._by_key is None:
            with self._lock:
                if self._by_key is None:
                    self._by_key = self._load()
        return self._by_key

    def __getitem__(self, key: tuple[str, str]) -> Manifest:
        return self._loaded()[key]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())


def _layered(extra: Sequence[dict[tuple[str, str], Manifest]]) -> LazyManifests:
    """The shipped manifests, read on first use, each extra layer (already read) over them in order."""

    def merge() -> dict[tuple[str, str], Manifest]:
        merged = _index(_load_shipped())
        for layer in extra:
            merged.update(layer)
        return merged

    return LazyManifests(merge)


class ModelRegistry:
    """The manifests that can be evaluated, looked up by model name and framework.

    Args:
        manifests: at most one manifest per (name, framework); or a `LazyManifests`, built when a
            name is first looked up (`load`'s shipped set).
        catalogue: architectures named `library:name`, resolved to manifests on demand; or what
            loads it, called when a name is first looked up (`load`'s); none when omitted.
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
        cache_dir: the mlscope cache directory (`Settings.cache_dir`), where an ONNX file's graph
            signature is kept by the file's SHA-256 so that the next resolution of the same bytes
            skips parsing the graph; None: every resolution parses it.

    Raises:
        ManifestError: two manifests share a (name, framework); names both files.
    """

    def __init__(
        self,
        manifests: Iterable[Manifest] | LazyManifests = (),
        catalogue: Catalogue | Callable[[], Catalogue] | None = None,
        *,
        local_files: bool = True,
        uploads: Callable[[str], Path] | None = None,
        dataset_uploads: Callable[[str], Path] | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        self._by_key: Mapping[tuple[str, str], Manifest] = (
            manifests if isinstance(manifests, LazyManifests) else _index(manifests)
        )
        self._local_files = local_files
        self.dataset_uploads = dataset_uploads
        self._resolvers = Resolvers(
            self._by_key, catalogue, local_files=local_files, uploads=uploads, cache_dir=cache_dir
        )

    @classmethod
    def load(
        cls,
        extra_dirs: Sequence[Path] = (),
        *,
        local_files: bool = True,
        uploads: Callable[[str], Path] | None = None,
        dataset_uploads: Callable[[str], Path] | None = None,
        cache_dir: Path | None = None,
    ) -> ModelRegistry:
        """Read each extra directory (recursively, *.yaml and *.yml); the shipped manifests and the
        catalogue are read when a name is first looked up (see the module's docstring).

        Args:
            extra_dirs: the user's manifest directories; each replaces manifests with the same
                (name, framework) from the shipped set and from directories before it.
            local_files, uploads, dataset_uploads, cache_dir: as the class's Args.

        Returns:
            The registry.

        Raises:
            UserError: an extra directory does not exist.
            ManifestError: a file of an extra directory is not a valid manifest, or two files in
                one of them define the same (name, framework). (The same of a shipped file is
                raised where a name is first looked up.)
        """
        extra = [_index(_load_directory(Path(directory))) for directory in extra_dirs]
        return cls(
            _layered(extra),
            catalogue=Catalogue.load,
            local_files=local_files,
            uploads=uploads,
            dataset_uploads=dataset_uploads,
            cache_dir=cache_dir,
        )

    @property
    def catalogue(self) -> Catalogue | None:
        """The catalogue behind `library:name` references, if this registry has one (loaded here
        when it has not been yet)."""
        return self._resolvers.catalogue.catalogue

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
        return self._resolvers.frameworks(name)

    def get(self, name: str, framework: str, options: ModelOptions | None = None) -> Manifest:
        """The manifest of model `name` (any reference, see `mlscope.registry.resolvers`) for
        `framework`, with the model options applied.

        Raises:
            UserError: the model is unknown (suggests close names), it has no manifest for this
                framework (lists the frameworks it has), a local reference where local files are
                not read, or a file that is missing, invalid, or does not fit the options.
        """
        return self._resolvers.resolve(name, framework, options)

    @property
    def resolvers(self) -> Resolvers:
        """The resolvers behind `get` and `frameworks_for`, one per kind of reference."""
        return self._resolvers

    def listing(self) -> list[tuple[str, str, str | None]]:
        """(name, origin, family) of every model, as `mlscope models` and GET /api/v1/models list them:
        the manifest files' names ("manifest"), then the catalogue's entries ("catalogue") that no
        manifest file of the same name replaces."""
        named = self.names()
        listed: list[tuple[str, str, str | None]] = [(name, "manifest", None) for name in named]
        catalogue = self.catalogue
        if catalogue is not None:
            taken = set(named)
            listed += [
                (entry.ref, "catalogue", entry.family)
                for entry in catalogue.entries()
                if entry.ref not in taken
            ]
        return listed
