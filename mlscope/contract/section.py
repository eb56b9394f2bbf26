"""What the request's settings sections (`load`, `generation`) share: each is a frozen dataclass that
validates itself on construction, made from a mapping that names only settings it has."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, ClassVar, TypeVar

from mlscope.contract.errors import check_known_keys

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
