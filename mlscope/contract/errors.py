"""Errors shared by every part. `MlscopeError` is the root of every exception mlscope defines, so
`except MlscopeError` tells mlscope's own failures from everything else's. A `UserError` is the user's
mistake: the CLI prints it in one line and exits with code 2, the API answers it with a 4xx; anything
else is ours."""

from __future__ import annotations

from typing import Any

__all__ = ["MARSHMALLOW_WORDING", "MlscopeError", "StoreUnavailable", "UserError", "check_known_keys"]


class MlscopeError(Exception):
    """The root of every exception mlscope defines (tests/unit/test_structure.py holds it so).

    Nothing raises it itself and no part catches it: it is for a caller that wants mlscope's own
    failures apart from its libraries' and Python's.
    """


class UserError(MlscopeError):
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


class StoreUnavailable(MlscopeError):
    """The store could not take or answer a call just now; its transaction was rolled back, so
    nothing of the call was kept. Worth retrying.

    Args:
        message: one line naming the store (password masked), what happened and that nothing was kept.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# marshmallow's stock messages, in the voice of the rest of mlscope's ("batch_sizes.0: must be an
# integer"); each door adds its own words for mappings (a manifest's, a JSON body's).
MARSHMALLOW_WORDING: dict[str, str] = {
    "Missing data for required field.": "required field is missing",
    "Field may not be null.": "must not be null",
    "Not a valid string.": "must be a string",
    "Not a valid integer.": "must be an integer",
    "Not a valid number.": "must be a number",
    "Not a valid list.": "must be a list",
    "Not a valid boolean.": "must be true or false",
    "Unknown field.": "unknown field",
}


def check_known_keys(data: Any, known: list[str], what: str, field: str | None = None) -> None:
    """Refuse a settings mapping that is not a mapping or names a key outside `known`.

    Raises:
        UserError: "<what> settings must be a mapping, got ..." (field `field`), or "unknown <what>
            setting(s) a, b: expected some of ..." naming every unknown key (field: the first).
    """
    if not isinstance(data, dict):
        raise UserError(f"{what} settings must be a mapping, got {type(data).__name__}", field=field)
    unknown = sorted(str(key) for key in data if key not in known)
    if unknown:
        raise UserError(
            f"unknown {what} setting(s) {', '.join(unknown)}: expected some of {', '.join(known)}",
            field=unknown[0],
        )
