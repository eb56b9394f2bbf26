"""`mlscope diff` (driven in-process) and `GET /api/v1/compare/diff` (Flask's test client) on a real
SQLite store written through the store API: verdicts (inconclusive ones too: no series stored, the
assumed spread the default or the system's pooled one), picking a side by filter, unmatched and refused
points, --same-system, and bad input as one line and exit code 2 / a 422 naming the field. Given /
When / Then in each test's comments."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from mlscope.analysis.diff import DEFAULT_BETWEEN_RUNS, MIN_OTHER_RUNS
from mlscope.cli import main
from mlscope.contract.system_ids import system_ids
from mlscope.store import Store, open_store
from tests.contract.builders import COLD_START, make_measurement, make_system, submit

PROBLEM = "application/problem+json"


@pytest.fixture
def store(mlscope_env: dict[str, str]) -> Iterator[Store]:
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as opened:
        yield opened


def _point(latencies_ns: np.ndarray, batch_size: int = 1, *, valid: bool = True) -> dict[str, Any]:
    measurement = make_measurement("single_stream", batch_size, mean=float(np.median(latencies_ns)) / 1e6)
    measurement["latencies_ns"] = [int(v) for v in latencies_ns]
    measurement["validity"] = {"valid": valid, "reasons": [] if valid else ["other processes used 68%"]}
    return measurement


def _stored(
    store: Store,
    points: list[dict[str, Any]],
    *,
    framework: str = "onnxruntime",
    system: int = 1,
) -> str:
    """A succeeded evaluation of resnet18 on `framework` with these measurements."""
    id = submit(store, framework=framework)
    store.start_evaluation(id)
    store.finish_evaluation(
        id,
        system=make_system(system),
        framework={"name": framework, "version": "1.0"},
        cold_start=COLD_START,
        measurements=points,
    )
    return id


def _latencies(seed: int, count: int = 2000) -> np.ndarray:
    return 5e6 * np.random.default_rng(seed).lognormal(0.0, 0.2, count)


def _diff(*args: str) -> None:
    main(["diff", *args])


def _diff_fails(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as ended:
        _diff(*args)
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_a_against_a_is_no_detectable_difference(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    # Given one evaluation
    a = _stored(store, [_point(_latencies(1))])
    # When it is diffed against itself
    _diff(a, a[:8])
    # Then the table says so, with a power line
    out = capsys.readouterr().out
    assert "no detectable difference" in out and "+0.0% (95% CI" in out


def test_a_25_percent_slower_copy_reads_slower_by_25_percent(
    store: Store, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given A and a copy of it with every latency scaled by 1.25 (beyond what separate runs differ by,
    # so called with no series stored)
    latencies = _latencies(2)
    a = _stored(store, [_point(latencies)])
    b = _stored(store, [_point(latencies * 1.25)])
    # When B is diffed against A as JSON
    _diff(a, b, "--json")
    report = json.loads(capsys.readouterr().out)
    # Then the point is slower by 25%, its interval covering 25%, with the fixed names
    (point,) = report["points"]
    assert {"ratio", "ci", "verdict", "power"} <= point.keys()
    assert point["verdict"] == "slower" and point["inconclusive"] is None
    assert point["ratio"] == pytest.approx(1.25, abs=1e-6)
    assert point["ci"][0] <= 1.25 <= point["ci"][1]
    assert {"detectable", "samples_needed", "more_samples", "power"} <= point["power"].keys()
    # And the table says it in words
    _diff(a, b)
    assert "slower by 25.0% (95% CI" in capsys.readouterr().out
    # ... and --plot draws the ratio with its interval as a "B slower" series (an SVG keeps its text)
    drawn = tmp_path / "diff.svg"
    _diff(a, b, "--plot", str(drawn))
    assert f"plot written to {drawn}" in capsys.readouterr().err
    svg = drawn.read_text()
    assert "B slower" in svg and "median B / median A" in svg


def test_a_filter_picks_the_latest_succeeded_evaluation_and_says_which(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given two onnxruntime evaluations and one on pytorch
    _stored(store, [_point(_latencies(3))])
    latest = _stored(store, [_point(_latencies(4))])
    on_pytorch = _stored(store, [_point(_latencies(5) * 0.8)], framework="pytorch")
    # When sides are named by filters
    _diff("model=resnet18,framework=onnxruntime", "model=resnet18,framework=pytorch,batch_size=1", "--json")
    report = json.loads(capsys.readouterr().out)
    # Then the latest of each was picked, and the report says how
    assert report["a"]["id"] == latest and report["b"]["id"] == on_pytorch
    assert report["a"]["picked"].startswith("the latest succeeded evaluation matching model=resnet18")
    assert report["points"][0]["verdict"] == "faster"


def test_a_filter_naming_a_batch_size_compares_that_point_only(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given two evaluations at batch sizes 1 and 8
    a = _stored(store, [_point(_latencies(22), 1), _point(_latencies(23), 8)])
    _stored(store, [_point(_latencies(24), 1), _point(_latencies(25), 8)])
    # When B is a filter naming batch size 8
    _diff(a, "model=resnet18,framework=onnxruntime,batch_size=8", "--json")
    report = json.loads(capsys.readouterr().out)
    # Then only batch 8 is compared, and A's batch 1 is listed as A's only
    assert [p["batch_size"] for p in report["points"]] == [8]
    assert report["unmatched"] == [{"side": "A", "scenario": "single_stream", "batch_size": 1}]


def test_the_series_between_run_spread_keeps_run_to_run_shifts_from_being_called(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given A, and B 3% slower, each measured precisely
    latencies = 5e6 * np.random.default_rng(26).lognormal(0.0, 0.03, 20_000)
    a = _stored(store, [_point(latencies)])
    b = _stored(store, [_point(latencies * 1.03)])
    _diff(a, b, "--json")
    alone = json.loads(capsys.readouterr().out)["points"][0]
    assert alone["verdict"] == "inconclusive" and alone["other_runs"] == {"A": 0, "B": 0}
    # When the store holds other valid runs of the series whose medians vary by ±3% (one invalid run
    # among them, which does not count)
    scales = (0.97, 1.0, 1.03, 0.98, 1.02)
    for scale in scales:
        _stored(store, [_point(latencies[:2000] * scale)])
    _stored(store, [_point(latencies[:2000] * 1.5, valid=False)])
    _diff(a, b, "--json")
    (point,) = json.loads(capsys.readouterr().out)["points"]
    # Then the pair is no detectable difference, the spread says where that came from: the sd of the
    # series' valid runs' log medians (the 5 others and the pair's own 2), scaled to a t interval for
    # 7 runs (t₀.₉₇₅(6) / z₀.₉₇₅, from the tables)
    assert point["other_runs"] == {"A": 5, "B": 5} and point["assumed_spread"] is None
    medians = [float(np.median(latencies[:2000] * scale)) for scale in scales]
    medians += [float(np.median(latencies)), float(np.median(latencies * 1.03))]
    sd = np.std(np.log(medians), ddof=1) * 2.446912 / 1.959964
    assert point["spread"]["A"]["between_runs"] == pytest.approx(sd, rel=1e-3)
    assert point["verdict"] == "no detectable difference"
    assert point["power"]["samples_needed"] is None


def test_points_on_one_side_only_are_listed_and_invalid_ones_refused(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given A at batch sizes 1, 2 and 8, B at 1, 2 and 4, B's batch 2 invalid
    a = _stored(store, [_point(_latencies(6), 1), _point(_latencies(7), 2), _point(_latencies(8), 8)])
    b = _stored(
        store, [_point(_latencies(9), 1), _point(_latencies(10), 2, valid=False), _point(_latencies(11), 4)]
    )
    # When they are diffed
    _diff(a, b, "--json")
    report = json.loads(capsys.readouterr().out)
    # Then batch 1 is compared, batch 2 refused with B's reason, 8 and 4 listed as one side's only
    assert [p["batch_size"] for p in report["points"]] == [1]
    assert report["refused"] == [
        {
            "scenario": "single_stream",
            "batch_size": 2,
            "reason": "B's measurement is not valid: other processes used 68%",
        }
    ]
    assert {(u["side"], u["batch_size"]) for u in report["unmatched"]} == {("A", 8), ("B", 4)}
    _diff(a, b)
    out = capsys.readouterr()
    assert "batch 8 measured by A only" in out.err and "batch 2 not compared" in out.err


def test_no_point_in_common_names_what_each_side_has(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _stored(store, [_point(_latencies(12), 1)])
    b = _stored(store, [_point(_latencies(13), 8)])
    err = _diff_fails(capsys, a, b)
    assert "A has single_stream batch 1; B has single_stream batch 8" in err


def test_every_common_point_invalid_is_refused_with_the_reason(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _stored(store, [_point(_latencies(14), valid=False)])
    b = _stored(store, [_point(_latencies(15))])
    err = _diff_fails(capsys, a, b)
    assert "A's measurement is not valid: other processes used 68%" in err


def test_same_system_refuses_two_machines_naming_both(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given runs on two machines (system 2 has a GPU) and on system 3, another host of system 1's
    # hardware and software
    a = _stored(store, [_point(_latencies(16))], system=1)
    b = _stored(store, [_point(_latencies(17))], system=2)
    c = _stored(store, [_point(_latencies(18))], system=3)
    # Without the flag the pair is compared; with it, refused, naming each side's machine and stack
    _diff(a, b)
    capsys.readouterr()
    err = _diff_fails(capsys, a, b, "--same-system")
    (machine_1, stack_1), (machine_2, stack_2) = system_ids(make_system(1)), system_ids(make_system(2))
    assert f"A ran on machine {machine_1} stack {stack_1} (system sys-1, host-1), B on machine" in err
    assert f"machine {machine_2} stack {stack_2} (system sys-2, host-2)" in err
    # And the same machine and stack under another system id is the same system
    _diff(a, c, "--same-system")
    assert "same_system" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuchid", "{a}"], "a: no evaluation with id 'nosuchid'"),
        (["{a}", "model=resnet18,color=red"], "b: unknown filter key 'color'"),
        (["{a}", "model=resnet18,batch_size=two"], "b: batch_size=two: expected a whole number"),
        (["{a}", "model=vgg16"], "b: no succeeded evaluation matches model=vgg16"),
        (["{a}", "{a}", "--threshold", "0"], "threshold: expected a relative difference between 0 and 1"),
        (["{a}", "{a}", "--confidence", "1.5"], "confidence: expected a level from 0.5"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    store: Store, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    a = _stored(store, [_point(_latencies(18))])
    assert message in _diff_fails(capsys, *(arg.format(a=a) for arg in args))


def test_the_api_answers_the_same_report(store: Store, http: FlaskClient) -> None:
    # Given A and a 25% slower B on one system
    latencies = _latencies(19)
    a = _stored(store, [_point(latencies)])
    b = _stored(store, [_point(latencies * 1.25)])
    # When the diff is asked over HTTP
    answer = http.get("/api/v1/compare/diff", query_string={"a": a[:8], "b": b, "same_system": "true"})
    # Then it is the CLI's report
    assert answer.status_code == 200, answer.json
    (point,) = answer.json["points"]
    assert point["verdict"] == "slower" and point["ci"][0] <= 1.25 <= point["ci"][1]
    assert point["other_runs"] == {"A": 0, "B": 0} and point["spread"]["B"]["between_runs"] == 0.0
    assert answer.json["a"]["id"] == a
    # And the OpenAPI document describes the resource, its verdicts listed
    document = http.get("/api/openapi.json").json
    assert "/api/v1/compare/diff" in document["paths"]
    verdict = document["components"]["schemas"]["DiffPoint"]["properties"]["verdict"]
    assert set(verdict["enum"]) == {"faster", "slower", "no detectable difference", "inconclusive"}


def _precise(seed: int) -> np.ndarray:
    """A precise run: 20,000 latencies of ~5 ms varying by 5%."""
    return 5e6 * np.random.default_rng(seed).lognormal(0.0, 0.05, 20_000)


def test_a_small_shift_with_no_series_stored_is_inconclusive_saying_what_would_decide(
    store: Store, http: FlaskClient, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given A and B 5% slower, each measured precisely (the run alone is sure of 5%), nothing else stored
    latencies = _precise(30)
    a = _stored(store, [_point(latencies)])
    b = _stored(store, [_point(_precise(31) * 1.05)])
    # When they are diffed
    _diff(a, b, "--json")
    (point,) = json.loads(capsys.readouterr().out)["points"]
    # Then the verdict is inconclusive at the default assumed spread, with what would decide
    assert point["ci"][0] > 1.02
    assert point["verdict"] == "inconclusive" and point["series_known"] is False
    assert point["assumed_spread"] == {
        "sd": DEFAULT_BETWEEN_RUNS,
        "source": "default",
        "series": 0,
        "runs": 0,
    }
    inconclusive = point["inconclusive"]
    assert inconclusive["could_call"] > 0.05 and inconclusive["runs_needed"] >= MIN_OTHER_RUNS
    # And the table says it, with a line saying how large a difference it could call and the runs
    _diff(a, b)
    out = capsys.readouterr().out
    assert "│ inconclusive" in out and "slower by" not in out
    assert f"this pair could call {inconclusive['could_call'] * 100:.1f}% or more" in out
    assert f"{inconclusive['runs_needed']} more runs of each series would decide" in out
    # And the API and the dashboard's page say the same
    answer = http.get("/api/v1/compare/diff", query_string={"a": a, "b": b})
    assert answer.status_code == 200 and answer.json["points"][0]["inconclusive"] == inconclusive
    page = http.get(f"/diff?a={a}&b={b}").get_data(as_text=True)
    assert "<strong>inconclusive</strong>" in page
    assert f"{inconclusive['runs_needed']} more runs of each series would decide" in page


def test_the_systems_pooled_spread_is_the_prior_when_other_series_have_runs(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the same 5% pair on resnet18/onnxruntime, and on the same system 4 runs of another series
    # (pytorch) whose medians differ by 0.3-0.6%
    a = _stored(store, [_point(_precise(32))])
    b = _stored(store, [_point(_precise(33) * 1.05)])
    other = _precise(34)
    scales = (1.0, 1.004, 0.997, 1.006)
    for scale in scales:
        _stored(store, [_point(other * scale)], framework="pytorch")
    # When they are diffed
    _diff(a, b, "--json")
    (point,) = json.loads(capsys.readouterr().out)["points"]
    # Then the assumed spread is the other series' (sd of its log medians, scaled to a t interval for
    # 4 runs: t₀.₉₇₅(3) / z₀.₉₇₅, from the tables), and the pair is called slower
    medians = [float(np.median(other * scale)) for scale in scales]
    assumed = point["assumed_spread"]
    assert assumed["source"] == "system" and assumed["series"] == 1 and assumed["runs"] == len(scales)
    sd = np.std(np.log(medians), ddof=1) * 3.182446 / 1.959964
    assert assumed["sd"] == pytest.approx(sd, rel=1e-3)
    assert point["verdict"] == "slower" and point["inconclusive"] is None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"a": "nosuchid", "b": "{a}"}, "a"),
        ({"a": "{a}", "b": "model=resnet18,color=red"}, "b"),
        ({"a": "{a}", "b": "{a}", "threshold": "1.5"}, "threshold"),
        ({"a": "{a}", "b": "{a}", "confidence": "0.2"}, "confidence"),
        ({"a": "{a}"}, "b"),
        ({"a": "{a}", "b": "{other}", "same_system": "true"}, "same_system"),
    ],
)
def test_the_api_answers_bad_input_with_a_422_naming_the_field(
    store: Store, http: FlaskClient, query: dict[str, str], field: str
) -> None:
    a = _stored(store, [_point(_latencies(20))])
    other = _stored(store, [_point(_latencies(21))], system=2)
    answer = http.get(
        "/api/v1/compare/diff", query_string={k: v.format(a=a, other=other) for k, v in query.items()}
    )
    assert answer.status_code == 422 and answer.mimetype == PROBLEM
    assert field in answer.json["errors"], answer.json
