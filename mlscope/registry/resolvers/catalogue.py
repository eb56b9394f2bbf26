"""Catalogue names, `torchvision:<builder>`, `timm:<model>`, `hf:<model_type>`, `mlscope:<model>`: the
catalogue's entries (`mlscope.registry.catalogue`), each made into a manifest on demand, for the
frameworks the entry is meant for.
"""

from __future__ import annotations

from mlscope.contract.manifest import Manifest
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.model_options import ModelOptions, apply_options
from mlscope.registry.resolvers.base import Resolver
from mlscope.registry.resolvers.forms import looks_like_path
from mlscope.registry.resolvers.manifest import no_manifest_for

__all__ = ["CatalogueResolver"]


class CatalogueResolver(Resolver):
    """A ref the catalogue has; none without a catalogue."""

    kind = "catalogue"

    def __init__(self, catalogue: Catalogue | None) -> None:
        self._catalogue = catalogue

    def refs(self) -> list[str]:
        """Every catalogue ref, sorted (none without a catalogue)."""
        return self._catalogue.refs() if self._catalogue is not None else []

    def matches(self, ref: str) -> bool:
        return self._catalogue is not None and self._catalogue.has(ref) and not looks_like_path(ref)

    def frameworks(self, ref: str) -> list[str]:
        assert self._catalogue is not None, "matches() is False without a catalogue"
        return sorted(self._catalogue.get(ref).frameworks)

    def manifest(self, ref: str, framework: str) -> Manifest:
        """The catalogue's manifest of `ref` for `framework` (no options).

        Raises:
            UserError: the entry is not meant for that framework (lists those it is).
        """
        assert self._catalogue is not None, "matches() is False without a catalogue"
        frameworks = self.frameworks(ref)
        if framework not in frameworks:
            raise no_manifest_for(ref, framework, frameworks)
        return self._catalogue.manifest(ref, framework)

    def resolve(self, ref: str, framework: str, options: ModelOptions) -> Manifest:
        return apply_options(self.manifest(ref, framework), options)
