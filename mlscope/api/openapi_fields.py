"""What the OpenAPI document says of marshmallow fields beyond apispec's own conversion.

apispec writes a Range validator's bounds as `minimum`/`maximum` whether or not the bound itself is
allowed, so a document promised that `significance=1.0` or `tolerance=0` were accepted when the API
refuses them; `exclusive_bounds` adds OpenAPI 3.0's `exclusiveMinimum`/`exclusiveMaximum`.

A field whose schema is written out (metadata `openapi`: a settings section, from the class that
checks it) is documented as written (`stated_schema`); a schema class's `OPENAPI_RULES`, the rules
that tie its fields together, become its `allOf` (`RulesPlugin`).
"""

from __future__ import annotations

from typing import Any

from apispec import BasePlugin
from marshmallow import fields, validate

__all__ = ["RulesPlugin", "exclusive_bounds", "stated_schema"]


def exclusive_bounds(_converter: Any, field: fields.Field, **_: Any) -> dict[str, Any]:
    """`exclusiveMinimum`/`exclusiveMaximum: true` for the bounds a Range validator excludes (an
    apispec attribute function)."""
    attributes: dict[str, Any] = {}
    for validator in field.validators:
        if not isinstance(validator, validate.Range):
            continue
        if validator.min is not None and not validator.min_inclusive:
            attributes["exclusiveMinimum"] = True
        if validator.max is not None and not validator.max_inclusive:
            attributes["exclusiveMaximum"] = True
    return attributes


def stated_schema(_converter: Any, field: fields.Field, **_: Any) -> dict[str, Any]:
    """The schema written in the field's metadata `openapi`, over what apispec made of the field (an
    apispec attribute function, run last)."""
    stated: dict[str, Any] = field.metadata.get("openapi", {})
    return stated


class RulesPlugin(BasePlugin):
    """An apispec plugin: a schema class's `OPENAPI_RULES` become its `allOf`."""

    def schema_helper(self, name: str, definition: dict[str, Any], **kwargs: Any) -> dict[str, Any] | None:
        rules = getattr(kwargs.get("schema"), "OPENAPI_RULES", None)
        return {"allOf": list(rules)} if rules else None
