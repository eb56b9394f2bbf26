"""The Mongo store's calls answer StoreUnavailable, like the SQL store's, when the server does not:
pymongo raises its ConnectionFailure family (no server selectable within the timeout, a connection
reset or timed out mid-operation, a primary stepping down, a pool wait timing out), which escaped
the store as a bare PyMongoError, a 500 from the API. One class decorator wraps the store's storage
primitives, so no primitive has to remember it.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pymongo.errors import ConnectionFailure

from mlscope.store.errors import StoreUnavailable

__all__ = ["NOT_WRAPPED", "reports_unavailable"]

# Called while the store opens, where an unreachable server is the open's own error (UserError).
NOT_WRAPPED = frozenset({"_open_schema", "_create_indexes", "_collection", "_query"})

StoreClass = TypeVar("StoreClass", bound=type)


def _unavailable(location: str, error: ConnectionFailure) -> StoreUnavailable:
    # pymongo appends its whole topology description; the first part says what went wrong.
    reason = re.sub(r" \(configured timeouts:[^)]*\)", "", str(error)).split(", Timeout:")[0]
    return StoreUnavailable(
        f"the store at {location} did not take the call (no MongoDB server answered: {reason}); nothing "
        "of it was kept: try again once the database is reachable"
    )


def _wrapped(method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def generator(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from method(self, *args, **kwargs)
            except ConnectionFailure as error:
                raise _unavailable(self._location, error) from error

        return generator

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except ConnectionFailure as error:
            raise _unavailable(self._location, error) from error

    return call


def reports_unavailable(cls: StoreClass) -> StoreClass:
    """Wrap every storage primitive `cls` defines (its `_`-named methods, except NOT_WRAPPED)."""
    for name, member in list(vars(cls).items()):
        if (
            name.startswith("_")
            and not name.startswith("__")
            and name not in NOT_WRAPPED
            and inspect.isfunction(member)
        ):
            setattr(cls, name, _wrapped(member))
    return cls
