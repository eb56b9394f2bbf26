"""What the OpenAPI document says of marshmallow fields beyond apispec's own conversion.

apispec writes a Range validator's bounds as `minimum`/`maximum` whether or not the bound itself is
allowed, so a document promised that `significance=1.0` or `tolerance=0` were accepted when the API
refuses them; `exclusive_bounds` adds OpenAPI 3.0's `exclusiveMinimum`/`exclusiveMaximum`.
"""

from __future__ import annotations

from typing import Any

from marshmallow import fields, validate

__all__ = ["exclusive_bounds"]


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
