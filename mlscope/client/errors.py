"""The error the API client raises for an error answer: its own module, so the client's parts
(uploads, history) raise it without importing the client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlscope.contract.errors import UserError

__all__ = ["ApiError"]


class ApiError(UserError):
    """The API answered with an error.

    Attributes:
        method, path: the request, e.g. "POST", "/api/v1/evaluations".
        status: the HTTP status code.
        problem: the problem document (RFC 7807) the API answered with.
        errors: dotted field name → messages, when fields were at fault.
        field: the first field at fault, or None.
    """

    def __init__(self, method: str, path: str, status: int, problem: Mapping[str, Any]) -> None:
        raw_errors = problem.get("errors")
        errors = dict(raw_errors) if isinstance(raw_errors, Mapping) else {}
        detail = problem.get("detail") or problem.get("title") or "no detail given"
        super().__init__(f"{method} {path}: {status} {detail}", field=next(iter(errors), None))
        self.method = method
        self.path = path
        self.status = status
        self.problem = dict(problem)
        self.errors: dict[str, list[str]] = errors
