"""Who ran an evaluation and when it ran, as `results list` and `submit --wait` show it: the farm
agent (worker) that ran it, else the host of a local run; its start and end, not when it was
submitted. `results list` is driven in-process on a real SQLite store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from mlscope.cli import main, render
from mlscope.store import Store
from tests.contract.builders import COLD_START, T0, make_measurement, make_system
from tests.unit.test_cli_sections import store, wide  # noqa: F401  (fixtures: a SQLite store, wide tables)

AGENT = {"id": "gpu-box-1", "capabilities": ["cpu"]}


def evaluation(on: Store, system: dict | None, finished_at: datetime | None = None) -> str:
    """One evaluation submitted at T0; with a system, started and finished on it."""
    id = on.create_evaluation(
        model={"name": "tiny", "version": "1", "manifest_sha256": None},
        manifest={"name": "tiny"},
        framework={"name": "onnxruntime", "version": None},
        runner="inline",
        device="cpu",
        request={"batch_sizes": [1]},
        created_at=T0,
    )
    if system is not None:
        on.start_evaluation(id)
        on.finish_evaluation(
            id,
            system=system,
            framework={"name": "onnxruntime", "version": "1.0"},
            cold_start=COLD_START,
            measurements=[make_measurement("single_stream", 1)],
            finished_at=finished_at,
        )
    return id


def test_results_list_says_who_ran_each_and_when_it_started(
    store: Store,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an evaluation a farm agent ran, one run locally, and one still queued, all submitted at T0
    by_agent = evaluation(store, make_system(1, agent=AGENT))
    local = evaluation(store, make_system(2))
    queued = evaluation(store, None)
    started = {id: store.get_evaluation(id)["started_at"] for id in (by_agent, local)}

    # When listed
    main(["results", "list"])
    listed = capsys.readouterr().out

    # Then each row names the agent (or, run locally, the host) and when it started, not T0
    def row(id: str) -> list[str]:
        line = next(line for line in listed.splitlines() if id[:8] in line)
        return [cell.strip() for cell in line.split("│")[1:-1]]

    header = next(line for line in listed.splitlines() if "started (UTC)" in line)
    assert "ran on" in header
    assert row(by_agent)[1] == started[by_agent][:19].replace("T", " ")
    assert row(by_agent)[-2:] == ["gpu-box-1", make_system(1, agent=AGENT)["id"]]
    assert row(local)[1] == started[local][:19].replace("T", " ") and row(local)[-2] == "host-2"
    assert row(queued)[1] == "-" and row(queued)[-2] == "-"
    assert T0.strftime("%Y-%m-%d %H:%M") not in listed


def test_submit_wait_line_names_the_agent_and_the_run_times(store: Store) -> None:  # noqa: F811
    # Given an evaluation a farm agent ran, finished 30 s after it started
    id = evaluation(store, make_system(1, agent=AGENT))
    started = datetime.fromisoformat(store.get_evaluation(id)["started_at"])
    id = evaluation(store, make_system(1, agent=AGENT), finished_at=started + timedelta(seconds=30))
    result = store.get_evaluation(id)
    begun = datetime.fromisoformat(result["started_at"]).astimezone(timezone.utc)
    ended = datetime.fromisoformat(result["finished_at"]).astimezone(timezone.utc)

    # Then the line `submit --wait` prints under the table names the agent, its host, and the run
    line = render.ran_line(result)
    assert line.startswith("ran on agent gpu-box-1 (host host-1), ")
    start_text = f"{begun:%Y-%m-%d %H:%M:%S}"
    end_text = f"{ended:%H:%M:%S}" if begun.date() == ended.date() else f"{ended:%Y-%m-%d %H:%M:%S}"
    assert line.endswith(f"{start_text} → {end_text} UTC")
    # ... and of a local run, its host
    assert render.ran_line(store.get_evaluation(evaluation(store, make_system(2)))).startswith(
        "ran on host host-2, "
    )
