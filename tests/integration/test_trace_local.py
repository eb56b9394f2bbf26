"""Tracing an evaluation on this machine (`mlscope run --trace-level`): a real predictor process, the
real SQLite store, and what `mlscope trace` reads back."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from mlscope.store import open_store
from tests.integration.test_run_cli import FAST, json_lines, mlscope

pytestmark = pytest.mark.slow


def _spans(env: dict[str, str], evaluation_id: str) -> list[dict]:
    with open_store(env["MLSCOPE_STORE_URL"]) as store:
        return store.get_spans(evaluation_id, limit=200_000)


def test_a_model_level_run_is_one_trace_with_a_span_per_timed_inference(mlscope_env: dict[str, str]) -> None:
    # When the tiny model runs on ONNX Runtime traced at MODEL level, at two batch sizes
    done = mlscope(
        mlscope_env,
        "run",
        "test_tiny_mlp",
        "-f",
        "onnxruntime",
        "-b",
        "1,4",
        "--trace-level",
        "MODEL",
        "--json",
        *FAST,
    )
    assert done.returncode == 0, done.stderr
    (result,) = json_lines(done.stdout)
    spans = _spans(mlscope_env, result["id"])
    # Then every span is in the evaluation's trace, and the run's root is the CLI's span
    assert result["trace_level"] == "MODEL"
    assert {s["trace_id"] for s in spans} == {result["trace_id"]}
    by_id = {s["span_id"]: s for s in spans}
    (root,) = [s for s in spans if s["parent_id"] is None]
    assert root["name"] == "run" and root["attributes"]["mlscope.process"] == "cli"
    (evaluation,) = [s for s in spans if s["name"] == "evaluation"]
    assert evaluation["parent_id"] == root["span_id"]
    assert Counter(s["name"] for s in spans if s["parent_id"] == evaluation["span_id"]) == {
        "import": 1,
        "fetch": 1,
        "load": 1,
        "first_inference": 1,
        "preprocess": 2,
        "predict": 2,
        "postprocess": 2,
    }
    # And each measured point has one MODEL span per timed inference, inside its "predict" span
    assert not [s for s in spans if s["level"] in ("FRAMEWORK", "LIBRARY", "HARDWARE")]
    for measurement in result["measurements"]:
        (predict,) = [
            s
            for s in spans
            if s["name"] == "predict" and s["attributes"]["batch_size"] == measurement["batch_size"]
        ]
        inferences = [s for s in spans if s["parent_id"] == predict["span_id"]]
        assert (
            len(inferences) == measurement["latency_ms"]["count"] == predict["attributes"]["inference_spans"]
        )
        assert all(s["level"] == "MODEL" and s["name"] == "inference" for s in inferences)
        assert all(
            predict["start_ns"] <= s["start_ns"] <= s["end_ns"] <= predict["end_ns"] for s in inferences
        )
        # the spans' durations are the latencies the statistics were computed from
        durations = sorted(s["end_ns"] - s["start_ns"] for s in inferences)
        assert durations[len(durations) // 2] / 1e6 == pytest.approx(
            measurement["latency_ms"]["median"], rel=0.05
        )
    # And every span's parent is in the trace (or is the root)
    assert all(s["parent_id"] in by_id for s in spans if s is not root)

    # And `mlscope trace` summarises it and writes a Chrome trace
    summary = mlscope(mlscope_env, "trace", result["id"][:8], "--format", "json")
    assert summary.returncode == 0, summary.stderr
    assert json.loads(summary.stdout)["count"] == len(spans)


def test_a_failed_evaluation_keeps_what_was_traced_up_to_its_failure(mlscope_env: dict[str, str]) -> None:
    # When a model whose weights cannot load runs traced at APPLICATION level in a child process
    done = mlscope(
        mlscope_env,
        "run",
        "test_broken_factory",
        "-f",
        "pytorch",
        "--trace-level",
        "APPLICATION",
        "--json",
        *FAST,
    )
    assert done.returncode == 1, done.stderr
    (result,) = json_lines(done.stdout)
    assert result["status"] == "failed" and result["error"]["phase"] == "load"
    # Then its trace shows the phases it went through and names the error where it happened
    spans = {s["name"]: s for s in _spans(mlscope_env, result["id"])}
    assert {"run", "evaluation", "import", "fetch", "load", "store"} <= set(spans)
    assert "first_inference" not in spans and "predict" not in spans
    assert "weights file is corrupt" in spans["load"]["attributes"]["error"]
    assert "weights file is corrupt" in spans["evaluation"]["attributes"]["error"]
    assert spans["store"]["attributes"]["status"] == "failed"
