"""No import circle between the package's modules: a module never imports, even inside a function or
for type checking only, a module that imports it back through any chain. A circle is how a concept cut
in two shows, and it makes the order modules load in matter."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "mlscope"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The module file an imported name lands in: the longest known module prefix of it."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: Path, here: str, modules: set[str]) -> set[str]:
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from pkg import module` imports that module; `from module import name` the module
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved and resolved != here and resolved.startswith("mlscope"):
                found.add(resolved)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in sorted(root.rglob("*.py"))}
    modules = set(paths)
    return {name: _imports(path, name, modules) for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package_circles() -> list[list[str]]:
    # A package's __init__ re-exporting its modules is not a circle with them: edges from a package to
    # its own submodules are left out (the submodule importing its package's name still counts).
    graph = {
        name: {t for t in targets if not t.startswith(name + ".")} for name, targets in import_graph().items()
    }
    return circles(graph)


def test_no_module_imports_itself_back_through_a_chain() -> None:
    # Given the import graph of every module of the package, imports inside functions included
    graph = import_graph()
    assert len(graph) > 250 and sum(len(targets) for targets in graph.values()) > 1000
    # Then no chain of imports leads from a module back to itself
    assert _package_circles() == []


def test_the_circle_finder_finds_a_circle() -> None:
    # The check above can fail: three modules in a ring are found, a chain is not.
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
