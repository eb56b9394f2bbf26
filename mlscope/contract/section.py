"""What the request's settings sections (`load`, `generation`) share: each is a frozen dataclass that
validates itself on construction, made from a mapping that names only settings it has."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, fields
from typing import Any, ClassVar, TypeVar

from mlscope.contract.errors import UserError, check_known_keys

__all__ = ["SettingsSection"]

S = TypeVar("S", bound="SettingsSection")


class SettingsSection:
    """A mixin for a dataclass of settings named `SECTION` in a request."""

    SECTION: ClassVar[str]

    @classmethod
    def from_dict(cls: type[S], data: dict[str, Any] | None) -> S:
        """Settings from a mapping, defaults for what it leaves out.

        Raises:
            UserError: a key is not a setting (every unknown one is named) or a value is invalid;
                `field` names it.
        """
        if data is None:
            return cls()
        check_known_keys(data, [f.name for f in fields(cls)], cls.SECTION, field=cls.SECTION)  # type: ignore[arg-type]
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """Every setting by name; `from_dict(to_dict())` gives equal settings."""
        return asdict(self)  # type: ignore[call-overload]

    def _require_int(self, name: str, minimum: int, maximum: int) -> None:
        """Refuse setting `name` unless it is an integer in [minimum, maximum] (not a bool)."""
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise UserError(
                f"{self.SECTION} setting {name}={value!r} is invalid: expected an integer in "
                f"[{minimum}, {maximum}]",
                field=name,
            )

    def _require_number(self, name: str, expected: str, accept: Callable[[float], bool]) -> None:
        """Refuse setting `name` unless it is a finite number `accept` takes; keep it as a float."""
        value = getattr(self, name)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not accept(value)
        ):
            raise UserError(
                f"{self.SECTION} setting {name}={value!r} is invalid: expected {expected}", field=name
            )
        object.__setattr__(self, name, float(value))
