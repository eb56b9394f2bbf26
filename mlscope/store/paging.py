"""Reading a store page by page: the page sizes, the check of the page a listing asks for, the loop
every paged read shares, the opaque cursor of a listing's keyset pages, and `iter_spans`, an
evaluation's spans read SPAN_BATCH_SIZE at a time (how the API and the CLI stream a trace without
holding it in one request).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from mlscope.contract.errors import UserError

__all__ = [
    "EXPORT_PAGE_SIZE",
    "MAX_LIST_LIMIT",
    "SPAN_BATCH_SIZE",
    "check_page",
    "decode_cursor",
    "encode_cursor",
    "iter_spans",
    "paged",
]

MAX_LIST_LIMIT = 1000
# Spans are written and read this many at a time: big enough to amortise a round trip, small enough
# that a trace of millions never sits in memory as one request.
SPAN_BATCH_SIZE = 5000
# A walk through a listing (`Store.iter_evaluations`) reads this many evaluations at a time.
EXPORT_PAGE_SIZE = 200

_Item = TypeVar("_Item")


class SpanReader(Protocol):
    """What `iter_spans` needs of a Store (every Store is one)."""

    def resolve_id(self, prefix: str) -> str: ...

    def get_spans(
        self, evaluation_id: str, *, level: str | None = ..., limit: int | None = ..., offset: int = ...
    ) -> list[dict[str, Any]]: ...


def check_page(limit: Any, offset: Any) -> None:
    """Checks the page a listing asks for: `limit` from 1 to MAX_LIST_LIMIT, `offset` 0 or more.

    Raises:
        UserError: naming the invalid one.
    """
    for name, value, low, high in (("limit", limit, 1, MAX_LIST_LIMIT), ("offset", offset, 0, None)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            bounds = f"from {low} to {high}" if high else f"{low} or more"
            raise UserError(f"{name}={value!r} must be an integer {bounds}", field=name)


def encode_cursor(created_at: datetime | str, id: str) -> str:
    """The cursor of the listing page that follows the evaluation (created_at, id): URL-safe base64 of
    JSON, opaque to callers.

    Args:
        created_at: the evaluation's created_at, an aware datetime or its ISO 8601 text.
        id: its id.
    """
    when = created_at if isinstance(created_at, str) else created_at.isoformat()
    raw = json.dumps([when, id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: Any) -> tuple[datetime, str]:
    """The (created_at, id) a cursor of `encode_cursor` continues after.

    Raises:
        UserError: naming "cursor" when it is not one.
    """
    try:
        text = cursor + "=" * (-len(cursor) % 4)
        when, id = json.loads(base64.urlsafe_b64decode(text.encode("ascii")))
        created_at = datetime.fromisoformat(when)
        if not isinstance(id, str) or not id or created_at.utcoffset() is None:
            raise ValueError(id)
    except (TypeError, ValueError, UnicodeError, binascii.Error):
        raise UserError(
            f"cursor={cursor!r} is not a cursor: pass the next_cursor of the previous page", field="cursor"
        ) from None
    return created_at, id


def paged(read: Callable[[int], Sequence[_Item]]) -> Iterator[_Item]:
    """Everything `read(offset)` returns, page after page, until a page comes back empty.

    Args:
        read: reads the page starting at `offset`, the count of items already returned.
    """
    offset = 0
    while page := read(offset):
        yield from page
        offset += len(page)


def iter_spans(store: SpanReader, evaluation_id: str, level: str | None = None) -> Iterator[dict[str, Any]]:
    """An evaluation's spans ordered by start, read SPAN_BATCH_SIZE at a time.

    Args:
        store: where they are kept.
        evaluation_id: the id or a unique prefix of it.
        level: only spans of this level (one of SPAN_LEVELS); every level when None.

    Raises:
        EvaluationNotFound, AmbiguousEvaluationId: as `Store.resolve_id`.
        UserError: `level` is not a span level.
    """
    full_id = store.resolve_id(evaluation_id)
    yield from paged(
        lambda offset: store.get_spans(full_id, level=level, limit=SPAN_BATCH_SIZE, offset=offset)
    )
