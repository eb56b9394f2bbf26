"""`mlscope history` and `mlscope regressions` driven in-process on the environment's SQLite store,
and /api/v1/history (with change points), /history/series and /history/regressions through Flask's
test client: what they print, their exit codes, their JSON, and their answers to bad input."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.serving import make_server

from mlscope.cli import main, render
from mlscope.client import ApiError, Client
from mlscope.contract.system_ids import system_ids
from mlscope.store import Store, open_store
from tests.contract.builders import T0, make_system
from tests.integration.test_history import MANIFEST, noisy, store_series

STEP_AT = 12
SINCE = (T0 + timedelta(hours=STEP_AT - 2)).isoformat()


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables wide enough that no cell wraps, so a line can be looked for whole."""
    monkeypatch.setattr(render.console, "width", 400)


@pytest.fixture
def store(mlscope_env: dict[str, str]) -> Iterator[Store]:
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as opened:
        yield opened


@pytest.fixture
def stepped(store: Store) -> list[str]:
    """resnet18 on onnxruntime: 12 runs around 10 ms, then 10 around 10.6 ms (+6%); and 8 flat runs on
    pytorch from the step on (too short for change points)."""
    ids = store_series(store, np.concatenate([noisy(10.0, STEP_AT, 1, 0.01), noisy(10.6, 10, 2, 0.01)]))
    later = T0 + timedelta(hours=STEP_AT)
    store_series(store, noisy(5.0, 8, 3), framework="pytorch", version="2.3.0", start=later)
    return ids


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`mlscope ARGV` in-process: (exit code, stdout, stderr)."""
    try:
        main(list(argv))
        code = 0
    except SystemExit as ended:
        code = int(ended.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


# ----- mlscope history ------------------------------------------------------------------------------


def test_history_prints_the_points_and_marks_the_change_point(
    stepped: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # When one series is named
    code, out, _ = run(capsys, "history", "resnet18", "-f", "onnxruntime")

    # Then its 22 points are listed, the first slower one marked with the shift and its confidence
    assert code == 0
    assert "resnet18 (manifest abababababab) on onnxruntime 1.17.0, sys-1 cpu, single_stream batch 1" in out
    assert all(id[:8] in out for id in stepped)
    [marked] = [line for line in out.splitlines() if "▶" in line]
    assert stepped[STEP_AT][:8] in marked and "(confidence 99.5%)" in marked
    assert "1 change point(s) at significance 0.01" in out


def test_history_json_carries_the_series_points_and_change_points(
    stepped: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "history", "resnet18", "-f", "onnxruntime", "--json")
    document = json.loads(out)
    assert code == 0 and document["detection"]["valid_only"] is False
    assert document["series"]["manifest_sha256"] == MANIFEST
    assert [p["evaluation_id"] for p in document["points"]] == stepped
    [change] = document["change_points"]
    assert change["evaluation_id"] == stepped[STEP_AT] and 4 < change["shift_pct"] < 8


def test_history_of_several_series_lists_them_and_what_tells_them_apart(
    stepped: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "history", "resnet18")
    assert code == 0
    assert "2 series" in out and "onnxruntime" in out and "pytorch" in out
    assert "name one with --framework, --framework-version" in err


def test_history_of_a_short_series_says_how_many_more_points_it_needs(
    stepped: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "history", "resnet18", "-f", "pytorch", "--manifest", MANIFEST[:6])
    assert code == 0 and out.count("abababab") == 1
    assert "needs at least 10 (2 more)" in err
    # And with --valid-only (none of these points is valid), it needs all 10
    code, out, err = run(capsys, "history", "resnet18", "-f", "pytorch", "--valid-only")
    assert code == 0 and "the series has 0 point(s)" in err and "(10 more)" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("history", "bert"), "no stored series of bert"),
        (("history", "resnet18", "-f", "tensorflow"), "no stored series of resnet18 with --framework"),
        (("history", "resnet18", "--since", "last week"), "--since 'last week' is not a date or time"),
        (("history", "resnet18", "--significance", "2"), "significance=2.0 must be a number between 0 and 1"),
        (("history", "resnet18", "--min-segment", "1"), "min_segment=1 must be an integer, 2 or more"),
        (("history", "resnet18", "-b", "0"), "batch_size=0 must be an integer, 1 or more"),
    ],
)
def test_history_mistakes_are_one_line_and_exit_2(
    stepped: list[str], capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"mlscope: error: {err.removeprefix('mlscope: error: ').strip()}"]
    assert message in err


def test_a_system_is_named_by_a_unique_prefix_of_its_id(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a series on a system whose id is 16 hex characters, as a run records it, and another
    # system whose id starts with the same 8 characters
    ids = store_series(store, noisy(10.0, 4, 1), system="5b289c88413dc387", valid=True)
    store_series(store, noisy(10.0, 2, 2), system="5b289c88ffff0000", framework="pytorch")
    # When history, results list and regressions are given a unique prefix of it, Then they read it
    code, out, err = run(capsys, "history", "resnet18", "-f", "onnxruntime", "--system", "5b289c884")
    assert code == 0, err
    assert "on onnxruntime 1.17.0, 5b289c88413dc387 cpu" in out and all(id[:8] in out for id in ids)
    code, out, err = run(capsys, "results", "list", "--system", "5b289c884", "--json")
    assert code == 0, err
    assert sorted(json.loads(line)["id"] for line in out.splitlines()) == sorted(ids)
    code, _, err = run(capsys, "regressions", "--since", T0.isoformat(), "--system", "5b289c884")
    assert code == 0, err
    # ... and given the 8 characters both share, or a prefix of neither, one line and exit code 2
    for argv in (("history", "resnet18"), ("results", "list"), ("regressions", "--since", SINCE)):
        code, out, err = run(capsys, *argv, "--system", "5b289c88")
        assert (code, out, len(err.splitlines())) == (2, "", 1)
        assert "'5b289c88' is ambiguous: it matches 5b289c88413dc387, 5b289c88ffff0000" in err
        code, out, err = run(capsys, *argv, "--system", "0000ffff")
        assert (code, out, err) == (2, "", "mlscope: error: no system with id '0000ffff'\n")
    # ... and so does a filter's system, where diff takes one
    code, out, err = run(capsys, "diff", "model=resnet18,system=5b289c88", ids[0][:8])
    assert (code, out, len(err.splitlines())) == (2, "", 1) and "'5b289c88' is ambiguous" in err
    code, out, err = run(capsys, "diff", "model=resnet18,system=5b289c884", ids[0][:8], "--json")
    assert code != 2, err
    assert json.loads(out)["a"]["id"] == ids[-1]


def test_one_machine_under_two_system_ids_is_one_series_named_by_its_machine(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given runs of one machine recorded locally and by a farm agent (two system ids)
    ids = store_series(store, noisy(10.0, 3, 1), system="aaaa000011112222")
    later = T0 + timedelta(hours=3)
    ids += store_series(store, noisy(10.0, 3, 2), system="bbbb000011112222", start=later)
    (machine, _) = system_ids(make_system(id="aaaa000011112222"))
    # When history is asked for either system, or for a prefix of the machine's id
    for system in ("aaaa", "bbbb", machine[:6]):
        code, out, err = run(capsys, "history", "resnet18", "-f", "onnxruntime", "--system", system, "--json")
        # Then it is the one series of all six runs
        assert code == 0, err
        found = json.loads(out)
        assert [p["evaluation_id"] for p in found["points"]] == ids
        assert found["series"]["machine_id"] == machine and found["series"]["system_id"] == "bbbb000011112222"


# ----- mlscope regressions --------------------------------------------------------------------------


def test_regressions_lists_the_slower_series_and_exits_1(
    stepped: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "regressions", "--since", SINCE)
    assert code == 1
    assert "1 regression(s) since" in out and stepped[STEP_AT][:8] in out
    [row] = [line for line in out.splitlines() if "onnxruntime 1.17.0" in line]
    assert "+6." in row or "+5." in row
    assert "1 of 2 series too short to tell" in err and "needs 2 more point(s)" in err


def test_regressions_json_and_none_found_exits_0(
    stepped: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "regressions", "--since", SINCE, "--json")
    [regression] = json.loads(out)["regressions"]
    assert code == 1 and regression["change_points"][0]["evaluation_id"] == stepped[STEP_AT]

    # When the threshold is above the rise, or the date after it, Then none, exit 0
    assert run(capsys, "regressions", "--since", SINCE, "--threshold", "10%")[0] == 0
    code, out, _ = run(capsys, "regressions", "--since", (T0 + timedelta(days=1)).isoformat())
    assert code == 0 and "no regression since" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("regressions", "--since", "soon"), "--since 'soon' is not a date or time"),
        (("regressions", "--since", SINCE, "--threshold", "two"), "--threshold 'two' is not a percentage"),
        (("regressions", "--since", SINCE, "--threshold", "150%"), "--threshold '150%' is not a percentage"),
    ],
)
def test_regression_mistakes_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], mlscope_env: dict[str, str], argv: tuple[str, ...], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out, len(err.splitlines())) == (2, "", 1) and message in err


# ----- the API ----------------------------------------------------------------------------------------


def test_the_api_history_gives_the_change_points(http: FlaskClient, stepped: list[str]) -> None:
    answer = http.get("/api/v1/history?model=resnet18&framework=onnxruntime").get_json()
    [change] = answer["change_points"]
    assert change["evaluation_id"] == stepped[STEP_AT] and change["confidence"] >= 0.95
    assert answer["detection"]["significance"] == 0.01 and answer["detection"]["note"] is None
    short = http.get("/api/v1/history?model=resnet18&framework=pytorch&min_segment=3").get_json()
    assert short["change_points"] == [] and short["detection"]["min_segment"] == 3
    valid = http.get("/api/v1/history?model=resnet18&framework=onnxruntime&valid_only=true").get_json()
    assert valid["change_points"] is None and valid["detection"]["points"] == 0


def test_the_api_lists_series_and_regressions(http: FlaskClient, stepped: list[str]) -> None:
    series = http.get("/api/v1/history/series?model=resnet18").get_json()
    assert [(s["framework"], s["points"]) for s in series] == [("onnxruntime", 22), ("pytorch", 8)]
    found = http.get("/api/v1/history/regressions", query_string={"since": SINCE}).get_json()
    assert [r["series"]["framework"] for r in found["regressions"]] == ["onnxruntime"]
    assert found["regressions"][0]["change_points"][0]["evaluation_id"] == stepped[STEP_AT]
    assert [s["framework"] for s in found["too_short"]] == ["pytorch"]
    strict = http.get("/api/v1/history/regressions", query_string={"since": SINCE, "threshold": 0.5})
    assert strict.get_json()["regressions"] == []


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/history/regressions", "since"),
        ("/api/v1/history/regressions?since=2024-05-01T12:00:00", "since"),
        ("/api/v1/history/regressions?since=2024-05-01T12:00:00Z&threshold=1", "threshold"),
        ("/api/v1/history/regressions?since=2024-05-01T12:00:00Z&significance=0", "significance"),
        ("/api/v1/history?model=resnet18&framework=onnxruntime&min_segment=1", "min_segment"),
        ("/api/v1/history?model=resnet18&framework=onnxruntime&significance=x", "significance"),
        ("/api/v1/history/series?batch_size=0", "batch_size"),
        ("/api/v1/history?model=resnet18&framework=onnxruntime&valid_only=maybe", "valid_only"),
    ],
)
def test_bad_history_queries_are_422s_naming_the_field(http: FlaskClient, path: str, field: str) -> None:
    response = http.get(path)
    assert response.status_code == 422 and response.mimetype == "application/problem+json"
    assert field in response.get_json()["errors"]


def test_the_openapi_documents_the_history_resources(http: FlaskClient) -> None:
    paths = http.get("/api/openapi.json").get_json()["paths"]
    assert {"/api/v1/history", "/api/v1/history/series", "/api/v1/history/regressions"} <= set(paths)
    parameters = {p["name"] for p in paths["/api/v1/history/regressions"]["get"]["parameters"]}
    assert {"since", "threshold", "significance", "min_segment"} <= parameters


def test_the_client_reads_change_points_series_and_regressions(app: Flask, stepped: list[str]) -> None:
    # Given the app served over real HTTP
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = Client(f"http://127.0.0.1:{server.server_port}", "")
        # When the client reads each, Then the answers are the API's; a bad argument raises naming it
        series = client.history(model="resnet18", framework="onnxruntime", framework_version="1.17.0")
        assert series["change_points"][0]["evaluation_id"] == stepped[STEP_AT]
        assert [s["framework"] for s in client.history_series(model="resnet18")] == ["onnxruntime", "pytorch"]
        assert len(client.regressions(since=SINCE, threshold=0.02)["regressions"]) == 1
        with pytest.raises(ApiError) as bad:
            client.regressions(since=SINCE, significance=2)
        assert bad.value.status == 422 and bad.value.field == "significance"
    finally:
        server.shutdown()
        thread.join()


# ----- mlscope diff --against-history ---------------------------------------------------------------


def test_diff_against_history_judges_the_latest_run_against_its_segment(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given 20 steady runs around 10 ms, then one at 11 ms (+10%) and, separately, one at 10.05 ms
    ids = store_series(store, np.concatenate([noisy(10.0, 20, 1, 0.01), [11.0]]))
    # When the slow run is judged against its series
    code, out, _ = run(capsys, "diff", ids[-1], "--against-history", "--json")
    assert code == 0
    (point,) = json.loads(out)["against_history"]
    # Then slower, by about 10%, with an interval covering it, against the 20 runs before it
    assert point["verdict"] == "slower" and point["segment"]["points"] == 20
    assert point["ci"][0] <= 1.10 <= point["ci"][1] and point["ratio"] == pytest.approx(1.10, abs=0.02)
    # And a run like the others is no detectable difference, in the table too
    steady = store_series(store, [10.05], start=T0 + timedelta(hours=30))
    code, out, _ = run(capsys, "diff", steady[0], "--against-history")
    assert code == 0 and "no detectable difference" in out


def test_diff_needs_b_or_against_history_not_both(
    stepped: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "diff", stepped[-1])
    assert code == 2 and "missing B" in err
    code, _, err = run(capsys, "diff", stepped[-1], stepped[0], "--against-history")
    assert code == 2 and "not both" in err
