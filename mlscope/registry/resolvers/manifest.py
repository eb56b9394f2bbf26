"""Manifest names: the manifests that ship (`mlscope/manifests/`) or sit in `MLSCOPE_MANIFESTS`,
one per (name, framework). A manifest file's name shadows a catalogue entry of the same name on
every framework (the dispatcher asks this resolver first). A reference that looks like a path is
never a manifest name: it is turned away without looking at the manifests, which a registry may not
have read yet (`LazyManifests`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest
from mlscope.registry.model_options import ModelOptions, apply_options
from mlscope.registry.resolvers.base import Resolver
from mlscope.registry.resolvers.forms import looks_like_path

__all__ = ["ManifestResolver", "no_manifest_for"]


def no_manifest_for(name: str, framework: str, frameworks: list[str]) -> UserError:
    """The error for a known name without a manifest for `framework` (field "framework")."""
    return UserError(
        f"model {name!r} has no manifest for framework {framework!r}; it has: {', '.join(frameworks)}",
        field="framework",
    )


class ManifestResolver(Resolver):
    """A name some manifest file has (for any framework)."""

    kind = "manifest"

    def __init__(self, by_key: Mapping[tuple[str, str], Manifest]) -> None:
        self._by_key = by_key

    @cached_property
    def _frameworks(self) -> dict[str, list[str]]:
        """The frameworks of each name; reading it reads the manifests."""
        frameworks: dict[str, list[str]] = {}
        for name, framework in self._by_key:
            frameworks.setdefault(name, []).append(framework)
        return frameworks

    def names(self) -> list[str]:
        """The sorted model names of the manifest files."""
        return sorted(self._frameworks)

    def matches(self, ref: str) -> bool:
        return not looks_like_path(ref) and ref in self._frameworks

    def frameworks(self, ref: str) -> list[str]:
        return sorted(self._frameworks.get(ref, ()))

    def manifest(self, ref: str, framework: str) -> Manifest:
        """The manifest file's manifest of `ref` for `framework`, as written (no options).

        Raises:
            UserError: no manifest of that name for that framework (lists those it has).
        """
        manifest = self._by_key.get((ref, framework))
        if manifest is None:
            raise no_manifest_for(ref, framework, self.frameworks(ref))
        return manifest

    def resolve(self, ref: str, framework: str, options: ModelOptions) -> Manifest:
        return apply_options(self.manifest(ref, framework), options)
