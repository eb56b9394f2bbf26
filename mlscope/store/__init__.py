"""Results and traces: one Store interface, chosen by URL scheme.

`open_store(url)` looks the scheme up in `_STORES`, the registry of the `mlscope.stores` entry-point
group (mlscope's own schemes are `BUILTIN_STORES`; a third party's store is an entry point whose name
is its URL scheme and whose object is a Store class taking `(url, *, check_schema)`), and imports the
implementation only then, so a process that never opens PostgreSQL never needs its driver.

The parts: `base` (the Store interface, every public method in one class), `backend` (`StoreBackend`:
the primitives each backend implements, the one list of them), `leases` (what starts, attempts and
runners' leases share), `maintenance` (what bulk import and retention share), `schema` (schema
versions: the check on open, status and upgrade), `records` (the records, checks and public shapes
every backend shares), `paging` (page sizes, cursors, and `iter_spans`), `errors`, and the backends
`sql` (SQLite, PostgreSQL) and `mongo` (MongoDB).
"""

from __future__ import annotations

from collections.abc import Callable

from mlscope.contract.errors import UserError
from mlscope.contract.plugins import Registry
from mlscope.store.base import Store
from mlscope.store.errors import (
    AmbiguousEvaluationId,
    EvaluationNotFound,
    InvalidTransition,
    StoreUnavailable,
    SystemNotFound,
)
from mlscope.store.paging import iter_spans
from mlscope.store.records import STATUSES, TRACE_LEVELS

__all__ = [
    "BUILTIN_STORES",
    "STATUSES",
    "TRACE_LEVELS",
    "AmbiguousEvaluationId",
    "EvaluationNotFound",
    "InvalidTransition",
    "Store",
    "StoreUnavailable",
    "SystemNotFound",
    "iter_spans",
    "open_store",
]

# mlscope's own stores (pyproject.toml's `mlscope.stores` entry points): URL scheme → "module:class".
BUILTIN_STORES: dict[str, str] = {
    "sqlite": "mlscope.store.sql:SQLStore",
    "postgresql": "mlscope.store.sql:SQLStore",
    "postgresql+psycopg": "mlscope.store.sql:SQLStore",
    "mongodb": "mlscope.store.mongo:MongoStore",
    "mongodb+srv": "mlscope.store.mongo:MongoStore",
}

# Every store, by URL scheme.
_STORES: Registry[Callable[..., Store]] = Registry("mlscope.stores", BUILTIN_STORES)


def open_store(url: str, *, check_schema: bool = True) -> Store:
    """Opens the store at `url`, creating its schema in an empty database.

    Args:
        url: `sqlite:///path/to/file.db`, `postgresql://user@host:port/database`,
            `mongodb://host:port/database`, ...
        check_schema: refuse a database whose schema is not the one this mlscope writes (an older or
            newer mlscope's, or another application's); False opens it as it is and changes nothing,
            for `Store.schema_status()` and `Store.upgrade()` (`mlscope store status|upgrade`).

    Returns:
        The Store implementation registered for the URL's scheme.

    Raises:
        UserError: when the URL has no scheme, the scheme is unknown, the store cannot be opened, or
            (check_schema) its schema is not this mlscope's (the message says what to do).
    """
    scheme, separator, _ = url.partition("://") if isinstance(url, str) else ("", "", "")
    if not separator or not scheme:
        raise UserError(f"store URL {url!r} is not a URL: expected scheme://...", field="store_url")
    if scheme.lower() not in _STORES:
        raise UserError(
            f"store URL scheme {scheme!r} is not supported: use one of {', '.join(sorted(_STORES))}",
            field="store_url",
        )
    return _STORES[scheme.lower()](url, check_schema=check_schema)
