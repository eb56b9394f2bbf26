"""The SQL schema's revision ids, read from the migration scripts' text without importing Alembic or
SQLAlchemy: every store open checks the head, and so does the SQLite listing's plain reader
(listing.py), which must stay free of SQLAlchemy's import.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

__all__ = ["MIGRATIONS", "REVISION_PREFIX", "VERSION_TABLE", "head_revision", "revisions"]

MIGRATIONS = Path(__file__).parent / "migrations"
# Every revision id of mlscope's starts with this; an unknown id with it was written by a newer mlscope.
REVISION_PREFIX = "mlscope_"
# The table Alembic keeps a database's revision in.
VERSION_TABLE = "alembic_version"

_REVISION_LINE = re.compile(
    r"^(down_revision|revision)\s*(?::[^=]*)?=\s*(?:None|[\"']([^\"']+)[\"'])", re.MULTILINE
)


@functools.lru_cache(maxsize=1)
def revisions() -> list[str]:
    """The revision ids, oldest first, read from the revision files' `revision` and `down_revision`
    lines: importing Alembic to read them costs a cold `mlscope run` a quarter of a second (a test
    checks this agrees with Alembic's own reading)."""
    down_of: dict[str, str | None] = {}
    for path in (MIGRATIONS / "versions").glob("*.py"):
        found = {name: value for name, value in _REVISION_LINE.findall(path.read_text(encoding="utf-8"))}
        if "revision" in found:
            down_of[found["revision"]] = found.get("down_revision") or None
    chain: list[str] = []
    previous: str | None = None
    while len(chain) < len(down_of):
        following = [revision for revision, down in down_of.items() if down == previous]
        assert len(following) == 1, f"the migrations form one chain; after {previous}: {following}"
        previous = following[0]
        chain.append(previous)
    return chain


def head_revision() -> str:
    """The revision this code creates and needs."""
    return revisions()[-1]
