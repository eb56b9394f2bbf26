"""The range of a numeric setting, said once: the settings classes check values with it, and the HTTP
API's OpenAPI document states it (`minimum`, `exclusiveMinimum`, ...), so the two cannot drift."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Bound"]


@dataclass(frozen=True)
class Bound:
    """An integer or a finite number within [low, high], either end open or absent.

    Attributes:
        integer: an integer (never a bool); otherwise any finite number.
        low, high: the ends; None for none.
        low_open, high_open: the end itself is excluded.
        note: said after the range in a refusal, e.g. why the range is what it is.
    """

    integer: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    note: str = ""

    def accepts(self, value: Any) -> bool:
        """Whether `value` is of the kind and within the range."""
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def expected(self) -> str:
        """What a refusal says is expected: "an integer in [1, 1024]", "a number > 0"."""
        kind = "an integer" if self.integer else "a number"
        low, high = _text(self.low), _text(self.high)
        if low is not None and high is not None:
            text = f"{kind} in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        elif low is not None:
            text = f"{kind} {'>' if self.low_open else '≥'} {low}"
        elif high is not None:
            text = f"{kind} {'<' if self.high_open else '≤'} {high}"
        else:
            text = kind
        return f"{text} {self.note}" if self.note else text

    def schema(self) -> dict[str, Any]:
        """The range as an OpenAPI 3.0 schema (its exclusive ends as `exclusiveMinimum: true`)."""
        document: dict[str, Any] = {"type": "integer" if self.integer else "number"}
        if self.low is not None:
            document["minimum"] = self.low
            if self.low_open:
                document["exclusiveMinimum"] = True
        if self.high is not None:
            document["maximum"] = self.high
            if self.high_open:
                document["exclusiveMaximum"] = True
        return document


def _text(value: float | None) -> str | None:
    return None if value is None else f"{value:g}" if isinstance(value, float) else str(value)
