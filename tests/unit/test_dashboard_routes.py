"""The dashboard's pages are registered in one place: each page module's `register(pages)` adds its
URL rules, mlscope.api.dashboard calls every one of them, and no module adds a page route by being
imported (tests/integration/test_api_routes.py holds the whole route table)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

from flask import Blueprint, Flask

import mlscope.api.dashboard as dashboard
from mlscope.api.dashboard.blueprint import PAGES


def _modules() -> list[ModuleType]:
    return [
        importlib.import_module(f"{dashboard.__name__}.{info.name}")
        for info in pkgutil.iter_modules(dashboard.__path__)
    ]


def _rules(blueprint: Blueprint) -> set[tuple[str, str]]:
    app = Flask(__name__)
    app.register_blueprint(blueprint)
    return {(rule.rule, rule.endpoint) for rule in app.url_map.iter_rules() if rule.endpoint != "static"}


def test_the_registered_pages_are_exactly_the_page_modules_own() -> None:
    page_modules = [module for module in _modules() if hasattr(module, "register")]
    assert page_modules
    fresh = Blueprint(PAGES.name, __name__)
    for module in page_modules:
        module.register(fresh)
    assert _rules(fresh) == _rules(PAGES)


def test_no_module_adds_a_page_route_by_being_imported() -> None:
    for module in _modules():
        assert "@PAGES.route" not in inspect.getsource(module), module.__name__
