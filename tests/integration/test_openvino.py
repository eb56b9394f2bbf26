"""OpenVINO end to end: `mlscope run -f openvino` in a child process (the process runner) on a test
model exported to ONNX and on a user's own .onnx file, its outputs the same as ONNX Runtime's on the
same graph, its performance hints and precisions recorded with the result, its performance counters
as layer spans at FRAMEWORK trace level, and an option it does not have refused in one line."""

from __future__ import annotations

import importlib.metadata
from collections import Counter
from pathlib import Path

import openvino as ov
import pytest

from mlscope.store import open_store
from tests.fixtures.onnx_graphs import onnx_model
from tests.integration.test_run_cli import FAST, mlscope, printed_results, ran_valid, stored

pytestmark = pytest.mark.slow

MODEL = "test_tiny_mlp"


def test_a_model_runs_on_openvino_with_the_outputs_onnx_runtime_gives(mlscope_env: dict[str, str]) -> None:
    # When the test model (a PyTorch factory, exported to ONNX) runs on OpenVINO, checked against
    # ONNX Runtime on the same inputs
    done = mlscope(
        mlscope_env, "run", MODEL, "-f", "openvino", "-b", "1,4", "--check-parity", "--parity-against",
        "onnxruntime", "--json", *FAST,
    )  # fmt: skip
    (result,) = ran_valid(done)
    # Then it succeeded on the installed OpenVINO, compiled for latency in f32 on the CPU
    assert result["status"] == "succeeded" and result["runner"] == "process"
    facts = result["framework"]
    assert facts["name"] == "openvino" and facts["version"] == importlib.metadata.version("openvino")
    assert (facts["performance_hint"], facts["precision"]) == ("LATENCY", "f32")
    assert facts["streams"] >= 1 and facts["threads"] >= 1 and facts["graph"].endswith(".onnx")
    assert "CPU" in facts["libraries"]["available_devices"]
    assert [m["batch_size"] for m in result["measurements"]] == [1, 4]
    # And its outputs are ONNX Runtime's
    assert result["parity"]["against"] == "onnxruntime" and result["parity"]["verdict"] == "same", result[
        "parity"
    ]


def test_a_users_onnx_file_runs_on_openvino_and_matches_onnx_runtime(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    graph = onnx_model(tmp_path / "mine.onnx")
    done = mlscope(
        mlscope_env, "run", str(graph), "-f", "openvino", "--check-parity", "--parity-against", "onnxruntime",
        "--json", *FAST,
    )  # fmt: skip
    (result,) = ran_valid(done)
    assert result["manifest"]["framework"]["name"] == "openvino"
    assert result["framework"]["graph"] == "mine.onnx"
    assert result["parity"]["verdict"] == "same", result["parity"]


def test_the_throughput_hint_is_compiled_with_and_recorded(mlscope_env: dict[str, str]) -> None:
    # When the offline scenario issues batches from two threads with the throughput hint
    done = mlscope(
        mlscope_env, "run", MODEL, "-f", "openvino", "--option", "performance_hint=THROUGHPUT",
        "--scenario", "offline", "--measure", "concurrency=2", "--json", *FAST,
    )  # fmt: skip
    (result,) = ran_valid(done)
    # Then OpenVINO compiled for throughput, and the request and the facts say so
    assert result["request"]["options"]["performance_hint"] == "THROUGHPUT"
    facts = result["framework"]
    assert facts["performance_hint"] == "THROUGHPUT" and facts["optimal_infer_requests"] >= 1
    (point,) = result["measurements"]
    assert point["scenario"] == "offline" and point["throughput"] > 0


def test_bf16_runs_where_the_cpu_has_it_and_is_refused_in_one_line_where_not(
    mlscope_env: dict[str, str],
) -> None:
    has_bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    done = mlscope(mlscope_env, "run", MODEL, "-f", "openvino", "--option", "precision=bf16", "--json", *FAST)
    (result,) = printed_results(done.stdout)
    if has_bf16:
        assert done.returncode == 0, done.stderr
        assert result["framework"]["precision"] == "bf16"
    else:
        assert result["status"] == "failed"
        assert result["error"]["message"].startswith("options.precision: bf16 needs a CPU with bfloat16")


def test_a_traced_run_stores_openvinos_layers_inside_their_inferences(mlscope_env: dict[str, str]) -> None:
    done = mlscope(
        mlscope_env, "run", MODEL, "-f", "openvino", "-b", "2", "--trace-level", "FRAMEWORK", "--measure",
        "trace_iterations=3", "--measure", "trace_warmup=1", "--json", *FAST,
    )  # fmt: skip
    (result,) = ran_valid(done)
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as store:
        spans = store.get_spans(result["id"], limit=100_000)
    inferences = {
        s["span_id"]: s for s in spans if s["name"] == "inference" and s["attributes"]["pass"] == "FRAMEWORK"
    }
    layers = [s for s in spans if s["level"] == "FRAMEWORK"]
    # Then each of the 3 traced inferences holds the same layers, each inside it, one after another
    assert len(inferences) == 3
    per_inference = Counter(s["parent_id"] for s in layers)
    assert set(per_inference) == set(inferences) and len(set(per_inference.values())) == 1
    for span in layers:
        inference = inferences[span["parent_id"]]
        assert inference["start_ns"] <= span["start_ns"] <= span["end_ns"] <= inference["end_ns"]
        attributes = span["attributes"]
        assert attributes["kind"] == "layer" and span["name"] == attributes["layer"]
        assert attributes["timing"] == "sequential" and attributes["batch_size"] == 2
        assert "f32" in attributes["implementation"].lower(), attributes
    # And the two linear layers ran as OpenVINO's FullyConnected nodes, and took time
    types = Counter(s["attributes"]["layer_type"] for s in layers)
    assert types["FullyConnected"] == 2 * 3, types
    assert sum(s["end_ns"] - s["start_ns"] for s in layers) > 0


def test_at_library_level_the_same_nodes_are_operators_named_by_type(mlscope_env: dict[str, str]) -> None:
    done = mlscope(
        mlscope_env, "run", MODEL, "-f", "openvino", "--trace-level", "LIBRARY", "--measure",
        "trace_iterations=2", "--measure", "trace_warmup=1", "--json", *FAST,
    )  # fmt: skip
    (result,) = ran_valid(done)
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as store:
        spans = store.get_spans(result["id"], limit=100_000)
    operators = [s for s in spans if s["level"] == "LIBRARY"]
    layers = [s for s in spans if s["level"] == "FRAMEWORK"]
    # Both passes ran (LIBRARY includes FRAMEWORK), over the same nodes
    assert Counter(s["name"] for s in operators) == Counter(s["attributes"]["layer_type"] for s in layers)
    assert {s["attributes"]["kind"] for s in operators} == {"operator"}
    assert all(s["attributes"]["layer"] for s in operators)


@pytest.mark.parametrize(
    ("framework", "option", "said"),
    [
        ("openvino", "performance_hint=FAST", "LATENCY, THROUGHPUT"),
        ("onnxruntime", "performance_hint=THROUGHPUT", "ONNX Runtime has no performance_hint option"),
    ],
)
def test_an_option_openvino_or_the_framework_lacks_is_refused_in_one_line(
    mlscope_env: dict[str, str], framework: str, option: str, said: str
) -> None:
    done = mlscope(mlscope_env, "run", MODEL, "-f", framework, "--option", option, *FAST)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "options.performance_hint" in line and said in line, line
    assert stored(mlscope_env) == []
