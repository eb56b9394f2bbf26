"""The API's routes are registered where they can be read: every module of mlscope.api that routes
requests owns the blueprint it routes on, and the app factory registers every such blueprint (a
sub-resource's blueprint nested in its parent's by the parent's module), so no route is added to
another module's blueprint by an import's side effect."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest
from flask import Flask

from mlscope.api import create_app
from mlscope.contract.settings import load_settings
from mlscope.store import open_store
from tests.conftest import REPO

API = REPO / "mlscope" / "api"


def _routed_on(tree: ast.Module) -> set[str]:
    """Names whose `.route(...)` decorates something in the module."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            for decorator in node.decorator_list:
                call = decorator.func if isinstance(decorator, ast.Call) else decorator
                if (
                    isinstance(call, ast.Attribute)
                    and call.attr == "route"
                    and isinstance(call.value, ast.Name)
                ):
                    names.add(call.value.id)
    return names


def _assigned(tree: ast.Module) -> set[str]:
    return {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }


def _routing_modules() -> dict[str, ast.Module]:
    trees = {path.stem: ast.parse(path.read_text()) for path in sorted(API.glob("*.py"))}
    return {name: tree for name, tree in trees.items() if _routed_on(tree)}


def test_every_module_routes_only_on_its_own_blueprint() -> None:
    # Given the API's modules that route requests
    modules = _routing_modules()
    assert {"evaluations", "compare", "diff", "export", "traces"} <= set(modules)
    # Then each routes only on names it assigns itself (its own blueprint), none it imported
    borrowed = {name: sorted(_routed_on(tree) - _assigned(tree)) for name, tree in modules.items()}
    assert {name: names for name, names in borrowed.items() if names} == {}


@pytest.fixture
def app(mlscope_env: dict[str, str]) -> Iterator[Flask]:
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as store:
        made = create_app(load_settings(), store=store)
        yield made
        made.extensions["mlscope"].agents.close()


def test_the_app_registers_every_routing_modules_blueprint(app: Flask) -> None:
    # Given the app the factory made, and the blueprints the routing modules own
    import importlib

    owned = {importlib.import_module(f"mlscope.api.{name}").blp for name in _routing_modules()}
    # Then each is registered, top-level or nested in its parent's
    registered = set(app.blueprints.values())
    assert {blp.name for blp in owned - registered} == set()
    # And a nested sub-resource keeps its parent's path: /compare/diff, /evaluations/export
    rules = {rule.rule: rule.endpoint for rule in app.url_map.iter_rules()}
    assert rules["/api/v1/compare/diff"] == "compare.diff.CompareDiff"
    assert rules["/api/v1/evaluations/export"] == "evaluations.export.EvaluationExport"
    assert (
        rules["/api/v1/evaluations/<evaluation_id:evaluation_id>/trace"]
        == "evaluations.traces.EvaluationTrace"
    )
    assert rules["/api/v1/bricks/estimates"] == "bricks.BrickEstimates"
