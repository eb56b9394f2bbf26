"""Write the catalogue's JSON from the installed torchvision, timm and transformers, or check it.

    python -m mlscope.registry.catalogue.generate           # rewrite the JSON files (LIBRARY_FILES)
    python -m mlscope.registry.catalogue.generate --check   # exit 1 if they differ from what is installed

The output is deterministic (entries sorted by ref, keys sorted, two-space indent, one final newline),
so regenerating with the same libraries gives the same bytes and a library upgrade shows up as a diff.
This module imports torchvision, timm, transformers and the framework registrations, and builds the
models mlscope trains itself (their accuracy is part of their entries: `from_mlscope`); the catalogue
itself (`mlscope.registry.catalogue`) imports none of them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mlscope.registry.catalogue import LIBRARY_FILES

__all__ = ["FRAMEWORKS", "check", "generate", "main", "render"]

HERE = Path(__file__).resolve().parent

# The frameworks catalogue manifests are made for, each where its registration runs the entry's source.
FRAMEWORKS = ("pytorch", "onnxruntime", "openvino")


def _framework_constraints() -> dict[str, str]:
    """The version constraint the shipped manifests put on each framework (they agree on one)."""
    from mlscope.registry.models import ModelRegistry

    found: dict[str, set[str]] = {name: set() for name in FRAMEWORKS}
    for manifest in ModelRegistry.load().all():
        if manifest.framework.name in found:
            found[manifest.framework.name].add(manifest.framework.version)
    constraints = {}
    for name, versions in found.items():
        if len(versions) != 1:
            raise SystemExit(f"the shipped {name} manifests use {len(versions)} version constraints, not one")
        constraints[name] = versions.pop()
    return constraints


def _frameworks_for(source: dict[str, Any]) -> list[str]:
    from mlscope.runtime.frameworks import get_framework

    kind = next(iter(source))
    return [name for name in FRAMEWORKS if kind in get_framework(name).sources]


def _library(library: str) -> tuple[str, list[dict[str, Any]]]:
    if library == "torchvision":
        from mlscope.registry.catalogue.from_torchvision import torchvision_entries, torchvision_version

        return torchvision_version(), torchvision_entries()
    if library == "timm":
        from mlscope.registry.catalogue.from_timm import timm_entries, timm_version

        return timm_version(), timm_entries()
    if library == "mlscope":
        from mlscope.registry.catalogue.from_mlscope import mlscope_entries, mlscope_version

        return mlscope_version(), mlscope_entries()
    from mlscope.registry.catalogue.from_transformers import transformers_entries, transformers_version

    return transformers_version(), transformers_entries()


FAILURES = HERE / "failures.json"


def measured_failures() -> dict[str, dict[str, str]]:
    """{framework: {ref: reason}}: what `benchmarks/catalogue.py --record-failures` saw fail here."""
    return dict(json.loads(FAILURES.read_text(encoding="utf-8"))["failures"])


def generate(library: str, constraints: dict[str, str]) -> dict[str, Any]:
    """The catalogue document of one library, as the installed version describes it, each entry's
    frameworks those that can build its source and were not measured failing on it."""
    version, entries = _library(library)
    failures = measured_failures()
    for entry in entries:
        possible = _frameworks_for(entry["source"])
        unsupported = {
            name: failures[name][entry["ref"]] for name in possible if entry["ref"] in failures.get(name, {})
        }
        entry["frameworks"] = [name for name in possible if name not in unsupported]
        if unsupported:
            entry["unsupported"] = unsupported
    return {
        "generated_by": "python -m mlscope.registry.catalogue.generate",
        "library": library,
        "library_version": version,
        "frameworks": {name: constraints[name] for name in FRAMEWORKS},
        "entries": entries,
    }


_WIDTH = 110


def _dumps(value: Any, indent: int, prefix: int = 0) -> str:
    """JSON with sorted keys; a value that fits on its line (after `prefix` characters) stays on it,
    a longer one opens one level of two-space indent."""
    flat = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)
    if not isinstance(value, dict | list) or not value or indent + prefix + len(flat) <= _WIDTH:
        return flat
    inner = " " * (indent + 2)
    if isinstance(value, list):
        items = [inner + _dumps(item, indent + 2) for item in value]
    else:
        items = []
        for key in sorted(value):
            name = json.dumps(key, ensure_ascii=False) + ": "
            items.append(inner + name + _dumps(value[key], indent + 2, len(name)))
    opening, closing = ("[", "]") if isinstance(value, list) else ("{", "}")
    return opening + "\n" + ",\n".join(items) + "\n" + " " * indent + closing


def render(document: dict[str, Any]) -> str:
    """The document as the bytes committed: sorted keys, two-space indent, final newline."""
    return _dumps(document, 0) + "\n"


def _first_difference(committed: dict[str, Any], fresh: dict[str, Any]) -> str:
    if committed.get("library_version") != fresh["library_version"]:
        return (
            f"written from {fresh['library']} {committed.get('library_version')}, "
            f"{fresh['library_version']} is installed"
        )
    old = {entry["ref"]: entry for entry in committed.get("entries", [])}
    new = {entry["ref"]: entry for entry in fresh["entries"]}
    added, removed = sorted(set(new) - set(old)), sorted(set(old) - set(new))
    if added or removed:
        parts = [f"{len(added)} new ({', '.join(added[:3])})"] if added else []
        parts += [f"{len(removed)} gone ({', '.join(removed[:3])})"] if removed else []
        return "entries " + " and ".join(parts)
    for ref in sorted(new):
        fields = sorted(
            key for key in set(old[ref]) | set(new[ref]) if old[ref].get(key) != new[ref].get(key)
        )
        if fields:
            return f"{ref} differs in {', '.join(fields)}"
    keys = sorted(key for key in set(committed) | set(fresh) if committed.get(key) != fresh.get(key))
    return f"differs in {', '.join(keys)}" if keys else "differs in layout (not written by this generator)"


def check(library: str, fresh: dict[str, Any], path: Path) -> str | None:
    """None if `path` holds exactly what `render(fresh)` gives, else one line naming the difference."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return f"{path.name} is missing"
    if text == render(fresh):
        return None
    try:
        committed = json.loads(text)
    except ValueError as exc:
        return f"{path.name} is not JSON ({exc})"
    return f"{path.name} is not what {library} gives: {_first_difference(committed, fresh)}"


def main(argv: Sequence[str] | None = None, out: Callable[[str], object] = print) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mlscope.registry.catalogue.generate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="compare with the committed JSON; write nothing")
    args = parser.parse_args(argv)
    constraints = _framework_constraints()
    problems = []
    for library, filename in LIBRARY_FILES.items():
        fresh = generate(library, constraints)
        path = HERE / filename
        if args.check:
            problem = check(library, fresh, path)
            if problem is not None:
                problems.append(problem)
            continue
        path.write_text(render(fresh), encoding="utf-8")
        out(f"{filename}: {len(fresh['entries'])} entries from {library} {fresh['library_version']}")
    if problems:
        out("; ".join(problems) + " (regenerate: python -m mlscope.registry.catalogue.generate)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
