"""The Store contract, part 1: the lifecycle (queued → running → succeeded | failed | cancelled),
idempotent and concurrent writes, and input validation. Every implementation in conftest.py must
pass every test; each reads Given / When / Then."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.store import InvalidTransition, Store, open_store
from tests.contract.builders import (
    COLD_START,
    ERROR,
    RESULT_KEYS,
    T0,
    finish,
    make_measurement,
    make_system,
    run_to,
    submit,
)


def test_a_submitted_evaluation_is_queued_with_its_snapshots(store: Store) -> None:
    # Given / When an evaluation is submitted without an id
    id = submit(store, created_at=T0)

    # Then it has a fresh uuid4 hex id and the full result shape, queued, with nothing measured yet
    evaluation = store.get_evaluation(id)
    assert len(id) == 32 and int(id, 16) >= 0
    assert set(evaluation) == RESULT_KEYS
    assert evaluation["status"] == "queued"
    assert evaluation["model"] == {"name": "resnet18", "version": "1.0", "manifest_sha256": "a" * 64}
    assert evaluation["display_name"] == "resnet18"
    assert evaluation["framework"] == {"name": "pytorch", "version": None}
    assert (evaluation["runner"], evaluation["device"], evaluation["trace_level"]) == (
        "inline",
        "cpu",
        "NO_TRACE",
    )
    assert evaluation["request"] == {"model": "resnet18", "framework": "pytorch", "batch_sizes": [1, 8]}
    assert evaluation["manifest"]["task"] == "image_classification"
    assert (
        evaluation["system"] is None and evaluation["cold_start"] is None and evaluation["trace_id"] is None
    )
    assert evaluation["measurements"] == [] and evaluation["error"] is None
    assert evaluation["created_at"] == T0.isoformat()
    assert evaluation["started_at"] is None and evaluation["finished_at"] is None
    assert submit(store) != id


def test_a_finished_evaluation_holds_its_results(store: Store) -> None:
    # Given a running evaluation
    id = submit(store)
    store.start_evaluation(id)

    # When it finishes with measurements given out of order
    measurements = [
        make_measurement("single_stream", 1),
        make_measurement("offline", 8),
        make_measurement("offline", 1),
    ]
    finish(store, id, system=make_system(2), measurements=measurements)

    # Then it succeeded, linked to the full system, and its measurements (extra keys included) come
    # back sorted by scenario then batch size, without raw latencies unless asked for
    evaluation = store.get_evaluation(id)
    assert evaluation["status"] == "succeeded"
    assert evaluation["system"] == make_system(2)
    assert evaluation["framework"] == {"name": "pytorch", "version": "2.3.0"}
    assert evaluation["cold_start"] == COLD_START
    assert [(m["scenario"], m["batch_size"]) for m in evaluation["measurements"]] == [
        ("offline", 1),
        ("offline", 8),
        ("single_stream", 1),
    ]
    expected = {key: value for key, value in make_measurement("offline", 8).items() if key != "latencies_ns"}
    assert evaluation["measurements"][1] == expected
    assert datetime.fromisoformat(evaluation["started_at"]) <= datetime.fromisoformat(
        evaluation["finished_at"]
    )


def test_the_frameworks_effective_settings_are_kept_with_its_version(store: Store) -> None:
    # Given a running evaluation
    id = submit(store)
    store.start_evaluation(id)
    # When it finishes with what the framework reported of itself where it ran
    details = {"threads": 2, "providers": ["CPUExecutionProvider"], "libraries": {"cuda": None}}
    store.finish_evaluation(
        id,
        system=make_system(),
        framework={"name": "onnxruntime", "version": "1.31.1", **details},
        cold_start=COLD_START,
        measurements=[make_measurement()],
    )
    # Then the version and every detail come back; the name stays the one it was submitted under
    assert store.get_evaluation(id)["framework"] == {"name": "pytorch", "version": "1.31.1", **details}


def test_a_redelivered_job_goes_back_to_running(store: Store) -> None:
    # Given a running evaluation whose worker died
    id = submit(store, created_at=T0)
    store.start_evaluation(id, started_at=T0 + timedelta(minutes=1))

    # When the job is redelivered and started again under the same id
    store.start_evaluation(id, started_at=T0 + timedelta(minutes=5))

    # Then it is running again, from the second start, and can still finish
    evaluation = store.get_evaluation(id)
    assert evaluation["status"] == "running"
    assert evaluation["started_at"] == (T0 + timedelta(minutes=5)).isoformat()
    finish(store, id)
    assert store.get_evaluation(id)["status"] == "succeeded"


@pytest.mark.parametrize("ended", ["succeeded", "failed", "cancelled"])
def test_an_ended_evaluation_never_changes(store: Store, ended: str) -> None:
    # Given an evaluation that has ended
    id = run_to(store, ended)
    before = store.get_evaluation(id, include_raw=True)

    # When anything tries to restart, finish, fail or cancel it
    with pytest.raises(InvalidTransition) as restarted:
        store.start_evaluation(id)
    finish(store, id, system=make_system(3), measurements=[make_measurement("offline", 64)])
    store.fail_evaluation(id, error={"type": "Late", "message": "too late", "phase": "predict"})
    cancelled = store.cancel_evaluation(id)

    # Then restarting is refused as a user error, cancelling reports False, and nothing changed
    assert isinstance(restarted.value, UserError) and ended in str(restarted.value)
    assert cancelled is False
    assert store.get_evaluation(id, include_raw=True) == before


def test_a_second_finish_keeps_the_first_results(store: Store) -> None:
    # Given an evaluation that finished once
    id = submit(store)
    store.start_evaluation(id)
    first = [make_measurement("offline", 1, mean=1.0), make_measurement("offline", 8, mean=4.0)]
    finish(store, id, system=make_system(1), measurements=first)
    before = store.get_evaluation(id, include_raw=True)

    # When a redelivered copy of the job finishes again with other figures on another machine
    finish(
        store,
        id,
        system=make_system(2),
        measurements=[make_measurement("offline", 1, mean=9.0), make_measurement("server", 1)],
        cold_start={"import_ms": 1.0, "load_ms": 1.0, "first_inference_ms": 1.0},
    )

    # Then the evaluation still holds exactly the first set
    assert store.get_evaluation(id, include_raw=True) == before
    assert [m["latency_ms"]["mean"] for m in before["measurements"]] == [1.0, 4.0]


def test_a_finish_after_cancel_keeps_it_cancelled(store: Store) -> None:
    # Given a running evaluation the user cancelled
    id = submit(store)
    store.start_evaluation(id)
    assert store.cancel_evaluation(id) is True

    # When its worker, unaware, finishes it
    finish(store, id)

    # Then it stays cancelled, with no results
    evaluation = store.get_evaluation(id)
    assert evaluation["status"] == "cancelled"
    assert (
        evaluation["measurements"] == [] and evaluation["system"] is None and evaluation["cold_start"] is None
    )


@pytest.mark.parametrize("started", [False, True])
def test_a_failed_evaluation_keeps_its_first_error(store: Store, started: bool) -> None:
    # Given a queued or running evaluation
    id = submit(store)
    if started:
        store.start_evaluation(id)

    # When it fails, and later a second failure and a late finish arrive
    store.fail_evaluation(id, error=ERROR, finished_at=T0 + timedelta(hours=1))
    store.fail_evaluation(id, error={"type": "Other", "message": "second", "phase": "predict"})
    finish(store, id)

    # Then it is failed with the first error and nothing measured
    evaluation = store.get_evaluation(id)
    assert evaluation["status"] == "failed"
    assert evaluation["error"] == ERROR
    assert evaluation["finished_at"] == (T0 + timedelta(hours=1)).isoformat()
    assert evaluation["measurements"] == [] and evaluation["system"] is None


def test_cancel_ends_queued_and_running_evaluations_only(store: Store) -> None:
    # Given one queued, one running and one succeeded evaluation
    queued, running, succeeded = run_to(store, "queued"), run_to(store, "running"), run_to(store, "succeeded")

    # When each is cancelled (the running one by an id prefix, as a user would)
    results = [
        store.cancel_evaluation(queued),
        store.cancel_evaluation(running[:8]),
        store.cancel_evaluation(succeeded),
    ]

    # Then the first two are cancelled with an end time, the succeeded one is untouched
    assert results == [True, True, False]
    for id in (queued, running):
        evaluation = store.get_evaluation(id)
        assert evaluation["status"] == "cancelled" and evaluation["finished_at"] is not None
    assert store.get_evaluation(succeeded)["status"] == "succeeded"
    assert store.cancel_evaluation(queued) is False


def test_submitting_the_same_id_twice_keeps_one_evaluation(store: Store) -> None:
    # Given an evaluation submitted with a chosen id, already started by a worker
    id = "5eed" + "0" * 28
    assert submit(store, id=id, model="resnet18") == id
    store.start_evaluation(id)

    # When the submit is retried with the same id
    again = submit(store, id=id, model="bert")

    # Then the id comes back and the first evaluation is untouched: one row, still running
    assert again == id
    assert store.count_evaluations() == 1
    evaluation = store.get_evaluation(id)
    assert evaluation["model"]["name"] == "resnet18" and evaluation["status"] == "running"


def test_concurrent_finishes_keep_exactly_one_set(store: Store, store_url: str) -> None:
    # Given running evaluations, and two workers on their own connections that both got each job
    ids = [run_to(store, "running") for _ in range(4)]
    sets = {
        "a": [make_measurement("offline", 1, mean=1.0), make_measurement("offline", 8, mean=2.0)],
        "b": [make_measurement("offline", 1, mean=3.0), make_measurement("single_stream", 1, mean=4.0)],
    }
    barrier = threading.Barrier(2, timeout=30)
    failures: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            with open_store(store_url) as own:
                for id in ids:
                    barrier.wait()
                    finish(own, id, system=make_system(1 if name == "a" else 2), measurements=sets[name])
        except BaseException as error:
            failures.append(error)
            barrier.abort()

    # When both finish every evaluation at the same moment
    threads = [threading.Thread(target=worker, args=(name,)) for name in sets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # Then neither worker failed, and each evaluation holds one whole set, from one worker
    assert failures == []
    for id in ids:
        evaluation = store.get_evaluation(id)
        got = [(m["scenario"], m["batch_size"], m["latency_ms"]["mean"]) for m in evaluation["measurements"]]
        winner = "a" if got and got[0][2] == 1.0 else "b"
        expected = sorted((m["scenario"], m["batch_size"], m["latency_ms"]["mean"]) for m in sets[winner])
        assert got == expected
        assert evaluation["system"] == make_system(1 if winner == "a" else 2)


def test_invalid_results_store_nothing(store: Store) -> None:
    # Given a running evaluation
    id = run_to(store, "running")

    # When it is finished with a measurement repeated for the same scenario and batch size
    with pytest.raises(UserError) as raised:
        finish(store, id, measurements=[make_measurement("offline", 8), make_measurement("offline", 8)])

    # Then the error names the repeat, and neither results nor the system were stored
    assert raised.value.field == "measurements[1]"
    evaluation = store.get_evaluation(id)
    assert evaluation["status"] == "running" and evaluation["measurements"] == []
    assert store.list_systems() == []


LATENCIES = "measurements[0].latencies_ns"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"measurements": [{**make_measurement(), "batch_size": 0}]}, "measurements[0].batch_size"),
        ({"measurements": [{**make_measurement(), "latencies_ns": [1.5]}]}, "measurements[0].latencies_ns"),
        ({"measurements": [{**make_measurement(), "latencies_ns": [2**63]}]}, "measurements[0].latencies_ns"),
        ({"measurements": [{**make_measurement(), "latencies_ns": [1, 2.5]}]}, LATENCIES),
        ({"measurements": [{**make_measurement(), "latencies_ns": [[1, 2]]}]}, LATENCIES),
        ({"measurements": [{**make_measurement(), "latency_ms": {1: 2.0}}]}, "measurements[0].latency_ms"),
        (
            {"measurements": [{**make_measurement(), "latency_ms": {"median": {2.0}}}]},
            "measurements[0].latency_ms.median",
        ),
        (
            {"measurements": [{**make_measurement(), "validity": {"reasons": []}}]},
            "measurements[0].validity.valid",
        ),
        ({"measurements": [{**make_measurement(), "scenario": ""}]}, "measurements[0].scenario"),
        ({"cold_start": {"import_ms": 1.0, "first_inference_ms": 2.0}}, "cold_start.load_ms"),
        ({"cold_start": {**COLD_START, "warm_load_ms": "fast"}}, "cold_start.warm_load_ms"),
        ({"cold_start": {**COLD_START, "warm_shared_mb": -1.0}}, "cold_start.warm_shared_mb"),
        ({"cold_start": {**COLD_START, "warm_source": "disk"}}, "cold_start.warm_source"),
        ({"system": {"hostname": "no id"}}, "system.id"),
        ({"finished_at": datetime(2024, 1, 1)}, "finished_at"),
    ],
)
def test_invalid_finish_names_the_field(store: Store, change: dict[str, Any], field: str) -> None:
    # Given a running evaluation
    id = run_to(store, "running")
    arguments: dict[str, Any] = {
        "system": make_system(),
        "framework": {"name": "pytorch", "version": "2.3.0"},
        "cold_start": COLD_START,
        "measurements": [make_measurement()],
        **change,
    }

    # When it is finished with one invalid field, Then the user error names that field
    with pytest.raises(UserError) as raised:
        store.finish_evaluation(id, **arguments)
    assert raised.value.field == field
    assert store.get_evaluation(id)["status"] == "running"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model": {"version": "1"}}, "model.name"),
        ({"framework": {"version": "2"}}, "framework.name"),
        ({"trace_level": "VERBOSE"}, "trace_level"),
        ({"runner": ""}, "runner"),
        ({"created_at": datetime(2024, 1, 1)}, "created_at"),
        ({"request": {"callback": object()}}, "request.callback"),
        ({"manifest": ["not", "an", "object"]}, "manifest"),
    ],
)
def test_invalid_submit_names_the_field(store: Store, change: dict[str, Any], field: str) -> None:
    arguments: dict[str, Any] = {
        "model": {"name": "resnet18", "version": "1.0", "manifest_sha256": None},
        "manifest": {},
        "framework": {"name": "pytorch", "version": None},
        "runner": "inline",
        "device": "cpu",
        "request": {},
        **change,
    }
    with pytest.raises(UserError) as raised:
        store.create_evaluation(**arguments)
    assert raised.value.field == field
    assert store.count_evaluations() == 0


def test_a_warm_start_is_kept_beside_the_cold_one(store: Store) -> None:
    # Given a running evaluation that measured a warm start from the model store
    id = run_to(store, "running")
    cold_start = {
        **COLD_START,
        "warm_load_ms": 4.5,
        "warm_first_inference_ms": 3.25,
        "warm_source": "store",
        "warm_shared_mb": 97.7,
        "warm_read_mb": 0.16,
        "warm_publish_ms": 0.3,
    }
    # When it finishes
    finish(store, id, cold_start=cold_start)
    # Then every warm figure comes back as it went in, beside the cold ones
    assert store.get_evaluation(id)["cold_start"] == cold_start
