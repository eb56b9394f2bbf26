"""The Store contract, part 5: history series (`Store.history`). A point per succeeded evaluation of one
model on one framework that measured the scenario at the batch size, oldest first, the latest `limit`
of them; the filters, the manifest and framework version among them; the point's figures are the
measurement's own; the series keys a filter selects (`Store.history_series`); a planted step in a
stored series is found (analysis.history reads every backend alike); bad arguments name the field."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest

from mlscope.analysis.history import read_series
from mlscope.contract.errors import UserError
from mlscope.contract.system_ids import system_ids
from mlscope.contract.workload import workload_key
from mlscope.store import Store
from mlscope.store.records.history import HISTORY_FIELDS, MAX_HISTORY_POINTS, SERIES_KEY_FIELDS
from tests.contract.builders import COLD_START, ERROR, T0, make_measurement, make_system


def evaluate(
    store: Store,
    *,
    model: str = "resnet18",
    framework: str = "pytorch",
    system: int | dict[str, Any] = 1,
    device: str = "cpu",
    minutes: int = 0,
    mean: float = 2.0,
    measurements: list[dict[str, Any]] | None = None,
    id: str | None = None,
    succeed: bool = True,
    manifest: str | None = None,
    version: str = "9.9",
) -> str:
    """An evaluation created at T0 + `minutes`, succeeded (or left running) with single_stream and
    offline at batch size 1 and offline at 8 unless `measurements` says otherwise."""
    id = store.create_evaluation(
        model={"name": model, "version": "1.0", "manifest_sha256": manifest},
        manifest={"name": model},
        framework={"name": framework, "version": None},
        runner="inline",
        device=device,
        request={},
        id=id,
        created_at=T0 + timedelta(minutes=minutes),
    )
    store.start_evaluation(id)
    if succeed:
        store.finish_evaluation(
            id,
            system=make_system(system) if isinstance(system, int) else system,
            framework={"name": framework, "version": version},
            cold_start=COLD_START,
            measurements=measurements
            or [
                make_measurement("single_stream", 1, mean=mean),
                make_measurement("offline", 1, mean=mean / 2),
                make_measurement("offline", 8, mean=mean * 4),
            ],
            finished_at=T0 + timedelta(minutes=minutes, seconds=30),
        )
    return id


def ids(points: list[dict[str, Any]]) -> list[str]:
    return [point["evaluation_id"] for point in points]


def test_a_point_per_succeeded_evaluation_oldest_first_with_its_figures(store: Store) -> None:
    # Given three succeeded runs of one model, created out of order, and others that do not belong
    second = evaluate(store, minutes=20, mean=3.0)
    first = evaluate(store, minutes=10, mean=2.0)
    third = evaluate(store, minutes=30, mean=4.0, system=2, device="cuda:0")
    evaluate(store, minutes=15, succeed=False)
    store.fail_evaluation(evaluate(store, minutes=16, succeed=False), error=ERROR)
    evaluate(store, minutes=17, model="bert")
    evaluate(store, minutes=18, framework="onnxruntime")
    evaluate(store, minutes=19, measurements=[make_measurement("offline", 1)])

    # When its history is read at the default point (single_stream, batch size 1)
    points = store.history(model="resnet18", framework="pytorch")

    # Then each succeeded run that measured it is a point, oldest first, with its figures
    assert ids(points) == [first, second, third]
    assert [list(point) for point in points] == [list(HISTORY_FIELDS)] * 3
    assert points[2] == {
        "evaluation_id": third,
        "created_at": (T0 + timedelta(minutes=30)).isoformat(),
        "system_id": "sys-2",
        "device": "cuda:0",
        "manifest_sha256": None,
        "framework_version": "9.9",
        "median_ms": 4.0,
        "ci_low_ms": pytest.approx(3.8),
        "ci_high_ms": pytest.approx(4.2),
        "p99_ms": pytest.approx(5.2),
        "throughput": 250.0,
        "valid": False,
        "workload_key": workload_key(store.get_evaluation(third), "single_stream"),
        "machine_id": system_ids(make_system(2))[0],
        "stack_id": system_ids(make_system(2))[1],
    }


def test_the_figures_are_those_of_the_stored_measurement(store: Store) -> None:
    # Given runs measured at three points
    for minutes in (1, 2, 3):
        evaluate(store, minutes=minutes, mean=float(minutes))

    # When the history of each point is read, Then every figure is the stored measurement's own
    for scenario, batch_size in (("single_stream", 1), ("offline", 1), ("offline", 8)):
        points = store.history(
            model="resnet18", framework="pytorch", scenario=scenario, batch_size=batch_size
        )
        assert len(points) == 3
        for point in points:
            evaluation = store.get_evaluation(point["evaluation_id"])
            [m] = [
                m
                for m in evaluation["measurements"]
                if (m["scenario"], m["batch_size"]) == (scenario, batch_size)
            ]
            latency = m["latency_ms"]
            assert point["created_at"] == evaluation["created_at"]
            assert (point["system_id"], point["device"]) == (evaluation["system"]["id"], evaluation["device"])
            assert (point["median_ms"], point["p99_ms"]) == (latency["median"], latency["p99"])
            assert [point["ci_low_ms"], point["ci_high_ms"]] == latency["median_ci"]
            assert (point["throughput"], point["valid"]) == (m["throughput"], m["validity"]["valid"])


def test_filters_narrow_the_series(store: Store) -> None:
    # Given runs on two systems and two devices over four hours
    a = evaluate(store, minutes=0, system=1, device="cpu")
    b = evaluate(store, minutes=60, system=2, device="cpu")
    c = evaluate(store, minutes=120, system=1, device="cuda:0")
    d = evaluate(store, minutes=180, system=2, device="cuda:0")

    def series(**filters: Any) -> list[str]:
        return ids(store.history(model="resnet18", framework="pytorch", **filters))

    # When filtered, Then only the matching points remain, in order; since inclusive, until exclusive
    assert series() == [a, b, c, d]
    assert series(system_id="sys-1") == [a, c]
    assert series(device="cuda:0") == [c, d]
    assert series(system_id="sys-2", device="cpu") == [b]
    assert series(since=T0 + timedelta(minutes=60), until=T0 + timedelta(minutes=180)) == [b, c]
    assert series(scenario="offline", batch_size=8, since=T0 + timedelta(minutes=120)) == [c, d]
    assert series(scenario="server") == []
    assert series(batch_size=4) == []
    assert ids(store.history(model="bert", framework="pytorch")) == []


def test_one_machine_measured_locally_and_by_a_farm_agent_is_one_series(store: Store) -> None:
    # Given one machine measured by `mlscope run` and then by a farm worker in a container: another
    # host name, an agent and the container flag, so another system id
    local = evaluate(store, minutes=0, system=make_system(1, id="local-id"))
    agent = {"id": "agent-7", "capabilities": {"frameworks": ["pytorch"]}}
    farmed = make_system(1, id="farm-id", hostname="worker-7", container=True, agent=agent)
    remote = evaluate(store, minutes=10, system=farmed)
    other = evaluate(store, minutes=20, system=2)

    # When the series are listed and read
    found = store.history_series(model="resnet18", scenario="single_stream", batch_size=1)

    # Then the two runs of the machine are one series of two points, whichever system id is named
    assert sorted(s["points"] for s in found) == [1, 2]
    (both,) = [s for s in found if s["points"] == 2]
    assert (both["machine_id"], both["stack_id"]) == system_ids(make_system(1))
    points = store.history(model="resnet18", framework="pytorch", machine_id=both["machine_id"])
    assert ids(points) == [local, remote]
    assert [p["system_id"] for p in points] == ["local-id", "farm-id"]
    for system_id in ("local-id", "farm-id"):
        assert ids(store.history(model="resnet18", framework="pytorch", system_id=system_id)) == [
            local,
            remote,
        ]
    assert ids(store.history(model="resnet18", framework="pytorch", system_id="sys-2")) == [other]
    # And change points are looked for across both (one series, not a mix)
    read = read_series(store, model="resnet18", framework="pytorch", system_id="farm-id")
    assert "belong to" not in (read["detection"]["note"] or "")


def test_a_series_is_one_manifest_and_framework_version(store: Store) -> None:
    # Given runs of one model on one framework under two manifests and two framework versions
    old = evaluate(store, minutes=0, manifest="a" * 64, version="1.0")
    new_manifest = evaluate(store, minutes=1, manifest="b" * 64, version="1.0")
    new_version = evaluate(store, minutes=2, manifest="a" * 64, version="2.0")

    def series(**filters: Any) -> list[str]:
        return ids(store.history(model="resnet18", framework="pytorch", **filters))

    # When read without them, Then every point comes, saying which manifest and version it is of
    points = store.history(model="resnet18", framework="pytorch")
    assert [(p["manifest_sha256"], p["framework_version"]) for p in points] == [
        ("a" * 64, "1.0"),
        ("b" * 64, "1.0"),
        ("a" * 64, "2.0"),
    ]
    # When narrowed to one, Then only its points remain
    assert series(manifest_sha256="a" * 64) == [old, new_version]
    assert series(framework_version="1.0") == [old, new_manifest]
    assert series(manifest_sha256="a" * 64, framework_version="1.0") == [old]
    assert series(manifest_sha256="c" * 64) == []


def test_history_series_lists_each_series_key_with_its_points(store: Store) -> None:
    # Given runs that make four single_stream series (two systems, two framework versions) and
    # offline ones, and a run that did not succeed
    evaluate(store, minutes=0, system=1, manifest="a" * 64)
    evaluate(store, minutes=10, system=1, manifest="a" * 64)
    evaluate(store, minutes=20, system=2, device="cuda:0", manifest="a" * 64)
    evaluate(store, minutes=30, system=1, version="10.0")
    evaluate(store, minutes=40, framework="onnxruntime", system=1)
    evaluate(store, minutes=50, succeed=False)

    # When the single_stream series of resnet18 at batch size 1 are listed
    found = store.history_series(model="resnet18", scenario="single_stream", batch_size=1)

    # Then each is one entry, keyed (by machine and stack, with a system id it was measured under) and
    # counted, None sorting first
    keys = [
        (s["framework"], s["manifest_sha256"], s["framework_version"], s["machine_id"], s["system_id"])
        for s in found
    ]
    (machine_1, stack), (machine_2, _) = system_ids(make_system(1)), system_ids(make_system(2))
    assert keys == [
        ("onnxruntime", None, "9.9", machine_1, "sys-1"),
        ("pytorch", None, "10.0", machine_1, "sys-1"),
        *sorted(
            [
                ("pytorch", "a" * 64, "9.9", machine_1, "sys-1"),
                ("pytorch", "a" * 64, "9.9", machine_2, "sys-2"),
            ]
        ),
    ]
    one = next(s for s in found if s["system_id"] == "sys-1" and s["manifest_sha256"])
    assert list(one) == [*SERIES_KEY_FIELDS, "system_id", "points", "first_at", "last_at"]
    assert one == {
        "model": "resnet18",
        "manifest_sha256": "a" * 64,
        "framework": "pytorch",
        "framework_version": "9.9",
        "machine_id": machine_1,
        "stack_id": stack,
        "device": "cpu",
        "scenario": "single_stream",
        "batch_size": 1,
        "system_id": "sys-1",
        "points": 2,
        "first_at": T0.isoformat(),
        "last_at": (T0 + timedelta(minutes=10)).isoformat(),
    }
    # And every measurement is a series: three per run here
    assert len(store.history_series()) == 4 * 3
    # And the time bounds count only the points between them, leaving out series with none
    since = store.history_series(
        framework="pytorch", batch_size=8, since=T0 + timedelta(minutes=10), until=T0 + timedelta(minutes=30)
    )
    assert sorted((s["system_id"], s["points"]) for s in since) == [("sys-1", 1), ("sys-2", 1)]
    assert store.history_series(model="bert") == []


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"model": ""}, "model"),
        ({"manifest_sha256": 3}, "manifest_sha256"),
        ({"framework_version": ""}, "framework_version"),
        ({"batch_size": 0}, "batch_size"),
        ({"since": datetime(2024, 1, 1)}, "since"),
    ],
)
def test_bad_series_filters_name_the_field(store: Store, arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(UserError) as raised:
        store.history_series(**arguments)
    assert raised.value.field == field


def test_the_limit_keeps_the_latest_points_still_oldest_first(store: Store) -> None:
    # Given five runs
    runs = [evaluate(store, minutes=minutes) for minutes in range(5)]

    # When at most two points are asked for, Then the latest two come, oldest first
    assert ids(store.history(model="resnet18", framework="pytorch", limit=2)) == runs[3:]
    assert ids(store.history(model="resnet18", framework="pytorch", limit=MAX_HISTORY_POINTS)) == runs


def test_runs_created_at_the_same_instant_are_ordered_by_id(store: Store) -> None:
    later, earlier = evaluate(store, id="b" * 32), evaluate(store, id="a" * 32)
    assert ids(store.history(model="resnet18", framework="pytorch")) == [earlier, later]
    assert ids(store.history(model="resnet18", framework="pytorch", limit=1)) == [later]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"model": ""}, "model"),
        ({"model": None}, "model"),
        ({"framework": 3}, "framework"),
        ({"system_id": ""}, "system_id"),
        ({"device": ["cpu"]}, "device"),
        ({"scenario": ""}, "scenario"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
        ({"batch_size": "8"}, "batch_size"),
        ({"since": datetime(2024, 1, 1)}, "since"),
        ({"until": "yesterday"}, "until"),
        ({"limit": 0}, "limit"),
        ({"limit": MAX_HISTORY_POINTS + 1}, "limit"),
        ({"limit": False}, "limit"),
        ({"manifest_sha256": ""}, "manifest_sha256"),
        ({"framework_version": 1}, "framework_version"),
    ],
)
def test_bad_history_arguments_name_the_field(store: Store, arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(UserError) as raised:
        store.history(**{"model": "resnet18", "framework": "pytorch", **arguments})
    assert raised.value.field == field


def test_a_planted_step_in_the_stored_series_is_found_at_its_evaluation(store: Store) -> None:
    # Given 24 runs, 12 around 2 ms and 12 around 2.2 ms (+10%), each measured at three points
    rng = np.random.default_rng(0)
    medians = np.concatenate([2.0 * rng.lognormal(0, 0.01, 12), 2.2 * rng.lognormal(0, 0.01, 12)])
    runs = [evaluate(store, minutes=i, mean=float(m), manifest="a" * 64) for i, m in enumerate(medians)]

    # When the series is read with its change points (analysis.history over this backend's points)
    found = read_series(store, model="resnet18", framework="pytorch", framework_version="9.9")

    # Then the shift is found at the first slower run, about +10%
    [change] = found["change_points"]
    assert (change["index"], change["evaluation_id"]) == (12, runs[12])
    assert change["shift_pct"] == pytest.approx(10.0, abs=2.0) and change["confidence"] >= 0.95
