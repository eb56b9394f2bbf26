"""The server and multi_stream scenarios end to end: `mlscope run` on real ONNX Runtime and PyTorch
predictors in child processes, into a real SQLite store (figures asserted as relations, never as
fixed numbers: the machine is shared)."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_run_cli import FAST, json_lines, mlscope, ran_valid

pytestmark = pytest.mark.slow


def test_server_run_on_both_frameworks_records_its_load(mlscope_env: dict[str, str]) -> None:
    # Given a small real model, When it runs under Poisson arrivals at 50 queries/s
    done = mlscope(
        mlscope_env, "run", "test_tiny_mlp", "-f", "pytorch,onnxruntime", "--scenario", "server",
        "--qps", "50", "--percentile", "90", "--json", *FAST,
    )  # fmt: skip
    results = ran_valid(done)
    assert {r["framework"]["name"] for r in results} == {"pytorch", "onnxruntime"}
    for result in results:
        assert result["status"] == "succeeded", result.get("error")
        (point,) = result["measurements"]
        load = point["load"]
        # Then the load section says what was asked, what was issued and what it certifies
        assert point["scenario"] == "server" and load["target_qps"] == 50
        assert load["queries"] == point["latency_ms"]["count"] + load["unfinished"]
        assert 0.5 < load["achieved_qps"] / 50 < 1.5
        assert load["certified"]["percentile"] == 90
        assert set(load["issue_lateness_ms"]) == {"mean", "p50", "p99", "max"}
        # latency from the scheduled arrival is never below the model's own service time
        assert point["latency_ms"]["median"] >= load["service_ms"]["median"] * 0.99
    # And the stored result keeps it
    shown = mlscope(mlscope_env, "results", "show", results[0]["id"], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["measurements"][0]["load"] == results[0]["measurements"][0]["load"]


def test_find_max_qps_prints_probes_and_stores_the_curve(mlscope_env: dict[str, str]) -> None:
    done = mlscope(
        mlscope_env, "run", "test_tiny_mlp", "-f", "onnxruntime", "--scenario", "server", "--find-max-qps",
        "--latency-bound-ms", "20", "--percentile", "90", "--qps", "50", "--json", *FAST,
    )  # fmt: skip
    (result,) = ran_valid(done)
    search = result["measurements"][0]["load"]["search"]
    assert search["latency_bound_ms"] == 20 and search["percentile"] == 90
    assert len(search["probes"]) >= 2
    passed = [p["target_qps"] for p in search["probes"] if p["passed"]]
    if passed:
        assert search["max_target_qps"] == max(passed)


def test_find_max_qps_reports_no_rate_when_no_probe_passes(mlscope_env: dict[str, str]) -> None:
    # Given a bound no model meets (1 µs), When the search runs from 2 queries/s (halving to below
    # 0.1 queries/s: five short probes)
    done = mlscope(
        mlscope_env, "run", "test_tiny_mlp", "-f", "onnxruntime", "--scenario", "server", "--find-max-qps",
        "--latency-bound-ms", "0.001", "--percentile", "90", "--qps", "2", "--json", *FAST,
        "--max-seconds", "1",
    )  # fmt: skip
    # Then no max QPS is reported, and the point is invalid for it
    assert done.returncode == 3, done.stderr
    (result,) = json_lines(done.stdout)
    (point,) = result["measurements"]
    search = point["load"]["search"]
    assert search["max_qps"] is None and search["max_target_qps"] is None and not search["capped"]
    assert search["probes"] and not any(p["passed"] for p in search["probes"])
    assert not point["validity"]["valid"]
    assert any(r.startswith("no rate met p90 ≤ 0.001 ms") for r in point["validity"]["reasons"])
    # And the CLI says so
    shown = mlscope(mlscope_env, "results", "show", result["id"])
    assert shown.returncode == 0, shown.stderr
    assert "no QPS tried met p90 ≤ 0.001 ms" in shown.stdout
    assert "max QPS with" not in shown.stdout


def test_multi_stream_on_a_real_model(mlscope_env: dict[str, str]) -> None:
    done = mlscope(
        mlscope_env, "run", "test_tiny_mlp", "-f", "onnxruntime", "--scenario", "multi_stream",
        "--samples-per-query", "4", "--interval-ms", "20", "--percentile", "90", "--json", *FAST,
    )  # fmt: skip
    (result,) = ran_valid(done)
    load = result["measurements"][0]["load"]
    assert load["samples_per_query"] == 4 and load["interval_ms"] == 20
    assert load["certified"]["bound_ms"] == 20


def test_multi_stream_back_to_back_on_a_real_model(mlscope_env: dict[str, str]) -> None:
    # Given --back-to-back, When multi_stream runs, Then each query went when the last one completed
    done = mlscope(
        mlscope_env, "run", "test_tiny_mlp", "-f", "onnxruntime", "--scenario", "multi_stream",
        "--samples-per-query", "4", "--back-to-back", "--percentile", "90", "--json", *FAST,
    )  # fmt: skip
    (result,) = ran_valid(done)
    load = result["measurements"][0]["load"]
    assert load["back_to_back"] is True and load["interval_ms"] is None and "overruns" not in load
    assert load["target_qps"] is None and load["achieved_qps"] > 0 and load["late"] == 0
    assert load["certified"]["bound_ms"] is None


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--scenario", "server", "--qps", "0"], "load.qps"),
        (["--scenario", "server", "--qps", "1e9"], "load.qps"),
        (["--scenario", "server", "--find-max-qps", "--latency-bound-ms", "0"], "latency_bound_ms"),
        (["--scenario", "server", "--qps", "5", "--percentile", "100"], "percentile"),
        (["--scenario", "server"], "qps"),
    ],
)
def test_bad_load_is_one_line_and_exit_2(
    mlscope_env: dict[str, str], arguments: list[str], named: str
) -> None:
    done = mlscope(mlscope_env, "run", "test_tiny_mlp", "-f", "onnxruntime", *arguments)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert named in done.stderr and "Traceback" not in done.stderr
