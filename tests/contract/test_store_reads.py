"""The Store contract, part 2: what comes back. Stored values round-trip exactly (raw latencies,
timestamps, systems, across a reopen), filters and pages find the right evaluations, and ids resolve
from unique prefixes. Every implementation in conftest.py must pass every test."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.store import EvaluationNotFound, Store, open_store
from mlscope.store.errors import AmbiguousSystemId, SystemNotFound
from tests.contract.builders import ERROR, T0, finish, ids_of, make_measurement, make_system, run_to, submit

# ----- stored values ---------------------------------------------------------------------------------


def test_raw_latencies_round_trip_exactly_only_when_asked(store: Store) -> None:
    # Given a measurement with 100k raw latencies, the int64 extremes among them
    latencies = [random.Random(7).randrange(1, 2**40) for _ in range(100_000)]
    latencies[0], latencies[-1] = 0, 2**63 - 1
    id = run_to(store, "running")
    finish(store, id, measurements=[{**make_measurement("offline", 32), "latencies_ns": latencies}])

    # When it is read with and without raw latencies, and listed
    raw = store.get_evaluation(id, include_raw=True)["measurements"][0]
    plain = store.get_evaluation(id)["measurements"][0]
    listed = store.list_evaluations()[0]["measurements"][0]

    # Then only the raw read carries them, exactly as given
    assert raw["latencies_ns"] == latencies
    assert "latencies_ns" not in plain and "latencies_ns" not in listed


def test_statistics_that_are_not_numbers_are_stored_as_null(store: Store) -> None:
    # Given a measurement of one sample, whose spread statistics are NaN, and an infinite throughput
    measurement = make_measurement()
    measurement["latency_ms"] = {**measurement["latency_ms"], "stdev": float("nan"), "cv": float("inf")}
    measurement["throughput"] = float("inf")
    id = run_to(store, "running")

    # When it is stored
    finish(store, id, measurements=[measurement])

    # Then every backend gives them back as null
    stored = store.get_evaluation(id)["measurements"][0]
    assert stored["latency_ms"]["stdev"] is None and stored["latency_ms"]["cv"] is None
    assert stored["throughput"] is None


def test_numpy_values_are_stored_as_plain_numbers(store: Store) -> None:
    # Given a measurement as measuring code hands it over: numpy scalars and a numpy array of latencies
    import numpy as np

    measurement = make_measurement()
    latencies = [1_000_000 + 7 * k for k in range(50)]
    figures = {"median": np.float64(1.25), "count": np.int64(50)}
    measurement["latency_ms"] = {**measurement["latency_ms"], **figures}
    measurement["latencies_ns"] = np.array(latencies, dtype=np.int64)
    measurement["extra_figures"] = (np.float32(0.5), 3)
    id = run_to(store, "running")

    # When it is stored
    finish(store, id, measurements=[measurement])

    # Then every backend gives back plain JSON numbers, equal to what was given
    stored = store.get_evaluation(id, include_raw=True)["measurements"][0]
    assert stored["latency_ms"]["median"] == 1.25 and type(stored["latency_ms"]["median"]) is float
    assert stored["latency_ms"]["count"] == 50 and type(stored["latency_ms"]["count"]) is int
    assert stored["latencies_ns"] == latencies and all(type(v) is int for v in stored["latencies_ns"])
    assert stored["extra_figures"] == [0.5, 3]


def test_timestamps_are_utc_iso_strings(store: Store) -> None:
    # Given an evaluation submitted with a creation time in another time zone, then run to the end
    created = datetime(2024, 5, 1, 14, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    id = run_to(store, "succeeded", created_at=created)

    # When it is read
    evaluation = store.get_evaluation(id)

    # Then every timestamp is an ISO-8601 string in UTC, the creation time the same instant as given
    assert evaluation["created_at"] == "2024-05-01T12:30:15.123456+00:00"
    for key in ("created_at", "started_at", "finished_at"):
        parsed = datetime.fromisoformat(evaluation[key])
        assert parsed.utcoffset() == timedelta(0)
    assert datetime.fromisoformat(evaluation["started_at"]) <= datetime.fromisoformat(
        evaluation["finished_at"]
    )


def test_systems_are_saved_once_and_shared(store: Store) -> None:
    # Given a system saved, then saved again under the same id
    assert store.save_system(make_system(1)) == "sys-1"
    assert store.save_system(make_system(1)) == "sys-1"

    # When two evaluations finish on it and one on another
    for system in (make_system(1), make_system(1), make_system(2)):
        finish(store, run_to(store, "running"), system=system)

    # Then each system is kept once, in full, and evaluations can be found by it
    assert store.list_systems() == [make_system(1), make_system(2)]
    assert store.get_system("sys-2") == make_system(2)
    assert store.count_evaluations(system_id="sys-1") == 2
    with pytest.raises(UserError) as raised:
        store.get_system("sys-404")
    assert "sys-404" in str(raised.value)


def test_reopening_the_store_keeps_everything(store_url: str) -> None:
    # Given a store holding a succeeded and a failed evaluation
    with open_store(store_url) as first:
        ids = [run_to(first, "succeeded"), run_to(first, "failed"), run_to(first, "queued")]
        before = [first.get_evaluation(id, include_raw=True) for id in ids]
        systems = first.list_systems()

    # When it is closed and opened again
    with open_store(store_url) as second:
        # Then everything stored comes back unchanged
        assert [second.get_evaluation(id, include_raw=True) for id in ids] == before
        assert second.list_systems() == systems


# ----- finding evaluations ---------------------------------------------------------------------------


def test_filters_pagination_and_count(store: Store) -> None:
    # Given six evaluations a minute apart, over two models, two frameworks, two systems, four statuses
    specs = [
        ("resnet18", "pytorch"),
        ("resnet18", "onnxruntime"),
        ("bert", "pytorch"),
        ("bert", "onnxruntime"),
        ("resnet18", "pytorch"),
        ("bert", "pytorch"),
    ]
    ids = [
        submit(store, model=model, framework=framework, created_at=T0 + timedelta(minutes=minute))
        for minute, (model, framework) in enumerate(specs)
    ]
    for id, system in ((ids[0], 1), (ids[1], 2), (ids[2], 1)):
        store.start_evaluation(id)
        finish(store, id, system=make_system(system))
    store.fail_evaluation(ids[3], error=ERROR)
    store.cancel_evaluation(ids[4])

    # When they are listed and counted with each filter, Then the matches come newest first
    queries: list[tuple[dict[str, Any], list[str]]] = [
        ({}, ids[::-1]),
        ({"model": "resnet18"}, [ids[4], ids[1], ids[0]]),
        ({"framework": "onnxruntime"}, [ids[3], ids[1]]),
        ({"system_id": "sys-1"}, [ids[2], ids[0]]),
        ({"status": "succeeded"}, [ids[2], ids[1], ids[0]]),
        ({"status": "queued"}, [ids[5]]),
        ({"since": T0 + timedelta(minutes=2), "until": T0 + timedelta(minutes=4)}, [ids[3], ids[2]]),
        ({"model": "bert", "status": "failed"}, [ids[3]]),
        ({"model": "vgg16"}, []),
    ]
    for filters, expected in queries:
        assert ids_of(store.list_evaluations(**filters)) == expected, filters
        assert store.count_evaluations(**filters) == len(expected), filters

    # And pages of two cover the whole list, in order, without overlap
    pages = [ids_of(store.list_evaluations(limit=2, offset=offset)) for offset in (0, 2, 4, 6)]
    assert pages == [ids[5:3:-1], ids[3:1:-1], ids[1::-1], []]


def test_a_listed_evaluation_equals_the_one_read_alone(store: Store) -> None:
    # Given a succeeded evaluation
    id = run_to(store, "succeeded")

    # When it is listed, Then it has the same shape and values as get_evaluation without raw latencies
    assert store.list_evaluations() == [store.get_evaluation(id)]


def test_evaluations_created_at_the_same_time_are_ordered_by_id(store: Store) -> None:
    # Given two evaluations created at the same instant, the later id submitted first
    later, earlier = submit(store, id="b" * 32, created_at=T0), submit(store, id="a" * 32, created_at=T0)

    # When they are listed, Then ties on created_at are broken by id
    assert ids_of(store.list_evaluations()) == [earlier, later]


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"status": "done"}, "status"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": True}, "limit"),
        ({"offset": -1}, "offset"),
        ({"since": datetime(2024, 1, 1)}, "since"),
        ({"until": "yesterday"}, "until"),
        ({"model": 3}, "model"),
        ({"framework": ""}, "framework"),
        ({"system_id": ["sys-1"]}, "system_id"),
    ],
)
def test_bad_filter_values_name_the_field(store: Store, filters: dict[str, Any], field: str) -> None:
    with pytest.raises(UserError) as raised:
        store.list_evaluations(**filters)
    assert raised.value.field == field
    assert field in str(raised.value)
    if field not in ("limit", "offset"):
        with pytest.raises(UserError):
            store.count_evaluations(**filters)


# ----- ids and prefixes ------------------------------------------------------------------------------


def test_a_unique_prefix_names_its_evaluation(store: Store) -> None:
    # Given two evaluations whose ids share three characters
    wanted = submit(store, id="abcd" + "1" * 28)
    submit(store, id="abce" + "2" * 28)

    # When a unique prefix of at least four characters is given, Then it resolves to the full id
    assert store.resolve_id("abcd") == wanted
    assert store.get_evaluation("abcd11")["id"] == wanted
    assert store.resolve_id(wanted) == wanted


def test_an_exact_id_wins_over_longer_ids_it_prefixes(store: Store) -> None:
    # Given an id that is itself the start of another id
    short, longer = submit(store, id="c0ffee12"), submit(store, id="c0ffee123")

    # When the short one is named exactly, Then it is that evaluation, not an ambiguity
    assert store.resolve_id(short) == short
    assert store.get_evaluation(longer)["id"] == longer


def test_an_ambiguous_prefix_lists_the_candidates(store: Store) -> None:
    # Given two evaluations whose ids start alike
    first, second = submit(store, id="feed" + "1" * 28), submit(store, id="feed" + "2" * 28)

    # When the common prefix is given, Then a user error lists both candidates
    with pytest.raises(UserError) as raised:
        store.get_evaluation("feed")
    assert first in str(raised.value) and second in str(raised.value)
    assert raised.value.field == "id"


@pytest.mark.parametrize("wrong", ["0000ffff", "abc", "abcd" + "1" * 28 + "0"])
def test_an_unknown_id_is_not_found(store: Store, wrong: str) -> None:
    # Given an evaluation whose id starts with "abc" (too short to be a prefix)
    submit(store, id="abcd" + "1" * 28)

    # When an id that matches nothing is used anywhere, Then EvaluationNotFound names it
    calls = [
        lambda: store.get_evaluation(wrong),
        lambda: store.resolve_id(wrong),
        lambda: store.start_evaluation(wrong),
        lambda: finish(store, wrong),
        lambda: store.fail_evaluation(wrong, error=ERROR),
        lambda: store.cancel_evaluation(wrong),
    ]
    for call in calls:
        with pytest.raises(EvaluationNotFound) as raised:
            call()
        assert isinstance(raised.value, UserError) and wrong in str(raised.value)


def test_a_unique_prefix_names_its_system(store: Store) -> None:
    # Given systems whose ids share their first characters, one the start of another, and one with
    # a character LIKE would read as a wildcard
    for id in ("5b289c88413dc387", "5b289c88ffff0000", "5b28_c88", "19e01c3c", "19e01c3c9"):
        store.save_system(make_system(id=id))

    # When a unique prefix of at least four characters (or an exact id) is given, Then the full id
    assert store.resolve_system_id("5b289c884") == "5b289c88413dc387"
    assert store.resolve_system_id("5b28_") == "5b28_c88"
    assert store.resolve_system_id("19e01c3c") == "19e01c3c"
    assert store.resolve_system_id("19e01c3c9") == "19e01c3c9"


@pytest.mark.parametrize(
    ("given", "error", "named"),
    [
        ("5b289c88", AmbiguousSystemId, ["5b289c88413dc387", "5b289c88ffff0000"]),
        ("5b2", SystemNotFound, ["at least 4 characters"]),
        ("0000ffff", SystemNotFound, ["0000ffff"]),
        ("5B289C88413DC387", SystemNotFound, ["5B289C88413DC387"]),
    ],
)
def test_a_system_prefix_naming_several_or_none_is_a_user_error(
    store: Store, given: str, error: type[UserError], named: list[str]
) -> None:
    # Given two systems whose ids share eight characters
    for id in ("5b289c88413dc387", "5b289c88ffff0000"):
        store.save_system(make_system(id=id))
    # When an ambiguous, short, unknown or differently cased prefix is given, Then one error names it
    with pytest.raises(error) as raised:
        store.resolve_system_id(given)
    assert raised.value.field == "system_id"
    assert all(name in str(raised.value) for name in named) and "\n" not in str(raised.value)


@pytest.mark.parametrize("level", ["NO_TRACE", "MODEL", "FULL"])
def test_the_trace_level_is_kept(store: Store, level: str) -> None:
    id = store.create_evaluation(
        model={"name": "resnet18", "version": None, "manifest_sha256": None},
        manifest={},
        framework={"name": "onnxruntime", "version": None},
        runner="process",
        device="cuda:0",
        request={},
        trace_level=level,
    )
    evaluation = store.get_evaluation(id)
    assert (evaluation["trace_level"], evaluation["runner"], evaluation["device"]) == (
        level,
        "process",
        "cuda:0",
    )
