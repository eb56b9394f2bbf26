"""Catalogue names, `torchvision:<builder>`, `timm:<model>`, `hf:<model_type>`, `mlscope:<model>`: the
catalogue's entries (`mlscope.registry.catalogue`), each made into a manifest on demand, for the
frameworks the entry is meant for. The catalogue may be given as its loader, called when a name is
first looked up: a reference that looks like a path is turned away without it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.model_options import ModelOptions, apply_options
from mlscope.registry.resolvers.base import Resolver
from mlscope.registry.resolvers.forms import looks_like_path
from mlscope.registry.resolvers.manifest import no_manifest_for

__all__ = ["CatalogueResolver"]


class CatalogueResolver(Resolver):
    """A ref the catalogue has; none without a catalogue.

    Args:
        catalogue: the catalogue, or what loads it (called once, on first use); None: no catalogue.
    """

    kind = "catalogue"

    def __init__(self, catalogue: Catalogue | Callable[[], Catalogue] | None) -> None:
        self._given = catalogue

    @cached_property
    def catalogue(self) -> Catalogue | None:
        """The catalogue (loaded here on first use when a loader was given); None without one."""
        given = self._given
        return given if given is None or isinstance(given, Catalogue) else given()

    def refs(self) -> list[str]:
        """Every catalogue ref, sorted (none without a catalogue)."""
        catalogue = self.catalogue
        return catalogue.refs() if catalogue is not None else []

    def matches(self, ref: str) -> bool:
        if looks_like_path(ref):
            return False
        catalogue = self.catalogue
        return catalogue is not None and catalogue.has(ref)

    def frameworks(self, ref: str) -> list[str]:
        assert self.catalogue is not None, "matches() is False without a catalogue"
        return sorted(self.catalogue.get(ref).frameworks)

    def manifest(self, ref: str, framework: str) -> Manifest:
        """The catalogue's manifest of `ref` for `framework` (no options).

        Raises:
            UserError: the entry is not meant for that framework (lists those it is).
        """
        assert self.catalogue is not None, "matches() is False without a catalogue"
        frameworks = self.frameworks(ref)
        if framework not in frameworks:
            error = no_manifest_for(ref, framework, frameworks)
            takes = self._model_types(framework)
            if takes:  # a framework of a few architectures says which (llama.cpp: hf:llama)
                error = UserError(f"{error}; {framework} runs {takes}", field=error.field)
            raise error
        return self.catalogue.manifest(ref, framework)

    def resolve(self, ref: str, framework: str, options: ModelOptions) -> Manifest:
        return apply_options(self.manifest(ref, framework), options)

    def _model_types(self, framework: str) -> str:
        """The catalogue refs `framework` is meant for when it runs a few architectures of its sources
        (FrameworkSpec.model_types), "" for a framework that runs what its sources build (or an
        unknown one)."""
        from mlscope.runtime.frameworks import FRAMEWORKS

        spec = FRAMEWORKS.get(framework)
        if spec is None or not spec.model_types or self.catalogue is None:
            return ""
        return ", ".join(entry.ref for entry in self.catalogue.find(framework=framework))
