"""History series read from a real store (SQLite) with their change points (analysis.history): a
planted step in a stored series is found at its evaluation; a short series says how many more points
it needs; `regressions` lists the series that got slower since a date and nothing else;
`against_history` judges one result against the latest segment of its series."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest

from mlscope.analysis.changepoints import DetectionSettings
from mlscope.analysis.history import against_history, read_series, regressions
from mlscope.contract.errors import UserError
from mlscope.store import Store, open_store
from tests.contract.builders import COLD_START, T0, make_measurement, make_system

MANIFEST = "ab" * 32


@pytest.fixture
def store(mlscope_env: dict[str, str]) -> Iterator[Store]:
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as opened:
        yield opened


def store_result(
    store: Store,
    median: float,
    at: datetime,
    *,
    model: str = "resnet18",
    framework: str = "onnxruntime",
    version: str = "1.17.0",
    system: int | str = 1,
    succeed: bool = True,
    valid: bool = False,
    request: dict[str, Any] | None = None,
) -> str:
    """One evaluation created `at`, whose single_stream batch-1 median is `median` ms, valid or not, on
    system `make_system(system)` (or, given a string, the system of that id)."""
    id = store.create_evaluation(
        model={"name": model, "version": "1", "manifest_sha256": MANIFEST},
        manifest={"name": model},
        framework={"name": framework, "version": None},
        runner="inline",
        device="cpu",
        request=request or {},
        created_at=at,
    )
    validity = {"valid": valid, "reasons": [] if valid else ["other processes used 40% of the CPU"]}
    if succeed:
        store.finish_evaluation(
            id,
            system=make_system(system) if isinstance(system, int) else make_system(id=system),
            framework={"name": framework, "version": version},
            cold_start=COLD_START,
            measurements=[{**make_measurement("single_stream", 1, mean=median), "validity": validity}],
            finished_at=at + timedelta(seconds=30),
        )
    return id


def store_series(
    store: Store, medians: Any, *, start: datetime = T0, every: timedelta = timedelta(hours=1), **key: Any
) -> list[str]:
    """A run per median, `every` apart from `start`; their ids."""
    return [store_result(store, float(m), start + i * every, **key) for i, m in enumerate(medians)]


def noisy(level: float, count: int, seed: int, cv: float = 0.015) -> np.ndarray:
    """`count` medians around `level` with a run-to-run coefficient of variation `cv`."""
    return level * np.random.default_rng(seed).lognormal(0.0, cv, count)


def series_of(store: Store, **key: Any) -> dict[str, Any]:
    return read_series(store, model=key.pop("model", "resnet18"), framework="onnxruntime", **key)


def test_a_planted_step_in_a_stored_series_is_found_at_its_evaluation(store: Store) -> None:
    # Given a stored series of 30 runs around 10 ms, then 30 around 10.5 ms (+5%)
    ids = store_series(store, np.concatenate([noisy(10.0, 30, 1), noisy(10.5, 30, 2)]))

    # When it is read with its change points
    found = series_of(store)

    # Then one change point, at the first slower run (or next to it), about +5%, surely
    [change] = found["change_points"]
    assert abs(change["index"] - 30) <= 1
    assert change["evaluation_id"] == ids[change["index"]]
    assert change["created_at"] == found["points"][change["index"]]["created_at"]
    assert change["shift_pct"] == pytest.approx(5.0, abs=1.5)
    assert change["confidence"] >= 0.95
    assert found["detection"]["points"] == 60 and found["detection"]["note"] is None


def test_a_flat_stored_series_has_no_change_point(store: Store) -> None:
    store_series(store, noisy(10.0, 40, 3))
    assert series_of(store)["change_points"] == []


def test_a_short_series_says_how_many_more_points_it_needs(store: Store) -> None:
    # Given 7 runs, and detection needing segments of 5
    store_series(store, noisy(10.0, 7, 4))

    # When read, Then the points come, no change points, and a note saying 3 more are needed
    found = series_of(store)
    assert len(found["points"]) == 7
    assert found["change_points"] is None
    assert "3 more" in found["detection"]["note"]


def test_points_of_several_series_are_not_searched_for_change_points(store: Store) -> None:
    # Given one model's runs on two systems, the second 20% slower
    store_series(store, noisy(10.0, 12, 5), system=1)
    store_series(store, noisy(12.0, 12, 6), system=2, start=T0 + timedelta(minutes=30))

    # When read without naming the system, Then no change point is claimed between them
    found = series_of(store)
    assert found["change_points"] is None and "2 series" in found["detection"]["note"]
    assert len(series_of(store, system_id="sys-2")["change_points"]) == 0


# ----- regressions ----------------------------------------------------------------------------------


def test_regressions_list_the_series_that_got_slower_since_the_date(store: Store) -> None:
    # Given four series over 40 hours: slower from hour 30, faster from hour 30, flat, and slower from
    # hour 10 (before the date); and one too short to tell
    since = T0 + timedelta(hours=25)
    slower = store_series(store, np.concatenate([noisy(10.0, 30, 7), noisy(10.6, 10, 8)]), model="slower")
    store_series(store, np.concatenate([noisy(10.0, 30, 9), noisy(9.4, 10, 10)]), model="faster")
    store_series(store, noisy(10.0, 40, 11), model="flat")
    store_series(store, np.concatenate([noisy(10.0, 10, 12), noisy(10.6, 30, 13)]), model="earlier")
    store_series(store, noisy(10.0, 4, 14), model="short", start=T0 + timedelta(hours=26))

    # When the regressions since hour 25 are asked for
    found = regressions(store, since=since)

    # Then only the series that got slower after the date is listed, from its first slower run
    assert [r["series"]["model"] for r in found["regressions"]] == ["slower"]
    [regression] = found["regressions"]
    assert regression["series"]["framework_version"] == "1.17.0"
    assert regression["change_points"][0]["evaluation_id"] in slower[29:32]
    assert regression["shift_pct"] == pytest.approx(6.0, abs=2.0)
    assert regression["ratio"] == regression["median_after_ms"] / regression["median_before_ms"]
    assert regression["points"] == 40
    # And every series with points since the date was read, the short one listed apart
    assert found["series"] == 5
    assert [(s["model"], s["points"], s["needed"]) for s in found["too_short"]] == [("short", 4, 6)]


def test_a_series_that_rose_and_fell_back_is_not_a_regression(store: Store) -> None:
    # Given a series 8% slower for 15 runs after the date, then back at its level
    levels = [noisy(10.0, 20, 23, cv=0.005), noisy(10.8, 15, 24, cv=0.005), noisy(10.0, 15, 25, cv=0.005)]
    store_series(store, np.concatenate(levels))

    # When the regressions since before the rise are asked for, Then none: its latest is its former
    found = regressions(store, since=T0 + timedelta(hours=10))
    assert found["regressions"] == [] and found["series"] == 1
    # And up to the end of the rise, it is one
    until = T0 + timedelta(hours=35)
    [regression] = regressions(store, since=T0 + timedelta(hours=10), until=until)["regressions"]
    assert regression["shift_pct"] == pytest.approx(8.0, abs=1.0)


def test_a_rise_under_the_threshold_is_not_a_regression(store: Store) -> None:
    store_series(store, np.concatenate([noisy(10.0, 30, 15, cv=0.003), noisy(10.15, 30, 16, cv=0.003)]))
    since = T0 + timedelta(hours=20)
    assert regressions(store, since=since)["regressions"] == []
    assert len(regressions(store, since=since, threshold=0.01)["regressions"]) == 1


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": -0.1}, "threshold"),
        ({"since": None}, "since"),
        ({"since": datetime(2024, 1, 1)}, "since"),
    ],
)
def test_bad_regression_arguments_name_the_field(store: Store, arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(UserError) as raised:
        regressions(store, **{"since": T0, **arguments})
    assert raised.value.field == field


# ----- one result against its series ----------------------------------------------------------------


def test_a_result_10_percent_slower_than_its_series_is_slower(store: Store) -> None:
    # Given 20 runs around 10 ms, then a run at 11 ms and one at 10 ms
    store_series(store, noisy(10.0, 20, 17, cv=0.01))
    slow = store_result(store, 11.0, T0 + timedelta(hours=30))
    same = store_result(store, 10.0, T0 + timedelta(hours=31))

    # When each is judged against its series
    [judged] = against_history(store, slow[:8])
    [unchanged] = against_history(store, same)

    # Then the slow one is slower by about 10%, its interval above 1 and covering 1.10
    assert judged["verdict"] == "slower"
    assert judged["ratio"] == pytest.approx(1.10, abs=0.02)
    assert 1 < judged["ci"][0] < 1.10 < judged["ci"][1]
    assert judged["segment"]["points"] == 20 and judged["segment"]["change_point"] is None
    assert (judged["scenario"], judged["batch_size"], judged["needed"]) == ("single_stream", 1, 0)
    # And the one at the series' level shows no detectable difference (the slow run is in its series
    # now, but one run is not a segment)
    assert unchanged["verdict"] == "no detectable difference"
    assert unchanged["ci"][0] < 1 < unchanged["ci"][1]


def test_a_result_is_judged_against_the_segment_after_the_last_change_point(store: Store) -> None:
    # Given a series that got 8% slower at run 20 and stayed there, then a run at the new level
    store_series(store, np.concatenate([noisy(10.0, 20, 18, cv=0.01), noisy(10.8, 15, 19, cv=0.01)]))
    latest = store_result(store, 10.8, T0 + timedelta(hours=40))

    # When judged, Then against the 15 slower runs: no difference, and the change point is named
    [judged] = against_history(store, latest)
    assert judged["verdict"] == "no detectable difference"
    assert judged["segment"]["points"] == 15
    assert judged["segment"]["change_point"]["index"] == 20
    assert judged["segment"]["median_ms"] == pytest.approx(10.8, rel=0.01)


def test_a_result_is_judged_only_against_the_runs_of_its_own_workload(store: Store) -> None:
    # Given one series whose runs alternate between 4 threads (~10 ms) and 1 thread (~14 ms)
    four, one = {"options": {"threads": 4}}, {"options": {"threads": 1}}
    tens, fourteens = noisy(10.0, 12, 21, cv=0.01), noisy(14.0, 12, 22, cv=0.01)
    for i in range(12):
        store_result(store, float(tens[i]), T0 + timedelta(hours=2 * i), request=four)
        store_result(store, float(fourteens[i]), T0 + timedelta(hours=2 * i + 1), request=one)
    latest = store_result(store, 10.0, T0 + timedelta(hours=30), request=four)

    # When a 4-thread run at 10 ms is judged
    [judged] = against_history(store, latest)

    # Then only the 4-thread runs are its baseline, and the 1-thread runs are said to be left out
    assert judged["verdict"] == "no detectable difference"
    assert judged["segment"]["points"] == 12 and judged["other_workloads"] == 12
    assert judged["segment"]["median_ms"] == pytest.approx(10.0, rel=0.02)


def test_a_result_with_too_short_a_series_says_how_many_more_points(store: Store) -> None:
    store_series(store, noisy(10.0, 3, 20))
    latest = store_result(store, 12.0, T0 + timedelta(hours=5))
    [judged] = against_history(store, latest)
    assert judged["verdict"] == "series too short"
    assert (judged["needed"], judged["ratio"], judged["ci"]) == (2, None, None)


def test_only_a_succeeded_result_can_be_judged(store: Store) -> None:
    running = store_result(store, 10.0, T0, succeed=False)
    with pytest.raises(UserError) as raised:
        against_history(store, running)
    assert raised.value.field == "evaluation_id" and "queued" in str(raised.value)
    with pytest.raises(UserError):
        against_history(store, "f" * 32)


def test_valid_only_leaves_a_busy_machine_s_points_out(store: Store) -> None:
    # Given 20 valid runs around 10 ms, 10 invalid ones 10% slower (a busy machine), 10 valid again
    store_series(store, noisy(10.0, 20, 26, cv=0.005), valid=True)
    store_series(store, noisy(11.0, 10, 27, cv=0.005), start=T0 + timedelta(hours=20))
    store_series(store, noisy(10.0, 10, 28, cv=0.005), start=T0 + timedelta(hours=30), valid=True)

    # When read with every point, Then the busy stretch shows as shifts
    assert len(series_of(store)["change_points"]) == 2
    # When read with valid points only, Then none, over the 30 valid points; all 40 are still listed
    found = series_of(store, settings=DetectionSettings(valid_only=True))
    assert found["change_points"] == []
    detection = found["detection"]
    assert (detection["points"], detection["valid_only"], len(found["points"])) == (30, True, 40)
    # And a result is judged against the valid points of its series only
    latest = store_result(store, 10.0, T0 + timedelta(hours=40), valid=True)
    [judged] = against_history(store, latest, settings=DetectionSettings(valid_only=True))
    assert judged["verdict"] == "no detectable difference" and judged["segment"]["points"] == 30


def test_detection_settings_reach_the_series(store: Store) -> None:
    # Given 12 runs with a step at 6: too short at segments of 7, found at segments of 3
    store_series(store, np.concatenate([noisy(10.0, 6, 21, cv=0.005), noisy(11.0, 6, 22, cv=0.005)]))
    assert series_of(store, settings=DetectionSettings(min_segment=7))["change_points"] is None
    [change] = series_of(store, settings=DetectionSettings(min_segment=3))["change_points"]
    assert change["index"] == 6
