"""Errors shared by every part. A `UserError` is the user's mistake: the CLI prints it in one line
and exits with code 2, the API answers it with a 4xx; anything else is ours."""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """Bad input: names what is wrong and what was expected.

    Args:
        message: one line, naming the offending value and what would have been accepted.
        field: the dotted name of the offending field, where there is one.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message
