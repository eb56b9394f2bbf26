"""The checks every kind of record shares: a caller's value turned into plain JSON, texts, objects,
aware datetimes, choices and integer bounds, each raising a UserError that names the offending field.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from mlscope.contract.errors import MlscopeError, UserError

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "check_aware",
    "check_choice",
    "check_int",
    "check_object",
    "check_optional_text",
    "check_text",
    "json_safe",
]

# The range every backend stores integers in (BSON and SQL BIGINT are 64-bit).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class _NotPlain(MlscopeError):
    """Raised by `_plain_copy` at the first value that is not exactly a plain JSON type."""


def _plain_copy(value: Any) -> Any:
    # The common case, a tree of exact dict/list/str/int/float/bool/None, copied without building a
    # field name per node or asking the number ABCs: most of what a bulk import used to spend here.
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is dict:
        copy = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            copy[key] = _plain_copy(item)
        return copy
    if kind is list or kind is tuple:
        return [_plain_copy(item) for item in value]
    raise _NotPlain


def json_safe(value: Any, field: str) -> Any:
    """A plain-JSON copy of `value`, so that every backend stores and returns the same thing.

    Non-finite floats become None: PostgreSQL's json type rejects NaN, and statistics over one sample
    (stdev, cv) are NaN, so storing them as null is the only form every backend keeps alike.

    Raises:
        UserError: naming the field holding something JSON cannot represent.
    """
    try:
        return _plain_copy(value)
    except _NotPlain:
        return _json_safe(value, field)


def _json_safe(value: Any, field: str) -> Any:
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, Mapping):
        copy: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise UserError(f"{field} has the key {key!r}: JSON object keys must be strings", field=field)
            copy[key] = _json_safe(item, f"{field}.{key}")
        return copy
    if isinstance(value, (list, tuple)):
        return [_json_safe(item, f"{field}[{index}]") for index, item in enumerate(value)]
    # Measurement code hands over numpy scalars and arrays; both turn into plain Python via tolist().
    to_list = getattr(value, "tolist", None)
    if callable(to_list):
        return _json_safe(to_list(), field)
    raise UserError(f"{field} is a {type(value).__name__}, which cannot be stored as JSON", field=field)


def check_text(value: Any, field: str) -> str:
    """`value` if it is a non-empty string.

    Raises:
        UserError: naming the field otherwise.
    """
    if not isinstance(value, str) or not value:
        raise UserError(f"{field} must be a non-empty string, not {value!r}", field=field)
    return value


def check_optional_text(value: Any, field: str) -> str | None:
    """`value` if it is None or a non-empty string.

    Raises:
        UserError: naming the field otherwise.
    """
    return None if value is None else check_text(value, field)


def check_object(value: Any, field: str) -> dict[str, Any]:
    """A plain-JSON copy of `value`, which must be an object (a mapping with string keys).

    Raises:
        UserError: naming the field otherwise.
    """
    if not isinstance(value, Mapping):
        raise UserError(f"{field} must be an object, not {type(value).__name__}", field=field)
    checked: dict[str, Any] = json_safe(value, field)
    return checked


def check_aware(value: datetime | None, field: str) -> datetime | None:
    """`value` converted to UTC.

    Raises:
        UserError: when `value` is not a datetime or carries no timezone, because a naive time could
            be local or UTC and guessing would silently shift results by hours.
    """
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise UserError(f"{field} must be a datetime, not {type(value).__name__}", field=field)
    if value.tzinfo is None or value.utcoffset() is None:
        raise UserError(f"{field}={value.isoformat()} has no timezone: give an aware datetime", field=field)
    return value.astimezone(timezone.utc)


def check_choice(value: Any, choices: Sequence[str], field: str) -> str:
    """`value` if it is one of `choices`.

    Raises:
        UserError: naming the field and the choices otherwise.
    """
    if value not in choices:
        raise UserError(f"{field}={value!r} is not one of {', '.join(choices)}", field=field)
    return str(value)


def check_int(field: str, value: Any, low: int) -> int:
    """`value` if it is an integer (not a bool) of at least `low`.

    Raises:
        UserError: naming the field otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UserError(f"{field}={value!r} must be an integer, {low} or more", field=field)
    return value
