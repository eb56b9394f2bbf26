"""Bricks on real PyTorch, into a real (SQLite) store: layers shared by two models are measured once,
the composed estimate of a small MLP is close to the MLP measured whole, the critical-path bound stays
under the measured latency, a tiny Hugging Face BERT (traced by TorchDynamo) is estimated from its
bricks, and a model torch.fx cannot trace falls back to the whole model, saying why.

Measurements are short (a busy CI machine): the tolerance of the estimate is stated below, and the
bound is checked with the whole model's measured median."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch  # noqa: F401 - installed by the project: a missing install fails, never skips

from mlscope.cli import main
from mlscope.contract.settings import load_settings
from mlscope.services.bricks.pipeline import BrickBench
from mlscope.store import open_store
from tests.conftest import RUNTIME_MANIFESTS
from tests.fixtures.torch_bricks import write_manifests

pytestmark = pytest.mark.slow

QUICK = {"warmup_count": 20, "warmup_seconds": 0.0, "min_count": 200, "min_seconds": 0.5, "max_seconds": 3}
WHOLE = {"runner": "inline", "device": "cpu", "measure": QUICK}
# The composed estimate of the MLP below (about 0.13 ms in eager PyTorch on one thread; -1% and -5% in
# two runs here) is within this of its measured median on this (loaded, 2-core) machine;
# benchmarks/bricks.py --framework pytorch reports the error of real models.
TOLERANCE = 0.25


@pytest.fixture
def bench(mlscope_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BrickBench:
    folder = write_manifests(tmp_path / "manifests")
    monkeypatch.setenv("MLSCOPE_MANIFESTS", f"{RUNTIME_MANIFESTS}:{folder}")
    return BrickBench(load_settings(), whole=WHOLE, threads=1, framework="pytorch")


def test_bricks_shared_by_two_models_are_measured_once(bench: BrickBench) -> None:
    # Given two MLPs whose first two layers are alike (256 -> 256 -> 256) and whose last differs
    # When the first is decomposed and measured, then the second
    report_a = bench.report("bricks_mlp_first")
    report_b = bench.report("bricks_mlp_second")
    # Then the first measured all its bricks, the second only its own last layer
    assert report_a["framework"]["name"] == "pytorch"
    assert report_a["bricks"]["measured_now"] == report_a["bricks"]["unique"] > 0
    assert report_b["bricks"]["measured_now"] == 1
    assert report_b["bricks"]["reused"] == report_b["bricks"]["unique"] - 1 >= 2
    # and the store holds each unique brick's result once, plus the two calibration bricks, each
    # model's new bricks measured in one job (the job's one environment sample)
    with open_store(load_settings().store_url) as store:
        rows = [
            row
            for row in store.list_evaluations(framework="pytorch", status="succeeded", limit=100)
            if row["model"]["name"].startswith("brick-")
        ]
    assert len(rows) == report_a["bricks"]["unique"] + 1 + 2
    assert len({row["model"]["name"] for row in rows}) == len(rows)
    jobs = {json.dumps(row["measurements"][0]["environment"], sort_keys=True) for row in rows}
    assert len(jobs) == 2


# Quiet: it compares two timings taken minutes apart (the bricks, the whole model), which a parallel
# test's load on the two cores moves apart (36% under load in one make test, within 25% alone).
@pytest.mark.quiet
def test_the_composed_estimate_is_close_to_the_measured_latency(bench: BrickBench) -> None:
    # Given a small MLP, measured as bricks and whole on one thread
    report = bench.report("bricks_mlp_large")
    # Then the estimate is within the tolerance of the measured median, inside its own interval
    assert report.get("fallback") is None and report["measured_ms"] > 0
    assert abs(report["error_pct"]) <= 100 * TOLERANCE, report
    low, high = report["estimate_ci"]
    assert low <= report["estimate_ms"] <= high
    assert report["overhead_ms"] == pytest.approx(report["measured_ms"] - report["bounds"]["sequential_ms"])


def test_a_hugging_face_model_is_estimated_from_its_bricks(bench: BrickBench) -> None:
    # Given a 2-layer BERT of hidden size 256 on 128 tokens (transformers, random weights from its
    # config), which torch.fx's own tracer cannot trace
    import transformers  # noqa: F401 - installed by the project

    report = bench.report("bricks_small_bert")
    # Then it is decomposed (no fallback), its two encoder layers' bricks are measured once, and it
    # has an estimate whose critical path stays under the latency measured whole. How close the
    # estimate comes is the benchmark's to say (benchmarks/bricks.py): here it was -11% to -40% of the
    # measured median over 12 runs at a load of 2-3 on 2 cores (transformers' own Python around the
    # graph, in no layer, and contention), too wide for a tolerance a test could hold.
    assert report.get("fallback") is None, report.get("fallback")
    assert report["bricks"]["unique"] < report["bricks"]["total"] / 2
    assert report["bricks"]["measured_now"] == report["bricks"]["unique"]
    assert report["estimate_ms"] > 0
    assert report["bounds"]["critical_path_ms"] <= report["measured_ms"], report


def test_the_critical_path_bound_stays_under_the_measured_latency(bench: BrickBench) -> None:
    # Given two towers of Linear+ReLU over one input, added (eager PyTorch runs them one after the other)
    report = bench.report("bricks_towers")
    bounds = report["bounds"]
    # Then the critical path (one tower and the add) is under the sequential bound, the towers share
    # their bricks, and the bound does not exceed the latency measured whole
    assert bounds["critical_path_ms"] < 0.75 * bounds["sequential_ms"]
    assert report["bricks"]["unique"] < report["bricks"]["total"]
    assert bounds["critical_path_ms"] <= report["measured_ms"]


def test_an_untraceable_model_falls_back_to_the_whole_model(bench: BrickBench) -> None:
    # Given a model with a branch on a tensor's value
    report = bench.report("bricks_data_dependent")
    # Then no estimate is made, the reason says torch.fx cannot trace it, and it is measured whole
    assert report["estimate_ms"] is None and report["bounds"] is None
    assert "torch.fx cannot trace" in report["fallback"]["reason"]
    assert report["measured_ms"] > 0 and report["bricks"]["measured_now"] == 0


def test_the_bricks_verb_runs_pytorch(
    mlscope_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a small conv net (views, an in-place ReLU, a functional pooling)
    monkeypatch.setenv("MLSCOPE_MANIFESTS", f"{RUNTIME_MANIFESTS}:{write_manifests(tmp_path / 'm')}")
    # When `mlscope bricks MODEL --framework pytorch --json` runs it (short measurements)
    with pytest.raises(SystemExit) as exited:
        main(["bricks", "bricks_small_conv", "--framework", "pytorch", "--json", "--runner", "inline",
              "--min-seconds", "0.3", "--threads", "1"])  # fmt: skip
    report, summary = map(json.loads, capsys.readouterr().out.splitlines())
    # Then it is estimated (no fallback), with its views costed as dispatches, and the exit code is
    # run's (0 valid, 3 not valid), not 2
    assert report["framework"]["name"] == "pytorch" and report.get("fallback") is None
    assert report["estimate_ms"] > 0 and report["measured_ms"] > 0 and report["shape_layers"] == 2
    assert summary["models"] == 1
    assert exited.value.code == (0 if report["validity"]["valid"] else 3)
