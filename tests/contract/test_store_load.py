"""The Store contract, a measurement's `load` section (server and multi_stream, a latency search):
kept whole in the measurement's extra keys by every backend and read back unchanged, alone, listed,
iterated and through a bulk import; a comparison row shows its target, achieved and searched
rates. Given / When / Then in each test."""

from __future__ import annotations

import copy

from mlscope.store import Store
from mlscope.store.records import CompareFilter, compare_rows
from tests.contract.builders import (
    SERVER_LOAD,
    finish,
    make_loaded_measurement,
    make_measurement,
    run_to,
    submit,
)


def test_a_load_section_reads_back_unchanged(store: Store) -> None:
    # Given a running evaluation
    id = run_to(store, "running")
    measurements = [
        make_loaded_measurement("server"),
        make_loaded_measurement("multi_stream"),
        make_measurement("single_stream"),
    ]
    sent = copy.deepcopy(measurements)

    # When it finishes with a server point (a search in it), a multi_stream point and a plain one
    finish(store, id, measurements=measurements)

    # Then each load section reads back exactly as given, newer keys and nulls included, and the plain
    # point has none
    by_scenario = {m["scenario"]: m for m in store.get_evaluation(id)["measurements"]}
    server, multi, plain = (by_scenario[name] for name in ("server", "multi_stream", "single_stream"))
    assert server["load"] == SERVER_LOAD == sent[0]["load"]
    assert multi["load"] == sent[1]["load"] and multi["load"]["overruns"] == 2
    assert "load" not in plain
    [listed] = store.list_evaluations()
    assert [m.get("load") for m in listed["measurements"]] == [m.get("load") for m in by_scenario.values()]
    [walked] = store.iter_evaluations()
    assert walked["measurements"] == listed["measurements"]


def test_a_load_section_survives_an_export_and_import(store: Store) -> None:
    # Given a finished evaluation with a loaded point, exported as the public shape
    id = submit(store)
    store.start_evaluation(id)
    finish(store, id, measurements=[make_loaded_measurement("server")])
    exported = store.get_evaluation(id, include_raw=True)

    # When it is imported again under another id
    exported["id"] = "f" * 32
    store.import_evaluations([exported])

    # Then the copy's load section is the same
    assert store.get_evaluation("f" * 32)["measurements"][0]["load"] == SERVER_LOAD


def test_a_comparison_row_shows_a_server_points_rates(store: Store) -> None:
    # Given an evaluation with a server point (a search in it), a multi_stream and a plain point
    id = run_to(store, "running")
    multi = make_loaded_measurement("multi_stream")
    multi["load"] = {**multi["load"], "target_qps": 20.0, "achieved_qps": 19.5}
    finish(store, id, measurements=[make_loaded_measurement("server"), multi, make_measurement("offline")])

    # When compared
    rows = {row["scenario"]: row for row in store.compare()}

    # Then each row has the rates its load section gives, None without one, as the reference computes
    assert (rows["server"]["target_qps"], rows["server"]["achieved_qps"], rows["server"]["max_qps"]) == (
        20.0,
        19.7,
        183.0,
    )
    assert (rows["multi_stream"]["achieved_qps"], rows["multi_stream"]["max_qps"]) == (19.5, None)
    assert all(rows["offline"][name] is None for name in ("target_qps", "achieved_qps", "max_qps"))
    assert store.compare() == compare_rows(store.list_evaluations(limit=100), CompareFilter())
    # ... and so does a comparison counting a time window (the SQL store's other path)
    assert store.compare(ids=[id]) == store.compare()
