"""Bricks on the real ONNX Runtime, into a real (SQLite) store: shared layers are measured once, the
composed estimate of a small MLP is close to the MLP measured whole, the critical-path bound stays
under the measured latency, and a graph with control flow falls back to the whole model.

Measurements are short (a busy CI machine): the tolerance of the estimate is stated below, and the
bound is checked with the whole model's measured median."""

from __future__ import annotations

import json
from pathlib import Path

import onnxruntime  # noqa: F401 - the project installs it: a missing install fails here, never skips
import pytest

from mlscope.cli import main
from mlscope.contract.settings import load_settings
from mlscope.services.bricks.pipeline import BrickBench
from mlscope.store import open_store
from mlscope.workers.bricks import brick_files
from tests.fixtures.brick_graphs import mlp, two_towers, with_control_flow

pytestmark = pytest.mark.slow

QUICK = {"warmup_count": 20, "warmup_seconds": 0.0, "min_count": 200, "min_seconds": 0.5, "max_seconds": 3}
WHOLE = {"runner": "inline", "device": "cpu", "measure": QUICK}
# The composed estimate of the MLP below (about 0.1 ms) is within this of its measured median on this
# (loaded, 2-core) machine; the benchmark (benchmarks/bricks.py) reports the error of real models.
TOLERANCE = 0.25


def _bench(mlscope_env: dict[str, str]) -> BrickBench:
    return BrickBench(load_settings(), whole=WHOLE, threads=1)


def test_bricks_shared_by_two_models_are_measured_once(mlscope_env: dict[str, str], tmp_path: Path) -> None:
    # Given two MLPs whose first two layers are alike (shapes 256 -> 256 -> 256) and whose last differs
    first = mlp(tmp_path / "first.onnx", [256, 256, 256, 64], seed=1)
    second = mlp(tmp_path / "second.onnx", [256, 256, 256, 32], seed=2)
    bench = _bench(mlscope_env)
    # When the first is decomposed and measured, then the second
    report_a = bench.report(str(first))
    report_b = bench.report(str(second))
    # Then the first measured all its bricks, and the second reused the shared ones from the store
    assert report_a["bricks"]["measured_now"] == report_a["bricks"]["unique"] > 0
    assert report_a["seconds"]["bricks"] >= report_a["seconds"]["decompose"] > 0
    assert report_b["bricks"]["reused"] >= 1
    assert report_b["bricks"]["measured_now"] == report_b["bricks"]["unique"] - report_b["bricks"]["reused"]
    # and the store holds each unique brick's result once (plus the two calibration bricks)
    unique = report_a["bricks"]["unique"] + report_b["bricks"]["measured_now"]
    files = brick_files(load_settings().cache_dir)
    with open_store(load_settings().store_url) as store:
        stored = [
            e for path in files for e in store.list_evaluations(model=path.stem, status="succeeded", limit=5)
        ]
    assert len(stored) == len(files) == unique + 2
    # and each model's new bricks (the first's with the calibrations) were measured in one job each:
    # two jobs, each brick of a job carrying the job's one environment sample
    jobs = {json.dumps(e["measurements"][0]["environment"], sort_keys=True) for e in stored}
    assert len(jobs) == 2


def test_the_composed_estimate_is_close_to_the_measured_latency(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given a small MLP (about 0.1 ms), measured as bricks and whole on one thread
    model = mlp(tmp_path / "mlp.onnx", [512, 1024, 1024, 512, 64])
    # When its latency is composed from its bricks
    report = _bench(mlscope_env).report(str(model))
    # Then the estimate is within the tolerance of the measured median, inside its own interval
    assert report.get("fallback") is None and report["measured_ms"] > 0
    assert abs(report["error_pct"]) <= 100 * TOLERANCE, report
    low, high = report["estimate_ci"]
    assert low <= report["estimate_ms"] <= high
    assert report["overhead_ms"] == pytest.approx(report["measured_ms"] - report["bounds"]["sequential_ms"])
    # and the whole model's fastest run is given beside its median, with the error against it
    assert 0 < report["measured_min_ms"] <= report["measured_ms"]
    assert report["error_vs_min_pct"] >= report["error_pct"]


def test_the_critical_path_bound_stays_under_the_measured_latency(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given two towers of MatMul+Relu layers over one input, added (ORT runs them one after the other)
    model = two_towers(tmp_path / "towers.onnx")
    # When its bounds are composed from its bricks
    report = _bench(mlscope_env).report(str(model))
    bounds = report["bounds"]
    # Then the critical path (one tower and the Add) is under the sequential bound, and both towers
    # share their bricks (same shapes)
    assert bounds["critical_path_ms"] < 0.75 * bounds["sequential_ms"]
    assert report["bricks"]["unique"] < report["bricks"]["total"]
    # and Benanza's parallel bound does not exceed the latency measured whole
    assert bounds["critical_path_ms"] <= report["measured_ms"]


def test_a_graph_with_control_flow_falls_back_to_the_whole_model(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given a graph with an If
    model = with_control_flow(tmp_path / "if.onnx")
    # When it is asked for bricks
    report = _bench(mlscope_env).report(str(model))
    # Then no estimate is made, the reason names the If layer, and the model is still measured whole
    assert report["estimate_ms"] is None and report["bounds"] is None
    assert "control flow" in report["fallback"]["reason"]
    assert [layer["op_type"] for layer in report["fallback"]["layers"]] == ["If"]
    assert report["measured_ms"] > 0 and report["bricks"]["measured_now"] == 0


def test_the_bricks_verb_prints_estimate_and_measured_and_exits_by_validity(
    mlscope_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a small MLP file
    model = mlp(tmp_path / "verb.onnx", [128, 128, 32], seed=3)

    # When `mlscope bricks MODEL --json` runs it (short measurements)
    with pytest.raises(SystemExit) as exited:
        main(["bricks", str(model), "--json", "--runner", "inline", "--min-seconds", "0.3", "--threads", "1"])
    report, summary = map(json.loads, capsys.readouterr().out.splitlines())

    # Then one object per model with the estimate, the measurement and the bounds, then the summary,
    # and the exit code says whether every report is valid (3: succeeded, not valid), never better
    assert report["model"] == str(model) and report["framework"]["name"] == "onnxruntime"
    assert report["estimate_ms"] > 0 and report["measured_ms"] > 0
    assert report["bounds"]["critical_path_ms"] <= report["bounds"]["sequential_ms"]
    # and the estimate's nominal-90% interval, not calibrated (no stored pairs in a fresh cache) and
    # saying so, around the estimate, with the coverage of its (empty) calibration set
    low, high = report["interval_ms"]
    assert 0 < low < report["estimate_ms"] < high
    coverage = report["coverage"]
    assert coverage["nominal"] == 0.9 and coverage["pairs"] == 0 and coverage["share"] is None
    assert coverage["calibrated"] is False and "not calibrated" in coverage["note"]
    assert report["estimate_ci"] is not None and report["estimate_se_ms"] >= 0
    assert summary["summary"] is True and summary["models"] == 1
    assert exited.value.code == (0 if report["validity"]["valid"] else 3)
