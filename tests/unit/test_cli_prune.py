"""`mlscope results prune` and `results list`, driven in-process on a real SQLite store: old raw data
goes, summaries stay, a bad age is one line and exit code 2, and a killed run is listed as failed."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from mlscope.cli import main
from mlscope.store import open_store
from tests.contract.builders import submit
from tests.contract.test_store_maintenance import _result


def test_prune_removes_old_raw_latencies_and_keeps_every_summary(
    mlscope_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an evaluation that ended a year ago and one that ended now
    old, recent = _result(0), _result(1)
    recent["created_at"] = datetime.now(timezone.utc).isoformat()
    recent["finished_at"] = (datetime.now(timezone.utc) + timedelta(seconds=1)).isoformat()
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as store:
        store.import_evaluations([old, recent])
    # When raw data older than 30 days is pruned
    main(["results", "prune", "--older-than", "30d", "--json"])
    # Then the old one lost its raw latencies, not its summary, and the recent one is untouched
    report = json.loads(capsys.readouterr().out)
    assert report["evaluations"] == 1 and report["raw_latencies"] == 2 and not report["deleted"]
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as store:
        pruned = store.get_evaluation(old["id"], include_raw=True)
        assert (
            pruned["measurements"][0]["latency_ms"]["median"]
            == old["measurements"][0]["latency_ms"]["median"]
        )
        assert not pruned["measurements"][0].get("latencies_ns")
        assert (
            len(store.get_evaluation(recent["id"], include_raw=True)["measurements"][0]["latencies_ns"]) == 50
        )


def test_a_bad_age_is_one_line_and_exit_code_2(
    mlscope_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["results", "prune", "--older-than", "soon"])
    assert done.value.code == 2
    assert "--older-than 'soon' is not an age" in capsys.readouterr().err


def test_results_list_shows_a_killed_run_failed_not_running(
    mlscope_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an evaluation a `mlscope run` started and stopped renewing (its process was killed), and
    # a farm job whose worker is gone (its queue's sweepers resolve it, not a local read)
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as store:
        dead_run, farm_job = submit(store), submit(store, queue="pytorch@cpu")
        store.start_evaluation(dead_run, lease_owner="run:host:123", lease_s=0.01)
        store.start_evaluation(farm_job, lease_owner="worker-a", lease_s=0.01)
    time.sleep(0.05)

    # When the results are listed
    main(["results", "list", "--json"])

    # Then the dead run reads failed, interrupted, and the farm's job is left as it was
    listed = {r["id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert listed[dead_run]["status"] == "failed"
    assert listed[dead_run]["error"]["message"].startswith("interrupted: its process died")
    assert listed[farm_job]["status"] == "running"
