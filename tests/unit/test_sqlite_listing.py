"""The SQLite listing's plain reader (mlscope/store/sql/listing.py) against the store it reads: on a
real SQLite store filled through the Store API, every filter and page gives the documents and count
`list_evaluations` and `count_evaluations` give; what it cannot answer as the store would it leaves
to the store (None); and `mlscope results list` prints the same rows whichever path read them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mlscope.cli import main
from mlscope.contract.errors import UserError
from mlscope.store import Store, open_store
from mlscope.store.sql.listing import list_sqlite
from mlscope.store.sql.revisions import revisions
from tests.contract.builders import COLD_START, ERROR, T0, make_measurement, make_system, submit
from tests.contract.test_store_sections import ACCURACY, PARITY

MEMORY = {"peak_rss_mb": 412.3, "peak_device_mb": None}


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as opened:
        yield opened


def fill(store: Store) -> dict[str, str]:
    """Evaluations of every status, two models on two frameworks and two systems, sections and
    several measurements on some, two created at the same moment (the id orders them); their ids by
    what they are."""
    ids: dict[str, str] = {}
    for n, (model, framework) in enumerate(
        [("resnet18", "pytorch"), ("resnet18", "onnxruntime"), ("bert", "pytorch"), ("bert", "onnxruntime")]
    ):
        id = submit(store, model=model, framework=framework, created_at=T0 + timedelta(minutes=n))
        store.start_evaluation(id)
        store.finish_evaluation(
            id,
            system=make_system(1 + n % 2),
            framework={"name": framework, "version": "2.3.0", "threads": 4},
            cold_start=COLD_START,
            measurements=[
                make_measurement("single_stream", 8, mean=3.0),
                make_measurement("offline", 1),
                make_measurement("single_stream", 1, mean=1.5),
            ],
            **({"accuracy": ACCURACY, "parity": PARITY, "memory": MEMORY} if n == 0 else {}),
        )
        ids[f"{model} {framework}"] = id
    ids["queued"] = submit(store, model="bert", created_at=T0 + timedelta(minutes=9))
    ids["tied"] = submit(store, model="bert", created_at=T0 + timedelta(minutes=9))
    ids["running"] = submit(store, created_at=T0 + timedelta(minutes=10))
    store.start_evaluation(ids["running"], lease_owner="pid-1", lease_s=600)
    ids["failed"] = submit(store, framework="onnxruntime", created_at=T0 + timedelta(minutes=11))
    store.start_evaluation(ids["failed"])
    store.fail_evaluation(ids["failed"], error=ERROR)
    ids["cancelled"] = submit(store, model="bert", created_at=T0 + timedelta(minutes=12))
    store.cancel_evaluation(ids["cancelled"])
    return ids


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"model": "bert"},
        {"framework": "onnxruntime"},
        {"model": "resnet18", "framework": "pytorch"},
        {"status": "succeeded"},
        {"status": "queued", "model": "bert"},
        {"model": "nothing-of-the-kind"},
    ],
    ids=repr,
)
@pytest.mark.parametrize(("limit", "offset"), [(20, 0), (3, 0), (3, 2), (1, 7), (5, 40)])
def test_reads_what_the_store_lists(
    store: Store, url: str, filters: dict[str, Any], limit: int, offset: int
) -> None:
    # Given a store of evaluations of every kind
    fill(store)

    # When the plain reader and the store list them with the same filters and page
    read = list_sqlite(
        url,
        model=filters.get("model"),
        framework=filters.get("framework"),
        status=filters.get("status"),
        limit=limit,
        offset=offset,
    )

    # Then both give the same documents in the same order, and the same count
    assert read is not None
    assert read == (
        store.list_evaluations(**filters, limit=limit, offset=offset),
        store.count_evaluations(**filters),
    )


def test_sections_systems_and_measurements_come_back_whole(store: Store, url: str) -> None:
    ids = fill(store)

    read = list_sqlite(url, model="resnet18", framework="pytorch", status="succeeded", limit=1, offset=0)

    assert read is not None
    [document], total = read
    assert total == 1 and document["id"] == ids["resnet18 pytorch"]
    assert (document["accuracy"], document["parity"], document["memory"]) == (ACCURACY, PARITY, MEMORY)
    assert document["system"] == make_system(1)
    assert [(m["scenario"], m["batch_size"]) for m in document["measurements"]] == [
        ("offline", 1),
        ("single_stream", 1),
        ("single_stream", 8),
    ]


@pytest.mark.parametrize(
    ("field", "arguments"),
    [
        ("status", {"status": "done"}),
        ("limit", {"limit": 0}),
        ("limit", {"limit": 1001}),
        ("offset", {"offset": -1}),
        ("model", {"model": ""}),
    ],
)
def test_refuses_what_the_store_refuses_in_its_words(
    store: Store, url: str, field: str, arguments: dict[str, Any]
) -> None:
    page = {"model": None, "framework": None, "status": None, "limit": 20, "offset": 0}

    with pytest.raises(UserError) as refused:
        list_sqlite(url, **{**page, **arguments})
    with pytest.raises(UserError) as by_store:
        store.list_evaluations(**{**page, **arguments})

    assert (refused.value.field, str(refused.value)) == (field, str(by_store.value))


def test_leaves_to_the_store_what_it_cannot_answer_as_the_store_would(
    store: Store, url: str, tmp_path: Path
) -> None:
    page: dict[str, Any] = {"model": None, "framework": None, "status": None, "limit": 20, "offset": 0}
    fill(store)
    assert list_sqlite(url, **page) is not None

    # A database that is not a plain SQLite file, or no file yet (opening one creates it)
    assert list_sqlite("sqlite://", **page) is None
    assert list_sqlite("sqlite:///:memory:", **page) is None
    assert list_sqlite(f"{url}?timeout=5", **page) is None
    assert list_sqlite("postgresql://localhost/mlscope", **page) is None
    assert list_sqlite(f"sqlite:///{tmp_path / 'none.db'}", **page) is None
    assert not (tmp_path / "none.db").exists()

    # A running evaluation whose lease has expired: the store's listing sweeps it first
    assert list_sqlite(url, **page, now=T0 + timedelta(days=9999)) is None

    # A schema other than the head revision: opening the store refuses it with what to do
    with sqlite3.connect(tmp_path / "store.db") as connection:
        connection.execute("UPDATE alembic_version SET version_num = ?", (revisions()[-2],))
    assert list_sqlite(url, **page) is None


def test_results_list_prints_the_rows_the_store_path_prints(
    mlscope_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a store whose evaluations all ran on one system, so that listing them by that system
    # (which the store resolves: the SQLAlchemy path) lists them all
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as store:
        for n, model in enumerate(["resnet18", "bert", "resnet18"]):
            id = submit(store, model=model, created_at=T0 + timedelta(minutes=n))
            store.start_evaluation(id)
            store.finish_evaluation(
                id,
                system=make_system(1),
                framework={"name": "pytorch", "version": "2.3.0"},
                cold_start=COLD_START,
                measurements=[make_measurement("single_stream", 1)],
                **({"accuracy": ACCURACY} if n == 1 else {}),
            )

    printed = {}
    for path, options in (("sqlite3", []), ("store", ["--system", "sys-1"])):
        for output in ([], ["--json"]):
            main(["results", "list", *options, *output])
            printed[path, bool(output)] = capsys.readouterr().out

    assert printed["sqlite3", False] == printed["store", False]
    assert printed["sqlite3", True] == printed["store", True]
    assert printed["sqlite3", False].count("sys-1") == 3 and "top-1" in printed["sqlite3", False]
