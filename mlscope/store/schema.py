"""Schema versions: which version of mlscope's layout a store's database holds, whether this mlscope
can use it, and the upgrade that brings an older one to the version this mlscope writes.

`StoreSchema` is mixed into `Store` (base.py): `schema_status()` and `upgrade()` are public, and each
backend implements the two primitives under them (`_schema_state`, `_upgrade_schema`). What a state
means, and the words a refusal is given in, are the same for every backend: `SchemaState` owns them.
The SQL versions are Alembic revisions (mlscope/store/sql/migrations), MongoDB's a number kept in
the `mlscope_meta` collection (mlscope/store/mongo/schema.py); docs/store.md tells users what is
refused and why.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from mlscope import __version__
from mlscope.contract.errors import UserError

__all__ = ["SCHEMA_STATES", "SchemaState", "StoreSchema", "Upgraded"]

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


class StoreSchema(ABC):
    """The schema-version methods every Store has."""

    def schema_status(self) -> dict[str, Any]:
        """The store's schema version against the one this mlscope needs. Works on a store opened
        with `open_store(url, check_schema=False)`, whatever it holds.

        Returns:
            {"backend", "store_url" (password masked), "state" (one of SCHEMA_STATES), "current"
            (None when empty or foreign), "required", "upgrade_needed", "note", "message" (why the
            store cannot be used as it is, or None)}.
        """
        state = self._schema_state()
        refusal = state.refusal()
        return {
            "backend": state.backend,
            "store_url": state.location,
            "state": state.state,
            "current": state.current,
            "required": state.required,
            "upgrade_needed": state.state == "older",
            "note": state.note,
            "message": None if refusal is None else str(refusal),
        }

    def upgrade(self) -> dict[str, Any]:
        """Brings the store to the schema this mlscope needs: an older one is migrated (its stored
        rows backfilled with the new fields), an empty one created; a current one is left as it is.
        A failed upgrade changes nothing.

        Returns:
            {"backend", "store_url", "from" (None: it was empty), "to", "upgraded" (False when there
            was nothing to do), "steps" (the versions applied), "backfilled" (rows given the new
            fields), "backup" (the path of a copy of the database from before, or None)}.

        Raises:
            UserError: when the store was written by a newer mlscope or holds another application's
                data; nothing is changed then.
            RuntimeError: when the migration itself failed; it was rolled back.
        """
        state = self._schema_state()
        if state.state in ("newer", "foreign"):
            state.check()
        upgraded = Upgraded(previous=state.current) if state.state == "current" else self._upgrade_schema()
        return {
            "backend": state.backend,
            "store_url": state.location,
            "from": upgraded.previous,
            "to": state.required,
            "upgraded": bool(upgraded.steps),
            "steps": list(upgraded.steps),
            "backfilled": upgraded.backfilled,
            "backup": upgraded.backup,
        }

    @abstractmethod
    def _schema_state(self) -> SchemaState:
        """What the store's database holds now, read without changing anything."""

    @abstractmethod
    def _upgrade_schema(self) -> Upgraded:
        """Looks again under the backend's lock (another process may have upgraded meanwhile) and
        brings an empty or older store to the current schema, all or nothing.

        Raises:
            UserError: the refusal of a newer or foreign store (SchemaState.check).
            RuntimeError: the migration failed; nothing was changed.
        """
