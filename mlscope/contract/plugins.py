"""Plug-in points: one lazy registry per entry-point group, found by name.

Every kind of part that can be added from outside (frameworks, stores, runners, scenarios, brick
backends) is a `Registry` of one entry-point group (`mlscope.frameworks`, `mlscope.stores`,
`mlscope.runners`, `mlscope.scenarios`, `mlscope.bricks`). Each entry names one object by
`module:attribute`. mlscope's own entries are a table in the code of the part that owns the group
(the same table is pyproject.toml's entry points, which a test keeps equal), so a source checkout or
an install whose metadata is older finds them all; other distributions' entries come from the
installed metadata. Nothing is read or imported until the first lookup, and an entry's module only
when that entry is looked up.

Imports nothing of mlscope's outside the contract, and no package outside the standard library.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from mlscope.contract.errors import MlscopeError, UserError

if TYPE_CHECKING:
    import importlib.metadata

__all__ = ["DuplicatePlugin", "Registry", "UnknownPlugin", "entry_points", "load_object"]

T = TypeVar("T")

# Where an entry of mlscope's own table comes from, in messages.
BUILTIN = "mlscope (built in)"
_OWN_DISTRIBUTION = "mlscope"


class UnknownPlugin(MlscopeError, KeyError):
    """No entry of that name in a group; the message names the known ones."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class DuplicatePlugin(UserError):
    """Two sources declare the same name in one group; the message names both (an install to mend,
    reported as a user's mistake is: one line, exit 2)."""


def load_object(path: str) -> Any:
    """The object a `module:attribute` import path names (importing its module)."""
    module_name, _, attribute = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


# The last scan of the installed metadata: what it was made from (the path and the scanning function,
# which tests replace) and what it found. Every group's registry reads the one scan: each scan reads
# every installed distribution's entry points (tens of milliseconds), and a run looks up five groups.
_scan: tuple[tuple[tuple[str, ...], object], Any] | None = None
# A distribution's name as its metadata gives it, by the distribution object of the scan above: the
# metadata file is parsed on each read.
_names: dict[int, tuple[object, str | None]] = {}


def entry_points(group: str) -> Iterable[importlib.metadata.EntryPoint]:
    """The installed entry points of one group (importlib.metadata imported only now: it costs a
    command that never looks a plug-in up, such as a listing of a SQLite store, a visible part of
    its start). The installed metadata is scanned once while the path stays the same."""
    import importlib.metadata
    import sys

    global _scan
    made_from = (tuple(sys.path), importlib.metadata.entry_points)
    if _scan is None or _scan[0] != made_from:
        _scan = (made_from, importlib.metadata.entry_points())
        _names.clear()
    found = _scan[1]
    if hasattr(found, "select"):
        return cast("Iterable[importlib.metadata.EntryPoint]", found.select(group=group))
    # Python 3.9 (the Caffe2 environment's) returns a dict of groups and takes no `group=`.
    return cast("Iterable[importlib.metadata.EntryPoint]", found.get(group, ()))


def _distribution(entry: importlib.metadata.EntryPoint) -> str | None:
    dist = getattr(entry, "dist", None)
    if dist is None:
        return None
    known = _names.get(id(dist))
    if known is None or known[0] is not dist:
        known = _names[id(dist)] = (dist, dist.metadata["Name"])
    return known[1]


def _is_own(entry: importlib.metadata.EntryPoint) -> bool:
    """An entry of mlscope's own installed metadata (on Python 3.9, whose entry points do not know
    their distribution: one naming an object of the mlscope package)."""
    name = _distribution(entry)
    if name is None:
        return entry.value.partition(":")[0].split(".")[0] == _OWN_DISTRIBUTION
    return name.lower().replace("_", "-") == _OWN_DISTRIBUTION


def _source(entry: importlib.metadata.EntryPoint) -> str:
    name = _distribution(entry)
    return f"distribution {name}" if name else f"entry point {entry.value}"


class Registry(MutableMapping[str, T], Generic[T]):
    """The entries of one entry-point group, by name, loaded on first lookup and then cached.

    Iterating lists the names (the built-in table's order, then other distributions' by name, or by
    `sort_key` over the loaded objects); looking a name up imports the module its entry names.
    Setting a name replaces its entry in this process only (an object, or a `module:attribute`
    string loaded on lookup), which is how tests add a part for their duration.

    Args:
        group: the entry-point group.
        builtins: mlscope's own entries, name → `module:attribute`.
        kind: what every entry must be (a type its object is an instance of), if anything.
        sort_key: orders the names by their loaded objects (loading every entry to list them).

    Raises (on first lookup):
        DuplicatePlugin: two sources declare one name.
    """

    def __init__(
        self,
        group: str,
        builtins: Mapping[str, str],
        *,
        kind: type | None = None,
        sort_key: Callable[[str, T], Any] | None = None,
    ) -> None:
        self.group = group
        self.builtins = dict(builtins)
        self._kind = kind
        self._sort_key = sort_key
        self._targets: dict[str, object] | None = None
        self._sources: dict[str, str] = {}
        self._loaded: dict[str, T] = {}

    def _entries(self) -> dict[str, object]:
        if self._targets is None:
            targets: dict[str, object] = dict(self.builtins)
            sources = dict.fromkeys(self.builtins, BUILTIN)
            found = sorted(entry_points(self.group), key=lambda entry: entry.name)
            for entry in found:
                if _is_own(entry):
                    continue  # mlscope's own, whose table in the code is the one that counts
                if targets.get(entry.name) == entry.value:
                    continue  # the same declaration seen twice (Python 3.9 lists a distribution
                    # found twice on the path twice)
                source = _source(entry)
                if entry.name in targets:
                    raise DuplicatePlugin(
                        f"{self.group}: {entry.name!r} is declared twice, by {sources[entry.name]} "
                        f"({targets[entry.name]}) and by {source} ({entry.value}); uninstall one"
                    )
                targets[entry.name] = entry.value
                sources[entry.name] = source
            self._targets, self._sources = targets, sources
        return self._targets

    def source(self, name: str) -> str:
        """Where the entry `name` comes from (a distribution, or mlscope itself)."""
        self._entries()
        return self._sources.get(name, "this process")

    def __getitem__(self, name: str) -> T:
        if name in self._loaded:
            return self._loaded[name]
        targets = self._entries()
        if name not in targets:
            known = ", ".join(sorted(targets)) or "(none)"
            raise UnknownPlugin(f"{self.group} has no {name!r}; known: {known}")
        target = targets[name]
        loaded: Any = load_object(target) if isinstance(target, str) else target
        if self._kind is not None and not isinstance(loaded, self._kind):
            raise TypeError(
                f"{self.group} entry {name!r} from {self.source(name)} ({target}) is not a "
                f"{self._kind.__name__}"
            )
        self._loaded[name] = loaded
        return cast(T, loaded)

    def __setitem__(self, name: str, value: T | str) -> None:
        self._entries()[name] = value
        self._loaded.pop(name, None)
        self._sources[name] = "this process"

    def __delitem__(self, name: str) -> None:
        del self._entries()[name]
        self._loaded.pop(name, None)
        self._sources.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._entries()

    def __iter__(self) -> Iterator[str]:
        names = list(self._entries())
        if self._sort_key is not None:
            key = self._sort_key
            names.sort(key=lambda name: key(name, self[name]))
        return iter(names)

    def __len__(self) -> int:
        return len(self._entries())

    def __repr__(self) -> str:
        return f"Registry({self.group!r}, {list(self)!r})"
