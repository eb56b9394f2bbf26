"""The Store contract, part 3: the comparison table (`Store.compare`). One row per (model, framework,
system, device, scenario, batch size, workload) from the latest succeeded evaluation, how many runs
share it, the filters, the order, and that every backend's rows equal records.compare_rows on the same
data (the Mongo store computes them with an aggregation pipeline of its own)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.workload import workload_key
from mlscope.store import Store
from mlscope.store.records import COMPARE_COLUMNS, CompareFilter, compare_rows
from tests.contract.builders import COLD_START, ERROR, T0, make_measurement, make_system

MEASUREMENTS = [
    make_measurement("offline", 1),
    make_measurement("offline", 8),
    make_measurement("single_stream", 1),
]


def evaluate(
    store: Store,
    *,
    model: str = "resnet18",
    framework: str = "pytorch",
    system: int = 1,
    device: str = "cpu",
    created: timedelta = timedelta(0),
    finished: timedelta | None = timedelta(hours=1),
    mean: float = 2.0,
    measurements: list[dict[str, Any]] | None = None,
    id: str | None = None,
    request: dict[str, Any] | None = None,
) -> str:
    """A succeeded evaluation (created and finished at T0 + the offsets), or a running one when
    `finished` is None; `request`: its request's settings (model_options, load, ...)."""
    id = store.create_evaluation(
        model={"name": model, "version": "1.0", "manifest_sha256": None},
        manifest={"name": model},
        framework={"name": framework, "version": None},
        runner="inline",
        device=device,
        request=request or {},
        id=id,
        created_at=T0 + created,
    )
    store.start_evaluation(id, started_at=T0 + created)
    if finished is not None:
        store.finish_evaluation(
            id,
            system=make_system(system, agent={"id": f"agent-{system}"}),
            framework={"name": framework, "version": "9.9"},
            cold_start=COLD_START,
            measurements=measurements
            or [make_measurement(m["scenario"], m["batch_size"], mean=mean) for m in MEASUREMENTS],
            finished_at=T0 + finished,
        )
    return id


def reference(store: Store, **filters: Any) -> list[dict[str, Any]]:
    """What `compare(**filters)` must return: records.compare_rows over the succeeded evaluations the
    filters select, read through the public API."""
    evaluations, offset = [], 0
    while page := store.list_evaluations(status="succeeded", limit=100, offset=offset):
        evaluations += page
        offset += len(page)
    since, until = filters.get("since"), filters.get("until")
    chosen = [
        e
        for e in evaluations
        if (not filters.get("ids") or e["id"] in filters["ids"])
        and (not filters.get("models") or e["model"]["name"] in filters["models"])
        and (not filters.get("frameworks") or e["framework"]["name"] in filters["frameworks"])
        and (not filters.get("system_ids") or e["system"]["id"] in filters["system_ids"])
        and (since is None or datetime.fromisoformat(e["created_at"]) >= since)
        and (until is None or datetime.fromisoformat(e["created_at"]) < until)
    ]
    where = CompareFilter(
        batch_sizes=tuple(filters.get("batch_sizes", ())), scenarios=tuple(filters.get("scenarios", ()))
    )
    return compare_rows(chosen, where)


def keys(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (r["model"], r["framework"], r["system_id"], r["device"], r["scenario"], r["batch_size"])
        for r in rows
    ]


def test_the_latest_finished_evaluation_of_a_key_wins_and_runs_count_them_all(store: Store) -> None:
    # Given three succeeded runs of one model on one system: the last created is not the last finished
    older = evaluate(store, created=timedelta(minutes=0), finished=timedelta(hours=1), mean=3.0)
    latest = evaluate(store, created=timedelta(minutes=10), finished=timedelta(hours=3), mean=2.0)
    evaluate(store, created=timedelta(minutes=20), finished=timedelta(hours=2), mean=4.0)

    # When they are compared
    rows = store.compare()

    # Then each (scenario, batch size) has one row, from the run finished last, counting all three
    assert [(r["scenario"], r["batch_size"]) for r in rows] == [
        ("offline", 1),
        ("offline", 8),
        ("single_stream", 1),
    ]
    assert {r["evaluation_id"] for r in rows} == {latest} != {older}
    assert all(r["runs"] == 3 and r["median_ms"] == 2.0 for r in rows)
    assert rows[0]["finished_at"] == (T0 + timedelta(hours=3)).isoformat()


def test_a_row_holds_every_column_from_its_evaluation_and_system(store: Store) -> None:
    # Given one succeeded evaluation
    id = evaluate(store, system=2, device="cuda:0", measurements=[make_measurement("offline", 8, mean=4.0)])

    # When compared, Then its row has every column, in order, filled from the measurement and system
    [row] = store.compare()
    assert list(row) == list(COMPARE_COLUMNS)
    assert row == {
        "model": "resnet18",
        "display_name": "resnet18",
        "framework": "pytorch",
        "framework_version": "9.9",
        "system_id": "sys-2",
        "hostname": "host-2",
        "agent_id": "agent-2",
        "instance_type": None,
        "cpu": "Xeon Gold 6230",
        "device": "cuda:0",
        "scenario": "offline",
        "batch_size": 8,
        "median_ms": 4.0,
        "p90_ms": pytest.approx(4.4),
        "p99_ms": pytest.approx(5.2),
        "ci_low_ms": pytest.approx(3.8),
        "ci_high_ms": pytest.approx(4.2),
        "throughput": 2000.0,
        "count": 5,
        "target_qps": None,
        "achieved_qps": None,
        "max_qps": None,
        "price_per_hour": None,
        "cost_per_1k": None,
        "cost_ci_low": None,
        "cost_ci_high": None,
        "valid": False,
        "reasons": ["too few samples"],
        "top1": None,
        "top5": None,
        "parity": None,
        "parity_against": None,
        "runs": 1,
        "workload_key": workload_key(store.get_evaluation(id), "offline"),
        "evaluation_id": id,
        "finished_at": (T0 + timedelta(hours=1)).isoformat(),
    }


def test_equal_finish_times_are_decided_by_the_greater_id(store: Store) -> None:
    # Given two runs of one key finished at the same instant
    evaluate(store, id="b" * 32, mean=1.0)
    evaluate(store, id="a" * 32, mean=5.0)

    # When compared, from the kept counts or counting a time window, Then the greater id is the
    # latest, every time
    assert {r["evaluation_id"] for r in store.compare()} == {"b" * 32}
    assert {r["evaluation_id"] for r in store.compare(since=T0 - timedelta(days=1))} == {"b" * 32}
    assert {r["evaluation_id"] for r in store.compare(ids=["a" * 32, "b" * 32])} == {"b" * 32}


def test_only_succeeded_evaluations_count(store: Store) -> None:
    # Given a succeeded run, and one each running, failed and cancelled of the same model
    succeeded = evaluate(store)
    evaluate(store, finished=None)
    store.fail_evaluation(evaluate(store, finished=None), error=ERROR)
    store.cancel_evaluation(evaluate(store, finished=None))

    # When compared, Then only the succeeded one is drawn on, and counted
    rows = store.compare()
    assert {r["evaluation_id"] for r in rows} == {succeeded}
    assert all(r["runs"] == 1 for r in rows)
    assert store.compare(models=["bert"]) == []


def test_rows_are_ordered_by_model_scenario_batch_size_then_fastest(store: Store) -> None:
    # Given two models, three frameworks and two systems with different speeds, and a missing median
    evaluate(store, model="resnet18", framework="pytorch", system=1, mean=3.0)
    evaluate(store, model="resnet18", framework="onnxruntime", system=1, mean=1.0)
    evaluate(store, model="resnet18", framework="pytorch", system=2, mean=2.0)
    evaluate(store, model="bert", framework="pytorch", system=1, mean=9.0)
    unmeasured = make_measurement("offline", 1)
    unmeasured["latency_ms"] = {**unmeasured["latency_ms"], "median": None}
    evaluate(store, model="resnet18", framework="tensorflow", system=1, measurements=[unmeasured])

    # When compared
    rows = store.compare(scenarios=["offline"], batch_sizes=[1])

    # Then models come alphabetically, and within a group the fastest first, the unmeasured last
    assert [(r["model"], r["framework"], r["system_id"], r["median_ms"]) for r in rows] == [
        ("bert", "pytorch", "sys-1", 9.0),
        ("resnet18", "onnxruntime", "sys-1", 1.0),
        ("resnet18", "pytorch", "sys-2", 2.0),
        ("resnet18", "pytorch", "sys-1", 3.0),
        ("resnet18", "tensorflow", "sys-1", None),
    ]


@pytest.fixture
def farm(store: Store) -> dict[str, str]:
    """Evaluations of two models, three frameworks, two systems and two devices over three days."""
    return {
        "resnet_pt_1": evaluate(store, created=timedelta(days=0), mean=3.0),
        "resnet_pt_1_again": evaluate(store, created=timedelta(days=0, hours=1), finished=timedelta(hours=5)),
        "resnet_ort_1": evaluate(store, framework="onnxruntime", created=timedelta(days=1), mean=1.5),
        "resnet_pt_2_gpu": evaluate(store, system=2, device="cuda:0", created=timedelta(days=1), mean=0.5),
        "bert_pt_2": evaluate(store, model="bert", system=2, created=timedelta(days=2), mean=7.0),
        "bert_tf_1": evaluate(
            store,
            model="bert",
            framework="tensorflow",
            created=timedelta(days=2, hours=1),
            measurements=[make_measurement("server", 4, mean=6.0)],
        ),
        "running": evaluate(store, model="bert", created=timedelta(days=2), finished=None),
    }


def test_filters_narrow_the_evaluations_drawn_on(store: Store, farm: dict[str, str]) -> None:
    def evaluation_ids(**filters: Any) -> set[str]:
        return {r["evaluation_id"] for r in store.compare(**filters)}

    assert evaluation_ids(ids=[farm["resnet_pt_1"], farm["bert_pt_2"]]) == {
        farm["resnet_pt_1"],
        farm["bert_pt_2"],
    }
    assert evaluation_ids(ids=[farm["running"]]) == set()
    assert evaluation_ids(models=["bert"]) == {farm["bert_pt_2"], farm["bert_tf_1"]}
    assert evaluation_ids(frameworks=["onnxruntime", "tensorflow"]) == {
        farm["resnet_ort_1"],
        farm["bert_tf_1"],
    }
    assert evaluation_ids(system_ids=["sys-2"]) == {farm["resnet_pt_2_gpu"], farm["bert_pt_2"]}
    assert evaluation_ids(since=T0 + timedelta(days=1), until=T0 + timedelta(days=2)) == {
        farm["resnet_ort_1"],
        farm["resnet_pt_2_gpu"],
    }
    # until is exclusive, since inclusive
    assert evaluation_ids(until=T0 + timedelta(days=2, hours=1), since=T0 + timedelta(days=2)) == {
        farm["bert_pt_2"]
    }
    assert {(r["scenario"], r["batch_size"]) for r in store.compare(batch_sizes=[4])} == {("server", 4)}
    assert {(r["scenario"], r["batch_size"]) for r in store.compare(scenarios=["offline"])} == {
        ("offline", 1),
        ("offline", 8),
    }
    # the same evaluation by id, and the rerun of its key left out: runs counts only what was drawn on
    assert {r["runs"] for r in store.compare(ids=[farm["resnet_pt_1"]])} == {1}
    assert {
        r["runs"] for r in store.compare(models=["resnet18"], frameworks=["pytorch"], system_ids=["sys-1"])
    } == {2}


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"models": ["resnet18"], "scenarios": ["offline"]},
        {"frameworks": ["pytorch"], "batch_sizes": [1, 4]},
        {"system_ids": ["sys-1"], "since": T0 + timedelta(hours=12)},
        {"until": T0 + timedelta(days=1, hours=12), "scenarios": ["single_stream", "server"]},
        {"models": ["nothing"]},
    ],
    ids=["all", "model+scenario", "framework+batch", "system+since", "until+scenarios", "none"],
)
def test_every_backend_returns_exactly_what_compare_rows_returns(
    store: Store, farm: dict[str, str], filters: dict[str, Any]
) -> None:
    # Given the farm's evaluations, When compared with the filters, Then the rows are compare_rows' own
    rows = store.compare(**filters)
    assert rows == reference(store, **filters)


def test_the_ids_filter_matches_the_reference_too(store: Store, farm: dict[str, str]) -> None:
    ids = [farm["resnet_pt_1"], farm["resnet_pt_1_again"], farm["bert_tf_1"], farm["running"]]
    assert store.compare(ids=ids) == reference(store, ids=ids)
    assert len(store.compare(ids=ids)) == 4


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"batch_sizes": [0]}, "batch_sizes"),
        ({"batch_sizes": [True]}, "batch_sizes"),
        ({"ids": [""]}, "ids"),
        ({"models": [None]}, "models"),
        ({"since": datetime(2024, 1, 1)}, "since"),
        ({"until": "yesterday"}, "until"),
    ],
)
def test_bad_compare_arguments_name_the_field(store: Store, filters: dict[str, Any], field: str) -> None:
    with pytest.raises(UserError) as raised:
        store.compare(**filters)
    assert raised.value.field == field
