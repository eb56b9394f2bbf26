"""The SQL store: SQLite (the embedded default) and PostgreSQL (the farm), on SQLAlchemy 2.

`store` holds SQLStore, the Store primitives in SQL; `tables` the schema (tables `systems`,
`evaluations`, `measurements`, `spans`, `compare_keys`); `schema` its versions (Alembic revisions, the
scripts in `migrations`): the check on open and the upgrade; `engine` the engine set-up each database
needs to be shared safely between processes; `queries` the statements and row conversions the
primitives share; `aggregates` the comparison and layer-breakdown statements that aggregate in the
database; `series` those of history series; `maintenance` bulk import and retention; `revisions`
the revision ids; `listing` the SQLite listing's plain reader (stdlib sqlite3).

SQLStore is imported on first use of the name: `listing` and `revisions` are in this package and must
not import SQLAlchemy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlscope.store.sql.store import SQLStore

__all__ = ["SQLStore"]


def __getattr__(name: str) -> Any:
    if name == "SQLStore":
        from mlscope.store.sql.store import SQLStore

        return SQLStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
