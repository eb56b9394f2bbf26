"""Schema versions of the SQL store, on SQLite and on the PostgreSQL server: a store mlscope 0.1.0 wrote
(tests/data/store-0.1.0, never regenerated) is refused until `upgrade()`, which keeps every row and
backfills the summary columns; a newer mlscope's store and another application's database are refused
with nothing changed; and the migrations end on exactly the schema a fresh store gets."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from mlscope.contract.errors import UserError
from mlscope.contract.system_ids import system_ids
from mlscope.contract.workload import display_name, workload_key
from mlscope.store import open_store, records
from mlscope.store.sql.schema import BASELINE, alembic_config, head_revision, revisions
from tests.contract.builders import COLD_START, finish, make_measurement, make_system, run_to
from tests.contract.old_stores import (
    FIXTURE,
    FIXTURE_SPANS,
    FIXTURE_STATUSES,
    describe,
    fingerprint,
    fixture_latencies,
    load_postgres_dump,
    postgres_database,
)

HEAD = head_revision()
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each SQL backend; PostgreSQL skips (or fails in CI) when its server is unreachable."""
    if request.param == "postgresql":
        request.getfixturevalue("postgres_url")
    return str(request.param)


@pytest.fixture
def empty_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database of the backend."""
    if backend == "sqlite":
        (tmp_path / "empty").mkdir()
        yield f"sqlite:///{tmp_path / 'empty' / 'store.db'}"
        return
    with postgres_database() as url:
        yield url


@pytest.fixture
def old_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """The URL of a store mlscope 0.1.0 wrote, in the backend: a copy of the fixture file, or the
    fixture dump loaded into a database of its own."""
    if backend == "sqlite":
        path = tmp_path / "old" / "mlscope.db"
        path.parent.mkdir()
        shutil.copyfile(FIXTURE / "mlscope.db", path)
        yield f"sqlite:///{path}"
        return
    with postgres_database() as url:
        load_postgres_dump(url)
        yield url


def _measurement_rows(url: str) -> list[dict[str, object]]:
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            query = sa.text("SELECT * FROM measurements ORDER BY evaluation_id, batch_size")
            return [dict(row._mapping) for row in connection.execute(query)]
    finally:
        engine.dispose()


def test_the_revisions_are_one_chain_of_mlscope_ids() -> None:
    # The open-time check tells a newer mlscope's store from another application's by the prefix.
    assert revisions()[0] == BASELINE and revisions()[-1] == HEAD
    assert all(r.startswith("mlscope_") for r in revisions())
    assert revisions() == sorted(revisions())


def test_the_revisions_read_from_the_files_are_alembics() -> None:
    # The store reads its revision chain from the files' lines, not through Alembic (faster open);
    # Alembic's own reading of the same scripts is the reference.
    from mlscope.store.sql.schema import _scripts

    alembic_chain = [script.revision for script in reversed(list(_scripts().walk_revisions()))]
    assert revisions() == alembic_chain
    assert _scripts().get_current_head() == HEAD


def test_a_0_1_0_store_is_refused_with_the_upgrade_message_and_left_unchanged(old_url: str) -> None:
    # Given a store mlscope 0.1.0 wrote
    before = fingerprint(old_url)
    # When this mlscope opens it
    with pytest.raises(UserError) as refused:
        open_store(old_url)
    # Then it is refused, saying what it has, what is needed and what to run, and nothing changed
    message = str(refused.value)
    assert refused.value.field == "store_url"
    assert f"has schema {BASELINE} (written by mlscope 0.1.0, which kept no schema version)" in message
    assert f"this mlscope needs schema {HEAD}" in message
    assert "run `mlscope store upgrade`" in message and "the store was not changed" in message
    assert fingerprint(old_url) == before


def test_upgrading_a_0_1_0_store_keeps_everything_and_backfills_the_summary_columns(old_url: str) -> None:
    # Given a store mlscope 0.1.0 wrote, its status saying an upgrade is needed
    with open_store(old_url, check_schema=False) as store:
        status = store.schema_status()
        assert (status["state"], status["current"], status["required"]) == ("older", BASELINE, HEAD)
        assert status["upgrade_needed"] is True
        # When it is upgraded
        done = store.upgrade()

    # Then it went from the baseline to the head, every measurement backfilled, a SQLite file copied
    assert (done["from"], done["to"], done["upgraded"], done["backfilled"]) == (BASELINE, HEAD, True, 10)
    assert done["steps"] == revisions()[1:]
    if old_url.startswith("sqlite"):
        backup = Path(done["backup"])
        assert backup.name == f"mlscope.db.before-upgrade-{BASELINE}"
        with pytest.raises(UserError, match=r"written by mlscope 0\.1\.0"):
            open_store(f"sqlite:///{backup}")  # the copy is the store as it was
    else:
        assert done["backup"] is None

    # and it opens, holding every evaluation, measurement, raw latency, system and span it held
    latencies = fixture_latencies()
    with open_store(old_url) as store:
        assert store.schema_status()["state"] == "current"
        assert store.count_evaluations() == 8
        listed = store.list_evaluations(limit=100)
        assert {e["id"]: e["status"] for e in listed} == FIXTURE_STATUSES
        assert [s["id"] for s in store.list_systems()] == ["fixture-system-a", "fixture-system-b"]
        for id, status in FIXTURE_STATUSES.items():
            result = store.get_evaluation(id, include_raw=True)
            assert result["status"] == status
            if status != "succeeded":
                assert result["measurements"] == []
                continue
            assert [m["batch_size"] for m in result["measurements"]] == [1, 8]
            for m in result["measurements"]:
                assert m["latencies_ns"] == latencies[(id, m["batch_size"])]
                assert m["latency_ms"]["count"] == 200
                assert m["validity"]["valid"] is (id != "fixture07" + "0" * 24)
                assert m["stop_reason"] == "stable"
        assert store.get_evaluation("fixture04")["error"]["message"] == "exit 137"
        spans = store.get_spans("fixture00")
        assert len(spans) == store.count_spans("fixture00") == FIXTURE_SPANS
        assert (spans[0]["name"], spans[0]["level"]) == ("run", "APPLICATION")
        assert store.layer_breakdown("fixture00", level="MODEL")[0]["calls"] == FIXTURE_SPANS - 1
        # ... its comparison what records.compare_rows makes of it, each row keyed by its workload
        # (schema 8's backfill, from each evaluation's stored request and manifest)
        succeeded = [store.get_evaluation(e["id"]) for e in listed if e["status"] == "succeeded"]
        compared = store.compare()
        assert compared == records.compare_rows(succeeded, records.CompareFilter())
        assert compared == store.compare(since=datetime(2000, 1, 1, tzinfo=timezone.utc))
        for row in compared:
            evaluation = store.get_evaluation(row["evaluation_id"])
            assert row["workload_key"] == workload_key(evaluation, row["scenario"])
            assert row["display_name"] == display_name(evaluation)
        # ... none with a result section (schemas 5 and 6 add them empty), none with a queue or an
        # attempt (schema 7 keeps neither for what was stored before), none with a lease
        assert not any("accuracy" in e or "parity" in e or "memory" in e for e in listed)
        assert all((e["queue"], e["attempts"]) == (None, 0) for e in listed)
        assert store.expired_leases(now=datetime.now(timezone.utc) + timedelta(days=1)) == []
        # and new results are written with the new columns, sections included
        id = run_to(store, "running")
        finish(store, id, measurements=[make_measurement()])
        accuracy = {"dataset": "digits", "count": 360, "top1": 0.975, "top5": None}
        with_accuracy = run_to(store, "running")
        store.finish_evaluation(
            with_accuracy,
            system=make_system(),
            framework={"name": "pytorch", "version": "2.3.0"},
            cold_start=COLD_START,
            measurements=[make_measurement()],
            accuracy=accuracy,
            memory={"peak_rss_mb": 412.3, "peak_device_mb": None},
        )
        assert store.get_evaluation(with_accuracy)["accuracy"] == accuracy
        assert store.get_evaluation(with_accuracy)["memory"] == {"peak_rss_mb": 412.3, "peak_device_mb": None}

    # and the new columns hold each row's summary, from its own JSON
    rows = _measurement_rows(old_url)
    assert len(rows) == 12
    for row in rows:
        latency_ms, validity = row["latency_ms"], row["validity"]
        if isinstance(latency_ms, str):  # SQLite hands JSON back as text through plain SQL
            latency_ms, validity = json.loads(latency_ms), json.loads(str(validity))
        expected = records.summary_columns(latency_ms, validity)
        stored = {name: row[name] for name in expected}
        assert bool(stored.pop("valid")) is expected.pop("valid")
        assert stored == pytest.approx(expected)
        assert row["raw_codec"] is not None and row["raw_count"] == row["sample_count"]

    # and a second upgrade is a no-op
    with open_store(old_url, check_schema=False) as store:
        again = store.upgrade()
    assert (again["from"], again["upgraded"], again["backfilled"], again["backup"]) == (HEAD, False, 0, None)


def test_upgrading_a_store_from_before_leases_keeps_its_evaluations_with_no_attempt_and_no_lease(
    empty_url: str,
) -> None:
    # Given a store at the schema before leases (made at the head, then taken down one revision)
    # holding a queued, a running and a succeeded evaluation
    with open_store(empty_url) as store:
        queued = run_to(store, "queued")
        running = run_to(store, "running")
        succeeded = run_to(store, "succeeded")
        before = {id: store.get_evaluation(id, include_raw=True) for id in (queued, running, succeeded)}
    engine = _engine(empty_url)
    try:
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "mlscope_0006")
    finally:
        engine.dispose()
    with pytest.raises(UserError, match="has schema mlscope_0006"):
        open_store(empty_url)

    # When it is upgraded
    with open_store(empty_url, check_schema=False) as store:
        done = store.upgrade()

    # Then the one step is applied, and every evaluation reads as before, never started by this count
    assert (done["from"], done["steps"]) == ("mlscope_0006", revisions()[revisions().index("mlscope_0007") :])
    with open_store(empty_url) as store:
        for id, was in before.items():
            assert store.get_evaluation(id, include_raw=True) == {**was, "queue": None, "attempts": 0}
        # the running one, left by an older mlscope, holds no lease: never taken for a dead runner's
        assert store.expired_leases(now=datetime.now(timezone.utc) + timedelta(days=1)) == []
        # and attempts count on from there
        assert store.start_evaluation(queued, lease_owner="worker-a", lease_s=10) == 1
        assert store.start_evaluation(running) == 1


def test_an_upgraded_store_has_the_schema_of_a_fresh_one(old_url: str, empty_url: str) -> None:
    # Given a 0.1.0 store upgraded, and a store created fresh by this mlscope
    with open_store(old_url, check_schema=False) as store:
        store.upgrade()
    open_store(empty_url).close()
    # Then their schemas are the same, column by column, key by key, index by index
    assert describe(old_url) == describe(empty_url)


def test_the_baseline_revision_is_the_0_1_0_schema(old_url: str, empty_url: str) -> None:
    # Given an empty database migrated to the baseline revision only
    engine = _engine(empty_url)
    try:
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection), BASELINE)
    finally:
        engine.dispose()
    # Then it has exactly the schema mlscope 0.1.0 created
    assert describe(empty_url) == describe(old_url)


def test_a_failed_upgrade_is_rolled_back(old_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a 0.1.0 store, and a backfill that fails half-way: after the columns are added, at the
    # first write of the summaries
    execute = sa.Connection.execute

    def failing(self: sa.Connection, statement: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(statement, sa.Update) and statement.table.name == "measurements":
            raise ValueError("disk on fire")
        return execute(self, statement, *args, **kwargs)

    monkeypatch.setattr(sa.Connection, "execute", failing)
    before = fingerprint(old_url)
    # When it is upgraded
    with open_store(old_url, check_schema=False) as store, pytest.raises(RuntimeError) as failed:
        store.upgrade()
    # Then the error says it was rolled back, and the store is as it was
    assert "failed and was rolled back, so the store was not changed" in str(failed.value)
    assert "disk on fire" in str(failed.value)
    assert fingerprint(old_url) == before
    monkeypatch.undo()
    # and upgrading again works
    with open_store(old_url, check_schema=False) as store:
        assert store.upgrade()["backfilled"] == 10


def test_a_store_of_a_newer_mlscope_is_refused(empty_url: str) -> None:
    # Given a store stamped with a revision this mlscope does not know (a newer one's)
    open_store(empty_url).close()
    engine = _engine(empty_url)
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = 'mlscope_9999'"))
    engine.dispose()
    before = fingerprint(empty_url)
    # When it is opened, or upgraded
    with pytest.raises(UserError) as refused:
        open_store(empty_url)
    with open_store(empty_url, check_schema=False) as store, pytest.raises(UserError) as refused_upgrade:
        store.upgrade()
    # Then both are refused, saying so, and nothing changed
    for error in (refused.value, refused_upgrade.value):
        assert "has schema mlscope_9999, written by a newer mlscope" in str(error)
        assert f"knows schemas up to {HEAD}; upgrade mlscope" in str(error)
    assert fingerprint(empty_url) == before


@pytest.mark.parametrize(
    ("setup", "found"),
    [
        (
            ["CREATE TABLE invoices (id INTEGER PRIMARY KEY)", "CREATE TABLE customers (id INTEGER)"],
            "(customers, invoices)",
        ),
        (
            [
                "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)",
                "INSERT INTO alembic_version VALUES ('3f2a9c1b7d')",
                "CREATE TABLE evaluations (id INTEGER)",
            ],
            "(alembic_version at revision '3f2a9c1b7d', evaluations)",
        ),
    ],
    ids=["tables", "alembic-revision"],
)
def test_another_applications_database_is_refused_and_left_alone(
    empty_url: str, setup: list[str], found: str
) -> None:
    # Given a database holding another application's tables (with a password in its URL)
    engine = _engine(empty_url)
    with engine.begin() as connection:
        for statement in setup:
            connection.execute(sa.text(statement))
    engine.dispose()
    url = empty_url.replace("postgres@", "postgres:s3cret@")
    before = fingerprint(empty_url)
    files = sorted(Path(empty_url.removeprefix("sqlite:///")).parent.iterdir()) if "sqlite" in url else []
    # When it is opened, or upgraded
    with pytest.raises(UserError) as refused:
        open_store(url)
    with open_store(url, check_schema=False) as store, pytest.raises(UserError) as refused_upgrade:
        store.upgrade()
    # Then it is refused, naming what was found, with the password masked, and nothing was created
    for error in (refused.value, refused_upgrade.value):
        assert f"holds tables of another application {found}: point MLSCOPE_STORE_URL at an empty " in (
            str(error)
        )
        assert "s3cret" not in str(error)
    assert fingerprint(empty_url) == before
    if files:
        assert sorted(Path(files[0]).parent.iterdir()) == files


def test_a_fresh_store_is_created_at_the_head_revision(empty_url: str) -> None:
    with open_store(empty_url, check_schema=False) as store:
        assert store.schema_status()["state"] == "empty"
    with open_store(empty_url) as store:
        status = store.schema_status()
    assert (status["state"], status["current"], status["upgrade_needed"]) == ("current", HEAD, False)


@pytest.mark.postgres
def test_many_openers_of_a_fresh_postgresql_database_create_its_schema_once(postgres_url: str) -> None:
    with postgres_database() as url:
        errors: list[BaseException] = []

        def open_once() -> None:
            try:
                open_store(url).close()
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=open_once) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert fingerprint(url)["alembic_version"][1] == [repr((HEAD,))]


def test_upgrading_a_store_from_before_workload_keys_gives_one_comparison_row_per_workload(
    empty_url: str,
) -> None:
    # Given a store at schema 7 (made at the head, then taken down one revision) holding one model
    # name run with two configs, the first twice, and on two frameworks: one row per key at schema 7
    configs = [("pytorch", 2), ("pytorch", 2), ("onnxruntime", 2), ("pytorch", 4)]
    with open_store(empty_url) as store:
        for framework, layers in configs:
            id = run_to(
                store,
                "running",
                framework=framework,
                request={"model_options": {"config": {"n_layer": layers}}},
            )
            finish(store, id, measurements=[make_measurement("offline", 1)])
        expected = store.compare()
    assert sorted((r["display_name"], r["framework"], r["runs"]) for r in expected) == [
        ("resnet18[n_layer=2]", "onnxruntime", 1),
        ("resnet18[n_layer=2]", "pytorch", 2),
        ("resnet18[n_layer=4]", "pytorch", 1),
    ]
    engine = _engine(empty_url)
    try:
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "mlscope_0007")
            old_keys = connection.execute(sa.text("SELECT framework_name, runs FROM compare_keys")).all()
            measured = {c["name"] for c in sa.inspect(connection).get_columns("measurements")}
    finally:
        engine.dispose()
    assert sorted(old_keys) == [("onnxruntime", 1), ("pytorch", 3)]  # the two workloads mixed
    assert "workload_key" not in measured

    # When it is upgraded
    with open_store(empty_url, check_schema=False) as store:
        done = store.upgrade()

    # Then the one step is applied, and the comparison is the one the store wrote fresh, a row per
    # workload, counted by compare_keys and by the measurements alike
    assert (done["from"], done["steps"]) == ("mlscope_0007", ["mlscope_0008", "mlscope_0009"])
    with open_store(empty_url) as store:
        assert store.compare() == expected
        assert store.compare(since=datetime(2000, 1, 1, tzinfo=timezone.utc)) == expected


def test_upgrading_a_store_from_before_machine_ids_fills_them_from_the_stored_systems(empty_url: str) -> None:
    # Given a store at schema 8 (made at the head, then taken down one revision) holding runs of one
    # machine under two system ids (a local run, a farm agent's container with an image), of another
    # machine, and one that never finished
    image = {
        "name": "mlscope/pytorch",
        "id": "sha256:" + "1" * 64,
        "digest": "mlscope/pytorch@sha256:" + "2" * 64,
    }
    systems = [
        (make_system(1, id="local-id"), {}),
        (
            make_system(1, id="farm-id", hostname="worker-7", container=True, agent={"id": "a-7"}),
            {"image": image},
        ),
        (make_system(2), {}),
    ]
    with open_store(empty_url) as store:
        ids = []
        for system, details in systems:
            id = run_to(store, "running")
            store.finish_evaluation(
                id,
                system=system,
                framework={"name": "pytorch", "version": "2.3.0", **details},
                cold_start=COLD_START,
                measurements=[make_measurement()],
            )
            ids.append(id)
        running = run_to(store, "running")
        series = store.history_series()
    written = _stored_ids(empty_url)
    assert set(written) == {*ids, running}
    engine = _engine(empty_url)
    try:
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "mlscope_0008")
            columns = {c["name"] for c in sa.inspect(connection).get_columns("evaluations")}
    finally:
        engine.dispose()
    assert not {"machine_id", "stack_id"} & columns

    # When it is upgraded
    with open_store(empty_url, check_schema=False) as store:
        done = store.upgrade()

    # Then each evaluation with a system has the ids this mlscope writes, filled from the stored
    # system and the image its framework recorded; the one machine's runs share its machine id and,
    # in another image, have another stack; and the series are those of the store written fresh
    assert (done["from"], done["steps"]) == ("mlscope_0008", ["mlscope_0009"])
    assert _stored_ids(empty_url) == written
    with open_store(empty_url) as store:
        assert store.history_series() == series
    local, farm, other = (written[id] for id in ids)
    assert local == system_ids(make_system(1)) and written[running] == (None, None)
    assert farm[0] == local[0] and farm[1] != local[1] and other[0] != local[0]


def _stored_ids(url: str) -> dict[str, tuple[str | None, str | None]]:
    """Each evaluation's (machine_id, stack_id), as its row holds them."""
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(sa.text("SELECT id, machine_id, stack_id FROM evaluations"))
            return {id: (machine, stack) for id, machine, stack in rows}
    finally:
        engine.dispose()
