"""The Store contract, part 7: the comparison table stays exact however it is computed. Backends may
keep per-key summaries as evaluations succeed (the SQL store's `compare_keys`) and rank measurements
only when a filter cuts across keys (ids, times): both ways give the same rows, and concurrent
finishes of one key are all counted."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from mlscope.contract.errors import UserError
from mlscope.store import Store, open_store
from mlscope.store.sql import SQLStore
from mlscope.store.sql.schema import head_revision
from tests.contract.builders import COLD_START, T0, make_measurement, make_system
from tests.contract.test_store_compare import evaluate, reference

# Long before anything in these tests: as a filter it selects everything, but by time.
EVER = T0 - timedelta(days=3650)


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"models": ["resnet18"]},
        {"frameworks": ["pytorch"], "batch_sizes": [1]},
        {"system_ids": ["sys-2"], "scenarios": ["offline"]},
    ],
    ids=["all", "model", "framework+batch", "system+scenario"],
)
def test_filtering_by_key_and_by_time_agree(store: Store, filters: dict[str, Any]) -> None:
    # Given runs of two models on two systems, some finished out of creation order, one tied
    for n in range(12):
        evaluate(
            store,
            model="resnet18" if n % 3 else "bert",
            framework="pytorch" if n % 4 else "onnxruntime",
            system=1 + n % 2,
            created=timedelta(minutes=n),
            finished=timedelta(hours=5 - n % 5),
            mean=1.0 + n,
            id=f"{n:02d}" * 16,
        )

    # When compared by key alone, and with a time filter that selects the same evaluations
    by_key = store.compare(**filters)
    by_time = store.compare(**filters, since=EVER)

    # Then the rows are the same, and those of records.compare_rows
    assert by_key == by_time == reference(store, **filters)
    assert by_key


def test_concurrent_finishes_of_one_key_are_all_counted(store: Store, store_url: str) -> None:
    # Given twelve running evaluations of one model on one system, and three workers on their own
    # connections finishing four each at once
    ids = [evaluate(store, created=timedelta(minutes=n), finished=None) for n in range(12)]
    barrier = threading.Barrier(3, timeout=30)
    failures: list[BaseException] = []

    def worker(mine: list[str]) -> None:
        try:
            with open_store(store_url) as own:
                for id in mine:
                    barrier.wait()
                    own.finish_evaluation(
                        id,
                        system=make_system(1, agent={"id": "agent-1"}),
                        framework={"name": "pytorch", "version": "9.9"},
                        cold_start=COLD_START,
                        measurements=[make_measurement("offline", 1), make_measurement("offline", 8)],
                        finished_at=T0 + timedelta(hours=1, minutes=ids.index(id)),
                    )
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=worker, args=(ids[n::3],)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []

    # When compared, Then every finish counted, and the one finished last is the latest
    rows = store.compare()
    assert [(r["scenario"], r["batch_size"], r["runs"], r["evaluation_id"]) for r in rows] == [
        ("offline", 1, 12, ids[-1]),
        ("offline", 8, 12, ids[-1]),
    ]
    assert rows == reference(store)


def test_a_sql_store_written_before_compare_keys_is_counted_when_upgraded(
    store: Store, store_url: str
) -> None:
    # Given a SQL store holding succeeded evaluations but no compare_keys table, at schema 2 (as
    # before the table existed)
    if not isinstance(store, SQLStore):
        pytest.skip("compare_keys is the SQL store's own table")
    for n in range(6):
        evaluate(
            store,
            system=1 + n % 2,
            created=timedelta(minutes=n),
            finished=timedelta(hours=n % 3),
            mean=n + 1.0,
        )
    before = store.compare()
    with store._writer.begin() as connection:
        connection.execute(text("DROP TABLE compare_keys"))
        connection.execute(text("DROP INDEX ix_evaluations_model_framework_created_desc"))
        connection.execute(text("DROP INDEX ix_evaluations_created_desc_id"))
        connection.execute(text("DROP INDEX ix_evaluations_finished_at"))
        connection.execute(text("DROP INDEX IF EXISTS ix_evaluations_id_pattern"))
        connection.execute(text("CREATE INDEX ix_evaluations_created_at_id ON evaluations (created_at, id)"))
        connection.execute(text("UPDATE alembic_version SET version_num = 'mlscope_0002'"))

    # When it is opened, it is refused until upgraded; Then the upgrade makes the table and counts
    # what the store holds
    with pytest.raises(UserError, match="run `mlscope store upgrade`"):
        open_store(store_url)
    with open_store(store_url, check_schema=False) as old:
        assert old.upgrade()["to"] == head_revision()
    with open_store(store_url) as reopened:
        assert reopened.compare() == before == reference(reopened)
        assert reopened.compare(since=EVER) == before
