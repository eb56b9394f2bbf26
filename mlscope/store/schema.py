"""Schema versions: which version of mlscope's layout a store's database holds, whether this mlscope
can use it, and the upgrade that brings an older one to the version this mlscope writes.

`schema_status()` and `upgrade()` are `Store`'s public methods (base.py), and each backend implements
the two primitives under them (`StoreBackend._schema_state`, `_upgrade_schema` in backend.py). What a
state means, and the words a refusal is given in, are the same for every backend: `SchemaState` owns
them.
The SQL versions are Alembic revisions (mlscope/store/sql/migrations), MongoDB's a number kept in
the `mlscope_meta` collection (mlscope/store/mongo/schema.py); docs/store.md tells users what is
refused and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlscope import __version__
from mlscope.contract.errors import UserError

__all__ = ["SCHEMA_STATES", "SchemaState", "Upgraded"]

# empty: nothing there yet (the schema is created at the current version on first open);
# current: the version this mlscope writes; older: an older mlscope's, `upgrade()` brings it up;
# newer: a newer mlscope's; foreign: another application's tables or collections.
SCHEMA_STATES = ("empty", "current", "older", "newer", "foreign")


@dataclass(frozen=True)
class SchemaState:
    """What a store's database holds.

    Attributes:
        backend: "sqlite", "postgresql" or "mongodb".
        location: the store URL, password masked.
        state: one of SCHEMA_STATES.
        current: the schema version found; None when the database is empty or another
            application's.
        required: the version this mlscope writes (the latest it knows).
        note: where the version found comes from, e.g. "written by mlscope 0.1.0, which kept no
            schema version"; "" when there is nothing to say.
        found: for a foreign database, the tables (or collections) found, in the order to name them.
        containers: what `found` lists: "tables" or "collections".
    """

    backend: str
    location: str
    state: str
    current: str | None
    required: str
    note: str = ""
    found: tuple[str, ...] = ()
    containers: str = "tables"

    def refusal(self) -> UserError | None:
        """Why a store in this state cannot be used as it is; None when it can (current, or empty)."""
        if self.state == "older":
            note = f" ({self.note})" if self.note else ""
            return UserError(
                f"the store at {self.location} has schema {self.current}{note}, and this mlscope needs "
                f"schema {self.required}: run `mlscope store upgrade` (with MLSCOPE_STORE_URL or "
                "--store-url naming this store) to upgrade it; the store was not changed",
                field="store_url",
            )
        if self.state == "newer":
            return UserError(
                f"the store at {self.location} has schema {self.current}, written by a newer mlscope: "
                f"this mlscope ({__version__}) knows schemas up to {self.required}; upgrade mlscope to "
                "use this store; the store was not changed",
                field="store_url",
            )
        if self.state == "foreign":
            return UserError(
                f"the database at {self.location} holds {self.containers} of another application "
                f"({', '.join(self.found)}): point MLSCOPE_STORE_URL at an empty database or an mlscope "
                "store; nothing was changed",
                field="store_url",
            )
        return None

    def check(self) -> None:
        """Raises the refusal, if any.

        Raises:
            UserError: when the store is older, newer or another application's (see `refusal`).
        """
        refusal = self.refusal()
        if refusal is not None:
            raise refusal


@dataclass(frozen=True)
class Upgraded:
    """What a backend's upgrade did.

    Attributes:
        previous: the schema the store had before (None: it was empty).
        steps: the versions applied, oldest first; empty when there was nothing to do.
        backfilled: how many stored rows (measurements) got values for the new fields.
        backup: where a copy of the database as it was before is kept; None when none was taken.
    """

    previous: str | None
    steps: tuple[str, ...] = ()
    backfilled: int = 0
    backup: str | None = None
