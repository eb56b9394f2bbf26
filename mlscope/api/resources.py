"""The HTTP API's resources, by name: the `mlscope.resources` entry-point group, each entry naming a
flask-smorest `Blueprint` (docs/architecture.md, "Where a change goes").

mlscope's own are `BUILTIN_RESOURCES`, registered first and in that order (the OpenAPI document's tag
order); a third party's resource is an entry point of its own distribution naming its blueprint,
registered after them. A sub-resource is nested in its parent's blueprint by the parent's module
(`/compare/diff` in `api/compare.py`), not listed here.
"""

from __future__ import annotations

from flask_smorest import Api, Blueprint

from mlscope.contract.plugins import Registry

__all__ = ["BUILTIN_RESOURCES", "RESOURCES", "register_resources"]

# mlscope's own resources (pyproject.toml's `mlscope.resources` entry points): name → "module:blueprint".
BUILTIN_RESOURCES: dict[str, str] = {
    "evaluations": "mlscope.api.evaluations:blp",
    "catalog": "mlscope.api.catalog:blp",
    "uploads": "mlscope.api.uploads:blp",
    "datasets": "mlscope.api.datasets:blp",
    "compare": "mlscope.api.compare:blp",
    "history": "mlscope.api.history:blp",
    "bricks": "mlscope.api.bricks:blp",
    "ops": "mlscope.api.ops:blp",
}

# Every resource, by name.
RESOURCES: Registry[Blueprint] = Registry("mlscope.resources", BUILTIN_RESOURCES, kind=Blueprint)


def register_resources(api: Api) -> None:
    """Register every resource's blueprint on `api`: mlscope's own, then the installed plugins'."""
    for name in RESOURCES:
        api.register_blueprint(RESOURCES[name])
