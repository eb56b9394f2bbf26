"""Reading a store page by page: the page sizes, the check of the page a listing asks for, the loop
every paged read shares, and `iter_spans`, an evaluation's spans read SPAN_BATCH_SIZE at a time (how
the API and the CLI stream a trace without holding it in one request).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from mlscope.contract.errors import UserError

__all__ = ["MAX_LIST_LIMIT", "SPAN_BATCH_SIZE", "check_page", "iter_spans", "paged"]

MAX_LIST_LIMIT = 1000
# Spans are written and read this many at a time: big enough to amortise a round trip, small enough
# that a trace of millions never sits in memory as one request.
SPAN_BATCH_SIZE = 5000

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
