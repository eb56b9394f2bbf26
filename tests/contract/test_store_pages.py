"""The Store contract, part 6: listing by keyset cursor (`page_evaluations`, `list_evaluations(cursor=)`)
and walking a whole listing (`iter_evaluations`). Walking by cursor visits every evaluation once, in
the listing's order, even while evaluations are added between pages; the last page has no cursor; a
bad cursor names the field."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.store import Store
from mlscope.store.paging import encode_cursor
from tests.contract.builders import T0, finish, ids_of, make_system, submit


def walk(store: Store, limit: int, **filters: Any) -> tuple[list[str], int]:
    """Every id `page_evaluations` gives page after page, and how many pages it took."""
    seen: list[str] = []
    cursor, pages = None, 0
    while True:
        items, cursor = store.page_evaluations(**filters, limit=limit, cursor=cursor)
        pages += 1
        seen += ids_of(items)
        if cursor is None:
            return seen, pages
        assert pages < 100, "the walk does not end"


def everything(store: Store, **filters: Any) -> list[str]:
    return ids_of(store.list_evaluations(**filters, limit=1000))


def read(store: Store, ids: list[str]) -> list[dict[str, Any]]:
    return [store.get_evaluation(id) for id in ids]


def test_walking_by_cursor_visits_every_evaluation_once_in_order(store: Store) -> None:
    # Given 23 evaluations, several created at the same instant (ties broken by id)
    for n in range(23):
        submit(store, id=f"{n % 5:02d}-{n:04d}", created_at=T0 + timedelta(minutes=n // 4))

    for limit in (1, 4, 5, 22, 23, 1000):
        # When walked page by page, Then the pages join into the whole listing, each once
        seen, pages = walk(store, limit)
        assert seen == everything(store)
        assert pages == max(1, -(-23 // limit))


def test_the_last_page_has_no_cursor_even_when_full(store: Store) -> None:
    first, second = submit(store, created_at=T0), submit(store, created_at=T0 + timedelta(hours=1))
    assert store.page_evaluations(limit=2) == (read(store, [second, first]), None)
    items, cursor = store.page_evaluations(limit=1)
    assert ids_of(items) == [second] and cursor is not None
    items, cursor = store.page_evaluations(limit=1, cursor=cursor)
    assert ids_of(items) == [first] and cursor is None
    assert store.page_evaluations(model="vgg16") == ([], None)


def test_evaluations_added_between_pages_shift_nothing(store: Store) -> None:
    # Given 12 evaluations an hour apart
    originals = [submit(store, created_at=T0 + timedelta(hours=n)) for n in range(12)]
    seen: list[str] = []
    added_behind: list[str] = []
    cursor = None
    page = 0
    while True:
        items, cursor = store.page_evaluations(limit=3, cursor=cursor)
        seen += ids_of(items)
        if cursor is None:
            break
        page += 1
        # When, between pages, evaluations are added: newer than any (as a live farm adds them), and
        # one older than the walk's position, which the walk has yet to reach
        submit(store, created_at=T0 + timedelta(days=1, hours=page))
        added_behind.append(submit(store, created_at=T0 - timedelta(hours=page)))

    # Then every original is seen exactly once, in order, and the later ones ahead of the walk never
    assert len(seen) == len(set(seen))
    assert [id for id in seen if id in originals] == originals[::-1]
    assert [id for id in seen if id not in originals] == added_behind
    assert seen == [id for id in everything(store) if id in seen]


def test_filters_apply_to_every_page(store: Store) -> None:
    # Given evaluations of two models, some succeeded on a system
    resnets = [submit(store, model="resnet18", created_at=T0 + timedelta(minutes=n)) for n in range(7)]
    for n in range(5):
        submit(store, model="bert", created_at=T0 + timedelta(minutes=n))
    for id in resnets[::2]:
        store.start_evaluation(id)
        finish(store, id, system=make_system(2))

    # When walked with filters, Then each page holds only what matches
    assert walk(store, 2, model="resnet18")[0] == resnets[::-1]
    assert walk(store, 3, system_id="sys-2", status="succeeded")[0] == resnets[::-2]
    assert walk(store, 2, model="bert", since=T0 + timedelta(minutes=2))[0] == everything(
        store, model="bert", since=T0 + timedelta(minutes=2)
    )


def test_a_cursor_of_list_evaluations_and_an_offset_after_it(store: Store) -> None:
    # Given ten evaluations
    ids = [submit(store, created_at=T0 + timedelta(minutes=n)) for n in range(10)][::-1]
    after = store.get_evaluation(ids[3])

    # When listed after the fourth by its own cursor, Then the rest follow; an offset skips from there
    cursor = encode_cursor(after["created_at"], after["id"])
    assert ids_of(store.list_evaluations(cursor=cursor, limit=3)) == ids[4:7]
    assert ids_of(store.list_evaluations(cursor=cursor, limit=3, offset=2)) == ids[6:9]
    assert store.count_evaluations() == 10


def test_iter_evaluations_reads_the_whole_listing_page_by_page(store: Store) -> None:
    # Given 25 evaluations, some at the same instant
    for n in range(25):
        submit(store, created_at=T0 + timedelta(minutes=n // 3))

    # When walked 4 at a time, Then it is the whole listing, in order, each once
    assert ids_of(list(store.iter_evaluations(page_size=4))) == everything(store)
    assert ids_of(list(store.iter_evaluations(page_size=25))) == everything(store)
    assert list(store.iter_evaluations(model="vgg16")) == []


def test_iter_evaluations_checks_its_arguments_before_it_starts(store: Store) -> None:
    with pytest.raises(UserError) as bad_status:
        store.iter_evaluations(status="done")  # no next(): the check is not deferred
    assert bad_status.value.field == "status"
    for page_size in (0, 1001, True):
        with pytest.raises(UserError) as bad_size:
            store.iter_evaluations(page_size=page_size)
        assert bad_size.value.field == "page_size"


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "not a cursor!",
        "%%%",
        "é",
        _b64("not json"),
        _b64('["2024-05-01T12:00:00+00:00"]'),
        _b64('["2024-05-01T12:00:00", "abc"]'),
        _b64('["yesterday", "abc"]'),
        _b64('["2024-05-01T12:00:00+00:00", ""]'),
        _b64('["2024-05-01T12:00:00+00:00", 7]'),
        _b64('{"t": 1}'),
        7,
    ],
)
def test_a_bad_cursor_names_the_field(store: Store, cursor: Any) -> None:
    submit(store, created_at=T0)
    with pytest.raises(UserError) as listed:
        store.list_evaluations(cursor=cursor)
    assert listed.value.field == "cursor"
    with pytest.raises(UserError) as paged:
        store.page_evaluations(cursor=cursor)
    assert paged.value.field == "cursor"
