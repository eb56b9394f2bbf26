"""How a measurement's `load` section prints: the results table's load column (target → achieved QPS
and the certificate), a search's curve and answer under `run` and `results show`, and a probe's
progress line; all from hand-built results in the shape docs/design.md fixes."""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
from rich.console import Console
from rich.text import Text

from mlscope.cli import render
from mlscope.cli.render import measurement_table, print_sections
from mlscope.cli.render_load import certified_text, load_cell, probe_line, search_lines

LATENCY = {
    "count": 1200,
    "mean": 4.0,
    "median": 3.9,
    "p90": 4.5,
    "p95": 4.7,
    "p99": 5.1,
    "p999": 6.0,
    "min": 3.1,
    "max": 7.0,
    "stdev": 0.4,
    "iqr": 0.5,
    "cv": 0.1,
    "trimmed_mean": 3.95,
    "median_ci": [3.8, 4.0],
}
CERTIFIED = {
    "percentile": 99.0,
    "confidence": 0.99,
    "ok": True,
    "queries": 1200,
    "queries_needed": 0,
    "estimate_ms": 5.1,
    "bound_ms": 50.0,
    "over_bound": 3,
}
SERVER_LOAD: dict[str, Any] = {
    "certified": CERTIFIED,
    "target_qps": 20.0,
    "scheduled_qps": 19.7,
    "achieved_qps": 19.7,
    "completed_qps": 19.6,
    "issue_lateness_ms": {"mean": 0.1, "p50": 0.05, "p99": 0.4, "max": 1.2},
    "queries": 1200,
    "late": 0,
    "queued": 14,
    "unfinished": 0,
    "max_in_flight": 1,
    "seed": 0,
    "in_flight": {"observed": 0.21, "littles_law": 0.2, "ratio": 1.03},
    "service_ms": {"median": 3.8, "p90": 4.4, "p99": 5.0},
}
PROBES = [
    {
        "target_qps": 100.0,
        "achieved_qps": 99.5,
        "queries": 3000,
        "duration_s": 30.0,
        "p50_ms": 4.0,
        "p90_ms": 6.0,
        "p99_ms": 12.0,
        "percentile_ms": 12.0,
        "certified": True,
        "passed": True,
        "reason": "p99 12.0 ms ≤ 50 ms",
    },
    {
        "target_qps": 200.0,
        "achieved_qps": 190.1,
        "queries": 6000,
        "duration_s": 30.0,
        "p50_ms": 30.0,
        "p90_ms": 70.0,
        "p99_ms": 150.0,
        "percentile_ms": 150.0,
        "certified": True,
        "passed": False,
        "reason": "p99 150 ms > 50 ms",
    },
    {
        "target_qps": 183.0,
        "achieved_qps": 182.4,
        "queries": 5490,
        "duration_s": 30.0,
        "p50_ms": 9.0,
        "p90_ms": 20.0,
        "p99_ms": 44.0,
        "percentile_ms": 44.0,
        "certified": True,
        "passed": True,
        "reason": "p99 44.0 ms ≤ 50 ms",
    },
]
SEARCH = {"latency_bound_ms": 50.0, "percentile": 99.0, "max_qps": 183.0, "probes": PROBES}


def measurement(scenario: str, load: dict[str, Any] | None) -> dict[str, Any]:
    m: dict[str, Any] = {
        "scenario": scenario,
        "batch_size": 1,
        "latency_ms": LATENCY,
        "throughput": 19.6,
        "validity": {"valid": True, "reasons": []},
    }
    if load is not None:
        m["load"] = load
    return m


def result(*measurements: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "0123456789abcdef",
        "status": "succeeded",
        "model": {"name": "resnet18", "version": "1", "manifest_sha256": "0" * 64},
        "framework": {"name": "onnxruntime", "version": "1.23.0"},
        "measurements": list(measurements),
    }


def text(renderable: Any) -> str:
    console = Console(width=250, record=True)
    console.print(renderable)
    return console.export_text()


def test_a_server_point_shows_target_achieved_and_its_certificate() -> None:
    # Given a result with a single_stream point and a server point
    table = text(
        measurement_table([result(measurement("single_stream", None), measurement("server", SERVER_LOAD))])
    )
    # Then the table has a load column, and the server row reads target → achieved and p99 ✓
    assert "load" in table.splitlines()[1]
    assert "20 → 19.7 qps, p99 ✓" in table


def test_a_table_without_loaded_points_has_no_load_column() -> None:
    table = text(measurement_table([result(measurement("single_stream", {"certified": CERTIFIED}))]))
    assert "load" not in table and "p99 ✓" not in table


@pytest.mark.parametrize(
    ("certified", "shown"),
    [
        ({"percentile": 99.0, "ok": False, "queries_needed": 150}, "p99 ✗ 150 more"),
        (
            {"percentile": 99.9, "ok": False, "queries_needed": 0, "estimate_ms": 60.0, "bound_ms": 50.0},
            "p99.9 ✗ > 50 ms",
        ),
        ({"percentile": 90.0, "ok": False, "queries_needed": 0}, "p90 ✗"),
        ({"percentile": 90.0, "ok": True}, "p90 ✓"),
    ],
)
def test_a_certificate_says_why_it_fails(certified: dict[str, Any], shown: str) -> None:
    assert text(certified_text(certified)).strip() == shown


def test_a_multi_stream_point_shows_its_queries_and_overruns() -> None:
    load = {**SERVER_LOAD, "target_qps": 20.0, "samples_per_query": 8, "interval_ms": 50.0, "overruns": 2}
    cell = text(load_cell(measurement("multi_stream", load))).strip()
    assert cell == "8 per 50 ms → 19.7 qps, p99 ✓, 2 overruns"
    assert load_cell(measurement("server", None)) == ""
    back_to_back = {
        **SERVER_LOAD,
        "target_qps": None,
        "samples_per_query": 8,
        "back_to_back": True,
        "interval_ms": None,
    }
    cell = text(load_cell(measurement("multi_stream", back_to_back))).strip()
    assert cell == "8 back to back → 19.7 qps, p99 ✓"


def test_a_search_bound_reads_as_given() -> None:
    """A bound below 0.05 ms used to read "p99 ≤ 0 ms"."""
    tight = {**SEARCH, "latency_bound_ms": 0.001, "max_qps": None}
    lines = [
        text(line).rstrip()
        for line in search_lines(result(measurement("server", {**SERVER_LOAD, "search": tight})))
    ]
    assert "highest QPS with p99 ≤ 0.001 ms" in lines[0]
    assert lines[-1].strip() == "no QPS tried met p99 ≤ 0.001 ms"


def test_a_search_prints_its_curve_and_answer() -> None:
    # Given a server point with a search
    searched = result(measurement("server", {**SERVER_LOAD, "search": SEARCH}))
    # When its lines are printed
    lines = [text(line).rstrip() for line in search_lines(searched)]
    # Then a heading, one line per probe (target, achieved, p50/p90/p99, verdict and why) and the answer
    assert len(lines) == 1 + len(PROBES) + 1
    assert "server batch 1: 3 probes for the highest QPS with p99 ≤ 50 ms" in lines[0]
    assert (
        "200 qps →    190.1 achieved, p50 30.00 p90 70.00 p99 150.00 ms (6,000 queries): failed: p99 150"
        in lines[2]
    )
    assert "passed: p99 44.0 ms ≤ 50 ms" in lines[3]
    assert lines[-1].strip() == "max QPS with p99 ≤ 50 ms: 183 (certified)"
    # and the table's cell gives the answer too
    assert "max 183 qps, p99 ✓" in text(load_cell(searched["measurements"][0]))


def test_a_search_that_found_nothing_says_so() -> None:
    failed = copy.deepcopy(SEARCH)
    failed["max_qps"] = None
    lines = search_lines(result(measurement("server", {**SERVER_LOAD, "search": failed})))
    assert text(lines[-1]).strip() == "no QPS tried met p99 ≤ 50 ms"


def test_results_show_prints_the_search_under_the_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the console `run` and `results show` print to, recording
    recorder = Console(width=250, record=True)
    monkeypatch.setattr(render, "console", recorder)
    # When a searched result's sections are printed
    print_sections(result(measurement("server", {**SERVER_LOAD, "search": SEARCH})))
    # Then the answer is among them
    assert "max QPS with p99 ≤ 50 ms: 183 (certified)" in recorder.export_text()


def test_a_probe_event_reads_as_one_line() -> None:
    event = {
        "event": "probe",
        "scenario": "server",
        "batch_size": 1,
        "target_qps": 40.0,
        "achieved_qps": 39.8,
        "percentile_ms": 12.3,
        "passed": False,
        "reason": "p99 12.3 ms > 10 ms",
    }
    line = text(probe_line("resnet18 on onnxruntime", event)).strip()
    assert line == (
        "resnet18 on onnxruntime: server batch 1 probe 40 qps → 39.8 achieved, percentile 12.30 ms: failed "
        "(p99 12.3 ms > 10 ms)"
    )


def _progress_view(console: Console | None, load: dict[str, Any]) -> Any:
    from types import SimpleNamespace

    from mlscope.cli.progress import ProgressBoard
    from mlscope.cli.run import _ProgressView

    request = SimpleNamespace(
        model="resnet18", framework="onnxruntime", batch_sizes=(1,), scenarios=("server",), load=load
    )
    return _ProgressView(ProgressBoard(console), SimpleNamespace(request=request))


def _drawn(out: io.StringIO) -> tuple[str, str]:
    """Everything the terminal showed, and the row as it was left (drawn last, after a carriage return)."""
    raw = out.getvalue()
    return Text.from_ansi(raw).plain, Text.from_ansi(raw.rsplit("\r", 1)[-1]).plain


def test_the_progress_shows_the_rate_and_prints_each_probe() -> None:
    # Given a run's progress view of a server evaluation at 20 qps, on a terminal
    out = io.StringIO()
    view = _progress_view(Console(file=out, width=250, force_terminal=True), {"qps": 20.0})
    view.board.start()
    # When the measure phase starts (announcing its rate, as the predictor's server scenario does),
    # Then its row names the rate; a scenario without one announces none
    view({"event": "phase", "phase": "measure", "scenario": "server", "batch_size": 1, "qps": 20.0})
    view.board.stop()
    assert "server batch 1 @ 20 qps" in _drawn(out)[1]
    view.board.start()
    view({"event": "phase", "phase": "measure", "scenario": "single_stream", "batch_size": 1})
    view.board.stop()
    assert "single_stream batch 1" in _drawn(out)[1] and "single_stream batch 1 @" not in _drawn(out)[1]
    # When a search probe ends, Then one line says so and the row follows the search
    view.board.start()
    view({"event": "probe", "scenario": "server", "batch_size": 1, "target_qps": 40.0, "achieved_qps": 39.8,
          "percentile_ms": 12.3, "passed": True, "reason": "p99 12.3 ms ≤ 50 ms"})  # fmt: skip
    view.board.stop()
    printed, row = _drawn(out)
    assert "resnet18 on onnxruntime: server batch 1 probe 40 qps → 39.8 achieved" in printed
    assert "server batch 1 search, probe 1: 40 q/s meets" in row and "max ≥ 40 q/s" in row


def test_under_json_the_probes_print_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    view = _progress_view(None, {"find_max_qps": True, "latency_bound_ms": 50.0})
    view({"event": "probe", "scenario": "server", "batch_size": 1, "target_qps": 40.0, "passed": False})
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_a_comparison_shows_the_rates_of_loaded_rows() -> None:
    from mlscope.cli.compare import compare_table
    from mlscope.store.records import COMPARE_COLUMNS

    row = dict.fromkeys(COMPARE_COLUMNS)
    row.update(model="resnet18", framework="onnxruntime", scenario="server", batch_size=1, valid=True)
    plain = {**row, "scenario": "single_stream"}
    served = {**row, "target_qps": 20.0, "achieved_qps": 19.7}
    searched = {**row, "target_qps": 183.0, "achieved_qps": 182.4, "max_qps": 183.0}
    assert "qps" not in text(compare_table([plain]))
    table = text(compare_table([plain, served, searched]))
    assert "20.0 → 19.7" in table and "max 183.0" in table
