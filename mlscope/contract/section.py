"""What the request's settings sections (`load`, `generation`) share: each is a frozen dataclass that
validates itself on construction, made from a mapping that names only settings it has. Its numeric
settings' ranges are data (`BOUNDS`), which the HTTP API's OpenAPI document states as they are checked."""

from __future__ import annotations

from dataclasses import MISSING, asdict, fields
from typing import Any, ClassVar, TypeVar

from mlscope.contract.bounds import Bound
from mlscope.contract.errors import UserError, check_known_keys

__all__ = ["SettingsSection"]

S = TypeVar("S", bound="SettingsSection")


class SettingsSection:
    """A mixin for a dataclass of settings named `SECTION` in a request."""

    SECTION: ClassVar[str]
    # The numeric settings' ranges, checked by `_check_bounds`.
    BOUNDS: ClassVar[dict[str, Bound]] = {}

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

    def _check_bounds(self) -> None:
        """Refuse a numeric setting outside its `BOUNDS` (None passes where it is the default);
        keep a number that is not an integer setting as a float."""
        for name, bound in self.BOUNDS.items():
            value = getattr(self, name)
            if value is None and self.default(name) is None:
                continue
            if not bound.accepts(value):
                raise UserError(
                    f"{self.SECTION} setting {name}={value!r} is invalid: expected {bound.expected()}",
                    field=name,
                )
            if not bound.integer:
                object.__setattr__(self, name, float(value))

    @classmethod
    def default(cls, name: str) -> Any:
        """Setting `name`'s default (MISSING when it has none)."""
        found = next(f for f in fields(cls) if f.name == name)  # type: ignore[arg-type]
        return found.default if found.default is not MISSING else MISSING
