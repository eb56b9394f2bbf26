"""`mlscope store status|upgrade`, driven in-process through `main` (exit codes included), on a copy of
the SQLite store mlscope 0.1.0 wrote."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from mlscope.cli import main
from mlscope.store import open_store
from mlscope.store.sql.schema import BASELINE, head_revision
from tests.contract.old_stores import FIXTURE

HEAD = head_revision()


@pytest.fixture
def old_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the 0.1.0 SQLite store, which MLSCOPE_STORE_URL names."""
    path = tmp_path / "mlscope.db"
    shutil.copyfile(FIXTURE / "mlscope.db", path)
    monkeypatch.setenv("MLSCOPE_STORE_URL", f"sqlite:///{path}")
    monkeypatch.setenv("MLSCOPE_SETTINGS", str(tmp_path / "no-settings.toml"))
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as ended:
        code = int(ended.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_status_then_upgrade_then_status(old_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a 0.1.0 store: other verbs refuse it, naming the way out
    code, _, err = run(["results", "list"], capsys)
    assert code == 2 and "run `mlscope store upgrade`" in err

    # When its status is asked for, Then it says what it has and that an upgrade is needed
    code, out, _ = run(["store", "status"], capsys)
    assert code == 0
    assert f"schema    {BASELINE} (written by mlscope 0.1.0" in out
    assert f"required  {HEAD}" in out and "upgrade needed: run `mlscope store upgrade`" in out
    code, out, _ = run(["store", "status", "--json"], capsys)
    status = json.loads(out)
    assert (status["state"], status["current"], status["upgrade_needed"]) == ("older", BASELINE, True)

    # When it is upgraded, Then it says from what to what, how many rows, and where the copy is
    code, out, _ = run(["store", "upgrade"], capsys)
    assert code == 0
    assert f"from schema {BASELINE} to {HEAD}" in out and "10 measurements backfilled" in out
    backup = old_store.with_name(f"mlscope.db.before-upgrade-{BASELINE}")
    assert f"is at {backup}" in out and backup.is_file()

    # and then it is up to date, a second upgrade does nothing, and the other verbs work
    code, out, _ = run(["store", "status", "--json"], capsys)
    assert json.loads(out)["state"] == "current"
    code, out, _ = run(["store", "upgrade", "--json"], capsys)
    assert code == 0 and json.loads(out)["upgraded"] is False
    code, out, _ = run(["results", "list", "--json"], capsys)
    assert code == 0 and len(out.splitlines()) == 8


def test_store_url_option_names_another_store(
    old_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other" / "fresh.db"
    code, out, _ = run(["store", "upgrade", "--store-url", f"sqlite:///{other}"], capsys)
    assert code == 0 and f"created schema {HEAD}" in out
    with open_store(f"sqlite:///{other}") as store:
        assert store.schema_status()["state"] == "current"


def test_a_newer_or_foreign_store_exits_2(
    old_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a store a newer mlscope wrote
    code, _, _ = run(["store", "upgrade"], capsys)
    with sqlite3.connect(old_store) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'mlscope_9999'")
    connection.close()
    # Then status says so (exit 0), and upgrade refuses (exit 2)
    code, out, _ = run(["store", "status"], capsys)
    assert code == 0 and "written by a newer mlscope" in out
    code, _, err = run(["store", "upgrade"], capsys)
    assert code == 2 and "written by a newer mlscope" in err and "upgrade mlscope" in err

    # Given another application's database, Then upgrade refuses it (exit 2)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE invoices (id INTEGER)")
    connection.close()
    code, _, err = run(["store", "upgrade", "--store-url", f"sqlite:///{foreign}"], capsys)
    assert code == 2 and "holds tables of another application (invoices)" in err
