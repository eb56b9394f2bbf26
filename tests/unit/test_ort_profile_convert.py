"""ONNX Runtime's session profile becomes the FRAMEWORK pass's layer spans and the LIBRARY pass's
operator and kernel spans: warm-up runs dropped, nodes inside their run, times on the caller's clock.

The CPU events are real: a four-node graph is profiled by the installed onnxruntime in the fixture.
The CUDA "Kernel" events are hand-built after ORT's source (core/common/gpu_profiler_common.h,
providers/cuda/cupti_manager.cc), because there is no GPU here to record them.
"""

from __future__ import annotations

import copy
import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlscope.runtime.predictors.onnxruntime.profile import ort_profile_to_spans

OP_TYPES = ["Conv", "Relu", "GlobalAveragePool", "Flatten"]
WARMUP, TRACED = 2, 3
OFFSET_NS = 1_700_000_000_000_000_000


def tiny_graph(path: Path) -> None:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(np.zeros(4, np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["y"], name="flatten"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def real_events(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The profile of WARMUP + TRACED runs of the tiny graph, optimisations off (the nodes run as
    written, in order)."""
    folder = tmp_path_factory.mktemp("ort-profile")
    tiny_graph(folder / "tiny.onnx")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / "profile")
    session = ort.InferenceSession(str(folder / "tiny.onnx"), options, providers=["CPUExecutionProvider"])
    x = np.ones((1, 3, 8, 8), np.float32)
    for _ in range(WARMUP + TRACED):
        session.run(None, {"x": x})
    events: list[dict[str, Any]] = json.loads(Path(session.end_profiling()).read_text())
    return events


def run_starts_us(events: list[dict[str, Any]]) -> list[int]:
    return sorted(int(e["ts"]) for e in events if e["cat"] == "Session" and e["name"] == "model_run")


def convert(events: list[dict[str, Any]], level: str, readings: list[int] | None) -> list[dict[str, Any]]:
    counter = itertools.count()
    return ort_profile_to_spans(
        events,
        trace_id="t" * 32,
        parent_id="pass",
        offset_ns=OFFSET_NS,
        batch_size=1,
        level=level,
        inference_starts_ns=readings,
        new_id=lambda: f"s{next(counter)}",
        device="cuda:0",
    )


def readings_with_delays(events: list[dict[str, Any]], delays_ns: list[int]) -> list[int]:
    """Caller readings that precede each traced run's profiler start by the given delays, shifted by
    an arbitrary clock difference."""
    traced = run_starts_us(events)[-len(delays_ns) :]
    return [OFFSET_NS + 5_000_000 + ts * 1000 - delay for ts, delay in zip(traced, delays_ns, strict=True)]


def test_a_real_profile_gives_one_layer_span_per_node_inside_each_traced_run(
    real_events: list[dict[str, Any]],
) -> None:
    # Given a real profile of 2 warm-up and 3 traced runs, with the caller's 3 readings
    readings = readings_with_delays(real_events, [30_000, 40_000, 90_000])
    # When it is converted for the FRAMEWORK pass
    spans = convert(real_events, "FRAMEWORK", readings)
    # Then the warm-up runs are dropped: 3 inference spans under the pass, numbered in order
    inferences = [s for s in spans if s["name"] == "inference"]
    assert [s["attributes"]["iteration"] for s in inferences] == [0, 1, 2]
    assert all(s["level"] == "MODEL" and s["parent_id"] == "pass" for s in inferences)
    assert all(s["attributes"]["pass"] == "FRAMEWORK" for s in spans)
    # And each holds one layer span per node, in graph order, inside it
    for inference in inferences:
        layers = [s for s in spans if s["parent_id"] == inference["span_id"]]
        assert [s["attributes"]["layer_type"] for s in layers] == OP_TYPES
        assert [s["name"] for s in layers] == ["conv", "relu", "pool", "flatten"]
        assert [s["attributes"]["layer_index"] for s in layers] == [0, 1, 2, 3]
        assert all(s["level"] == "FRAMEWORK" and s["attributes"]["kind"] == "layer" for s in layers)
        assert all(
            inference["start_ns"] <= s["start_ns"] <= s["end_ns"] <= inference["end_ns"] for s in layers
        )
        assert all(s["attributes"]["provider"] == "CPUExecutionProvider" for s in layers)
        assert "thread" not in layers[0]["attributes"]
    # And shapes are read from ORT's type-and-shape records
    conv = next(s for s in spans if s["name"] == "conv")
    assert conv["attributes"]["input_shapes"] == [[1, 3, 8, 8], [4, 3, 3, 3], [4]]
    assert conv["attributes"]["output_shapes"] == [[1, 4, 6, 6]]


def test_times_shift_by_the_median_difference_to_the_callers_readings(
    real_events: list[dict[str, Any]],
) -> None:
    # Given readings whose delays to ORT's run starts differ, one an outlier
    delays = [30_000, 40_000, 900_000]
    readings = readings_with_delays(real_events, delays)
    # When converted
    inferences = [s for s in convert(real_events, "FRAMEWORK", readings) if s["name"] == "inference"]
    # Then each run starts at its reading plus its own delay minus the median delay
    median = statistics.median(delays)
    assert [s["start_ns"] for s in inferences] == [
        reading + delay - median for reading, delay in zip(readings, delays, strict=True)
    ]


def test_without_readings_every_run_is_kept_at_offset_plus_ts(real_events: list[dict[str, Any]]) -> None:
    inferences = [s for s in convert(real_events, "FRAMEWORK", None) if s["name"] == "inference"]
    assert [s["start_ns"] for s in inferences] == [OFFSET_NS + ts * 1000 for ts in run_starts_us(real_events)]


def test_the_library_pass_gives_operator_spans_without_layer_type(real_events: list[dict[str, Any]]) -> None:
    # When the same profile is converted for the LIBRARY pass
    spans = convert(real_events, "LIBRARY", readings_with_delays(real_events, [0, 0, 0]))
    operators = [s for s in spans if s["name"] != "inference"]
    # Then each node is an operator span named by its op type, knowing its layer and thread
    assert [s["name"] for s in operators] == OP_TYPES * TRACED
    assert all(s["level"] == "LIBRARY" and s["attributes"]["kind"] == "operator" for s in operators)
    assert [s["attributes"]["layer"] for s in operators[:4]] == ["conv", "relu", "pool", "flatten"]
    assert all(isinstance(s["attributes"]["thread"], int) for s in operators)
    assert not any("layer_type" in s["attributes"] for s in spans)


def test_fence_events_are_skipped(real_events: list[dict[str, Any]]) -> None:
    # Given the profile with the fence events older ORT versions wrote around each node
    with_fences = copy.deepcopy(real_events)
    for event in real_events:
        if event["cat"] == "Node":
            node = event["name"].removesuffix("_kernel_time")
            with_fences.append({**event, "name": f"{node}_fence_before", "dur": 0})
    # Then they add no span
    assert len(convert(with_fences, "FRAMEWORK", None)) == len(convert(real_events, "FRAMEWORK", None))


def test_an_unknown_level_or_too_few_runs_is_refused(real_events: list[dict[str, Any]]) -> None:
    with pytest.raises(ValueError, match="level"):
        convert(real_events, "HARDWARE", None)
    with pytest.raises(ValueError, match="model_run"):
        convert(real_events, "FRAMEWORK", [0] * (WARMUP + TRACED + 1))


# --- hand-built events (no GPU here; shapes from ORT's source) ---------------------------------


def session_event(name: str, ts: int, dur: int) -> dict[str, Any]:
    return {"cat": "Session", "pid": 1, "tid": 1, "dur": dur, "ts": ts, "ph": "X", "name": name, "args": {}}


def node_event(
    node: str, op: str, ts: int, dur: int, provider: str = "CUDAExecutionProvider"
) -> dict[str, Any]:
    args = {"op_name": op, "provider": provider, "input_type_shape": [{"float": [1, 8]}]}
    return {
        "cat": "Node",
        "pid": 1,
        "tid": 1,
        "dur": dur,
        "ts": ts,
        "ph": "X",
        "name": f"{node}_kernel_time",
        "args": args,
    }


def kernel_event(name: str, ts: int, dur: int, parent: str, op: str, grid: int) -> dict[str, Any]:
    """A CUPTI kernel as ORT's CUDA profiler writes it: sizes as strings, pid/tid -1, and the
    launching event's op_name and name copied in by GPUProfilerBase::MergeEvents."""
    args = {"stream": "7", "grid_x": str(grid), "grid_y": "1", "grid_z": "1"}
    args |= {"block_x": "128", "block_y": "1", "block_z": "1", "op_name": op, "parent_name": parent}
    return {
        "cat": "Kernel",
        "pid": -1,
        "tid": -1,
        "dur": dur,
        "ts": ts,
        "ph": "X",
        "name": name,
        "args": args,
    }


def cuda_profile() -> list[dict[str, Any]]:
    """One warm-up and one traced run of MatMul → Relu on CUDA, the kernels listed after their node."""
    events: list[dict[str, Any]] = []
    for start in (100, 1000):
        events += [
            node_event("mm", "MatMul", start + 10, 20),
            kernel_event("sgemm_128x64", start + 15, 40, "mm_kernel_time", "MatMul", grid=start),
            kernel_event("MemcpyDeviceToDevice", start + 16, 2, "mm_kernel_time", "MatMul", grid=-1),
            node_event("act", "Relu", start + 30, 0),
            kernel_event("relu_kernel", start + 60, 5, "act_kernel_time", "Relu", grid=4),
            session_event("model_run", start, 90),
        ]
    return events


def test_cuda_kernels_hang_under_the_operator_that_launched_them() -> None:
    # Given a CUDA profile of one warm-up and one traced run
    spans = convert(cuda_profile(), "LIBRARY", [OFFSET_NS + 1000 * 1000])
    by_name = {s["name"]: s for s in spans}
    # Then only the traced run's kernels are kept, each under its node's operator span
    kernels = [s for s in spans if s["attributes"].get("kind") == "kernel"]
    assert sorted(s["name"] for s in kernels) == ["MemcpyDeviceToDevice", "relu_kernel", "sgemm_128x64"]
    assert by_name["sgemm_128x64"]["parent_id"] == by_name["MatMul"]["span_id"]
    assert by_name["relu_kernel"]["parent_id"] == by_name["Relu"]["span_id"]
    # And a kernel may run past its node (launches are asynchronous) and still belong to it
    assert by_name["relu_kernel"]["start_ns"] > by_name["Relu"]["end_ns"]
    sgemm = by_name["sgemm_128x64"]["attributes"]
    assert sgemm["correlation"] == 1010 and sgemm["operator"] == "MatMul" and sgemm["layer"] == "mm"
    assert sgemm["stream"] == 7 and sgemm["device"] == "cuda:0"
    assert sgemm["grid"] == [1000, 1, 1] and sgemm["block"] == [128, 1, 1]
    # And a copy carries no launch geometry, and no kernel a layer_type
    assert "grid" not in by_name["MemcpyDeviceToDevice"]["attributes"]
    assert not any("layer_type" in s["attributes"] for s in kernels)
    # And the FRAMEWORK pass keeps layers only
    framework = convert(cuda_profile(), "FRAMEWORK", [OFFSET_NS + 1000 * 1000])
    assert [s["attributes"].get("kind") for s in framework] == [None, "layer", "layer"]


def test_a_node_is_nested_only_in_a_control_flow_node_that_contains_it() -> None:
    # Given a run where Relu (0 µs) starts as MatMul ends, and an If node runs a subgraph's Add
    events = [
        node_event("mm", "MatMul", 10, 20, provider="CPUExecutionProvider"),
        node_event("act", "Relu", 30, 0, provider="CPUExecutionProvider"),
        node_event("then_add", "Add", 45, 5, provider="CPUExecutionProvider"),
        node_event("branch", "If", 40, 20, provider="CPUExecutionProvider"),
        session_event("model_run", 0, 70),
    ]
    spans = {s["name"]: s for s in convert(events, "FRAMEWORK", None)}
    # Then Relu is not MatMul's child (its interval only touches MatMul's end), the Add is the If's
    assert spans["act"]["parent_id"] == spans["inference"]["span_id"]
    assert spans["then_add"]["parent_id"] == spans["branch"]["span_id"]
    assert [spans[n]["attributes"]["layer_index"] for n in ("mm", "act", "branch", "then_add")] == [
        0,
        1,
        2,
        3,
    ]
