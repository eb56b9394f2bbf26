"""The model catalogue: every architecture the installed torchvision can build, a curated list of timm
models and a curated list of transformers model types, named `torchvision:<builder>`, `timm:<model>`
and `hf:<model_type>`, and the models mlscope trains itself, `mlscope:<model>`, each turned into a
manifest on demand.

The entries are data (`torchvision.json`, `timm.json`, `transformers.json`, `mlscope.json`), generated
by `python -m mlscope.registry.catalogue.generate` and committed; this module reads them and
imports no deep-learning framework, so a process without torch can list the catalogue and resolve its
names. A manifest made here goes through `parse_manifest` like a YAML file, so it is validated and
hashed the same way.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest, parse_manifest

__all__ = [
    "LIBRARY_FILES",
    "MANIFEST_VERSION",
    "OWN_LIBRARY",
    "Catalogue",
    "CatalogueEntry",
    "CatalogueInput",
]

# One generated file per library, in this package.
LIBRARY_FILES = {
    "torchvision": "torchvision.json",
    "timm": "timm.json",
    "transformers": "transformers.json",
    "mlscope": "mlscope.json",
}
# The library whose entries name a factory of mlscope's own (`source: {python: mlscope....}`): shipped
# data names it, so no code travels with a request that names the entry.
OWN_LIBRARY = "mlscope"
MANIFEST_VERSION = "1.0"


@dataclass(frozen=True)
class CatalogueInput:
    """One model input: per-sample shape (no batch axis), dtype, layout, and [low, high) of its
    synthetic values where they matter (token ids)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    layout: str | None = None
    value_range: tuple[float, float] | None = None


def _range(value: Any) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))


@dataclass(frozen=True)
class CatalogueEntry:
    """One architecture of the catalogue.

    Attributes:
        ref: what users name it by, "torchvision:resnet18", "timm:convnext_tiny" or "hf:bert"; also its
            manifests' name.
        library: "torchvision", "timm" or "transformers".
        name: the builder (torchvision), model name (timm) or model type (transformers).
        family: the architecture family ("resnet", "vit", "bert", "gpt2").
        group: the library's own grouping ("classification", "detection", "encoder", "decoder", ...).
        task: one of the manifest tasks.
        frameworks: the frameworks it is meant for, in the registrations' order.
        description: one paragraph, generated.
        inputs: the inputs, in the order the model takes them.
        outputs: the output names.
        source: the manifest's `source` mapping.
        unsupported: frameworks that can build its source but were measured failing on it, with why
            (`benchmarks/catalogue.py --record-failures`); they are not among `frameworks`.
    """

    ref: str
    library: str
    name: str
    family: str
    group: str
    task: str
    frameworks: tuple[str, ...]
    description: str
    inputs: tuple[CatalogueInput, ...]
    outputs: tuple[str, ...]
    source: Mapping[str, Any] = field(hash=False)
    document: Mapping[str, Any] = field(hash=False, repr=False, compare=False)
    unsupported: Mapping[str, str] = field(default_factory=dict, hash=False)

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> CatalogueEntry:
        inputs = tuple(
            CatalogueInput(
                name=spec["name"],
                shape=tuple(spec["shape"]),
                dtype=spec["dtype"],
                layout=spec.get("layout"),
                value_range=_range(spec.get("value_range")),
            )
            for spec in document["inputs"]
        )
        return cls(
            ref=document["ref"],
            library=document["library"],
            name=document["name"],
            family=document["family"],
            group=document["group"],
            task=document["task"],
            frameworks=tuple(document["frameworks"]),
            description=document["description"],
            inputs=inputs,
            outputs=tuple(spec["name"] for spec in document["outputs"]),
            source=copy.deepcopy(document["source"]),
            document=document,
            unsupported=dict(document.get("unsupported") or {}),
        )

    def matches(self, search: str) -> bool:
        """Whether `search` (case-insensitive) is part of the ref, family, group, task or library."""
        needle = search.strip().lower()
        return any(needle in text for text in (self.ref, self.family, self.group, self.task, self.library))


class Catalogue:
    """The catalogue's entries, by ref.

    Args:
        entries: at most one per ref.
        constraints: the version constraint of each framework the entries are meant for.

    Raises:
        ValueError: two entries share a ref.
    """

    def __init__(self, entries: Iterable[CatalogueEntry], constraints: Mapping[str, str]) -> None:
        self._by_ref: dict[str, CatalogueEntry] = {}
        for entry in entries:
            if entry.ref in self._by_ref:
                raise ValueError(f"the catalogue lists {entry.ref!r} twice")
            self._by_ref[entry.ref] = entry
        self._constraints = dict(constraints)
        self._manifests: dict[tuple[str, str], Manifest] = {}

    @classmethod
    def load(cls) -> Catalogue:
        """The catalogue shipped with mlscope, read from this package's JSON files."""
        entries: list[CatalogueEntry] = []
        constraints: dict[str, str] = {}
        package = resources.files(__name__)
        for filename in LIBRARY_FILES.values():
            document = json.loads(package.joinpath(filename).read_text(encoding="utf-8"))
            constraints.update(document["frameworks"])
            entries += [CatalogueEntry.from_document(entry) for entry in document["entries"]]
        return cls(_with_model_types(entries, constraints), constraints)

    def __len__(self) -> int:
        return len(self._by_ref)

    def entries(self) -> list[CatalogueEntry]:
        """Every entry, sorted by ref."""
        return [self._by_ref[ref] for ref in sorted(self._by_ref)]

    def refs(self) -> list[str]:
        """Every ref, sorted."""
        return sorted(self._by_ref)

    def has(self, ref: str) -> bool:
        """Whether `ref` names an entry (exactly as written)."""
        return ref in self._by_ref

    def find(
        self,
        task: str | None = None,
        framework: str | None = None,
        family: str | None = None,
        search: str | None = None,
    ) -> list[CatalogueEntry]:
        """The entries that match every filter given, sorted by ref.

        Args:
            task: a manifest task ("image_classification").
            framework: a framework the entry is meant for ("onnxruntime").
            family: an architecture family ("resnet"), exactly.
            search: text found (case-insensitively) in the ref, family, group, task or library.
        """
        return [
            entry
            for entry in self.entries()
            if (task is None or entry.task == task)
            and (framework is None or framework in entry.frameworks)
            and (family is None or entry.family == family)
            and (search is None or entry.matches(search))
        ]

    def get(self, ref: str) -> CatalogueEntry:
        """The entry named `ref`.

        Raises:
            UserError: no entry has that ref; suggests up to three close ones (field "model").
        """
        entry = self._by_ref.get(ref)
        if entry is None:
            raise self._unknown(ref)
        return entry

    def manifest(self, ref: str, framework: str, *, measured_failing: bool = False) -> Manifest:
        """The manifest of entry `ref` for `framework`, validated by `parse_manifest`.

        Args:
            measured_failing: also for a framework measured failing on it (`unsupported`), as the
                sweep that measures it again asks.

        Raises:
            UserError: the ref is unknown (suggests close ones, field "model"), or the entry is not
                meant for that framework (lists those it is, field "framework").
        """
        key = (ref, framework)
        if key not in self._manifests:
            entry = self.get(ref)
            allowed = entry.frameworks + (tuple(entry.unsupported) if measured_failing else ())
            if framework not in allowed:
                has = ", ".join(entry.frameworks)
                why = entry.unsupported.get(framework)
                seen = f" (measured failing here: {why})" if why else ""
                raise UserError(
                    f"catalogue model {ref!r} is not meant for framework {framework!r}{seen}; it has: {has}",
                    field="framework",
                )
            self._manifests[key] = parse_manifest(
                self._document(entry, framework),
                f"catalogue {ref} for {framework}",
                allow_code=entry.library == OWN_LIBRARY,
            )
        return self._manifests[key]

    def _document(self, entry: CatalogueEntry, framework: str) -> dict[str, Any]:
        raw = entry.document
        # mlscope's own entries say what they are judged on and what they reached (`from_mlscope`).
        judged = {"dataset": copy.deepcopy(raw["dataset"])} if "dataset" in raw else {}
        return {
            "name": entry.ref,
            "version": MANIFEST_VERSION,
            "task": entry.task,
            "description": entry.description,
            "framework": {"name": framework, "version": self._constraints[framework]},
            "source": copy.deepcopy(raw["source"]),
            "weights": "random",
            "inputs": copy.deepcopy(raw["inputs"]),
            "outputs": copy.deepcopy(raw["outputs"]),
            "attributes": {
                "catalogue": entry.library,
                "family": entry.family,
                **copy.deepcopy(raw.get("attributes") or {}),
            },
            **judged,
        }

    def _unknown(self, ref: str) -> UserError:
        wanted = ref.strip().lower()
        bare = wanted.rpartition(":")[2]
        refs_by_name: dict[str, list[str]] = {}
        for entry in self.entries():
            refs_by_name.setdefault(entry.name, []).append(entry.ref)
        # The same name in another namespace ("resnet18", "tv:resnet18"), then close spellings.
        close = list(refs_by_name.get(bare, []))
        close += difflib.get_close_matches(wanted, self.refs(), n=3, cutoff=0.6)
        for name in difflib.get_close_matches(bare, list(refs_by_name), n=3, cutoff=0.6):
            close += refs_by_name[name]
        suggestions = list(dict.fromkeys(close))[:3]
        hint = f"; did you mean {' or '.join(suggestions)}?" if suggestions else ""
        return UserError(
            f"unknown catalogue model {ref!r}{hint} "
            "(names are 'torchvision:<builder>', 'timm:<model>', 'hf:<model_type>' or 'mlscope:<model>')",
            field="model",
        )


def _with_model_types(entries: list[CatalogueEntry], constraints: dict[str, str]) -> list[CatalogueEntry]:
    """The entries, each also meant for the frameworks that name it among the architectures they run
    of its library (`FrameworkSpec.model_types`: llama.cpp runs Llama, not every transformers model;
    JAX runs the torchvision and transformers architectures it has Flax definitions of); their version
    constraints added to `constraints`."""
    from mlscope.runtime.frameworks import FRAMEWORKS

    takers = {name: spec for name, spec in FRAMEWORKS.items() if spec.model_types}
    if not takers:
        return entries
    for name, spec in takers.items():
        constraints.setdefault(name, spec.model_version)
    extended = []
    for entry in entries:
        more = tuple(
            name
            for name, spec in takers.items()
            if entry.library in spec.sources
            and entry.name in spec.model_types
            and name not in entry.frameworks
        )
        extended.append(dataclasses.replace(entry, frameworks=entry.frameworks + more) if more else entry)
    return extended
