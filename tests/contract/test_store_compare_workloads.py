"""The Store contract, part 3b: the comparison table has one row per workload. Evaluations of one model
name that measured different workloads (`--config`, input shapes, a server's rate) are rows of their
own, shown by their display names, whichever way a backend counts them (the SQL store's compare_keys,
its GROUP BY when a filter cuts across keys, the Mongo pipeline); one workload run twice is one row of
two runs, and one workload on two frameworks lines up side by side."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from mlscope.contract.workload import workload_key
from mlscope.store import Store
from tests.contract.builders import T0, make_measurement
from tests.contract.test_store_compare import evaluate, reference

# A time bound that selects everything, but makes the store count measurements rather than read keys.
EVER = T0 - timedelta(days=3650)


def config(layers: int) -> dict[str, Any]:
    return {"model_options": {"config": {"n_layer": layers}}}


def table(store: Store, **filters: Any) -> list[tuple[Any, ...]]:
    return [
        (r["display_name"], r["framework"], r["scenario"], r["batch_size"], r["runs"])
        for r in store.compare(**filters)
    ]


def test_two_configs_of_one_model_are_two_rows_with_their_display_names(store: Store) -> None:
    # Given hf:gpt2 measured with n_layer=2 twice, then with n_layer=4 once (the latest)
    offline = [make_measurement("offline", 1)]
    two = [
        evaluate(store, model="hf:gpt2", request=config(2), finished=timedelta(hours=n), measurements=offline)
        for n in (1, 2)
    ]
    four = evaluate(
        store, model="hf:gpt2", request=config(4), finished=timedelta(hours=3), measurements=offline
    )

    # When compared, Then each workload is a row of its own, the later not hiding the earlier
    rows = store.compare()
    assert [(r["model"], r["display_name"], r["runs"], r["evaluation_id"]) for r in rows] == [
        ("hf:gpt2", "hf:gpt2[n_layer=2]", 2, two[-1]),
        ("hf:gpt2", "hf:gpt2[n_layer=4]", 1, four),
    ]
    for row in rows:
        assert row["workload_key"] == workload_key(store.get_evaluation(row["evaluation_id"]), "offline")
    assert rows[0]["workload_key"] != rows[1]["workload_key"]
    assert rows == reference(store)
    # and so when a filter on time or ids makes the store count the measurements instead
    assert store.compare(ids=[*two, four]) == rows == store.compare(since=EVER)
    # and a model filter keeps both workloads
    assert table(store, models=["hf:gpt2"]) == [
        ("hf:gpt2[n_layer=2]", "pytorch", "offline", 1, 2),
        ("hf:gpt2[n_layer=4]", "pytorch", "offline", 1, 1),
    ]


def test_one_workload_run_twice_is_one_row_of_two_runs(store: Store) -> None:
    # Given one workload run twice, the second setting explicitly what the first left to its defaults
    evaluate(store, model="m.onnx", request=config(2), finished=timedelta(hours=1))
    defaults = {**config(2), "measure": {"concurrency": 1}, "options": {"graph_optimization_level": "all"}}
    evaluate(store, model="m.onnx", request=defaults, finished=timedelta(hours=2))
    # Then each (scenario, batch size) is one row of both runs
    assert [r["runs"] for r in store.compare()] == [2, 2, 2]
    assert store.compare() == reference(store) == store.compare(since=EVER)


def test_a_setting_splits_only_the_scenarios_it_shapes(store: Store) -> None:
    # Given a model measured offline and in the server scenario at 10 and at 30 queries per second
    measured = [make_measurement("offline", 1), make_measurement("server", 1)]
    for n, qps in enumerate((10, 30)):
        evaluate(
            store, request={"load": {"qps": qps}}, finished=timedelta(hours=n + 1), measurements=measured
        )
    # Then the server rows are two, one per rate, and the offline row, which no rate shapes, is one
    assert sorted((r["scenario"], r["runs"]) for r in store.compare()) == [
        ("offline", 2),
        ("server", 1),
        ("server", 1),
    ]
    assert store.compare() == reference(store) == store.compare(since=EVER)


def test_one_workload_on_two_frameworks_lines_up_side_by_side(store: Store) -> None:
    # Given one configured model on two frameworks (each with its own manifest), and another config
    offline = [make_measurement("offline", 1, mean=2.0)]
    evaluate(store, model="hf:gpt2", framework="pytorch", request=config(2), measurements=offline)
    evaluate(store, model="hf:gpt2", framework="onnxruntime", request=config(2), measurements=offline)
    evaluate(store, model="hf:gpt2", framework="pytorch", request=config(4), measurements=offline)
    # Then the two frameworks' rows of n_layer=2 share a key and come together, n_layer=4 after them
    rows = store.compare()
    assert [(r["display_name"], r["framework"]) for r in rows] == [
        ("hf:gpt2[n_layer=2]", "onnxruntime"),
        ("hf:gpt2[n_layer=2]", "pytorch"),
        ("hf:gpt2[n_layer=4]", "pytorch"),
    ]
    assert rows[0]["workload_key"] == rows[1]["workload_key"] != rows[2]["workload_key"]
    assert rows == reference(store)
