"""The Kineto-trace converter: PyTorch profiler events become spans nested operator → inference,
kernels hang from the operator that launched them, and every time is moved onto the tracer's clock.

There is no GPU here, so the traces are built by hand, event by event, in the format Kineto
documents by writing it (pytorch/kineto libkineto/src/output_json.cpp: complete events ph "X" with
"ts"/"dur" in µs relative to "baseTimeNanoseconds"; cat "user_annotation", "cpu_op",
"cuda_runtime", "kernel", "gpu_memcpy", "python_function"; args "External id", "correlation",
"device", "stream", "grid", "block"; flow events ph "s"/"f" cat "ac2g"; metadata events ph "M").
The integration test feeds the converter a real CPU export of this PyTorch.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest

from mlscope.runtime.predictors.pytorch.profile import kineto_inference_starts, kineto_to_spans

BASE_NS = 1_790_000_000_000_000_000
PID, TID, OTHER_TID = 4242, 4242, 4243
OFFSET_NS = 12_345
TRACE_ID = "ab" * 16
PASS_SPAN = "cd" * 8


def cpu(
    cat: str, name: str, ts: float, dur: float, args: dict[str, Any] | None = None, *, tid: int = TID
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": PID,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args or {},
    }


def gpu(
    cat: str, name: str, ts: float, dur: float, correlation: int, external: int | None, **args: Any
) -> dict[str, Any]:
    """A device event; Kineto leaves out "External id" when it has no linked operator."""
    args = {"device": 0, "stream": 7, "correlation": correlation, **args}
    if external is not None:
        args["External id"] = external
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def launch_flow(correlation: int, ts_launch: float, ts_kernel: float) -> list[dict[str, Any]]:
    return [
        {
            "ph": "s",
            "id": correlation,
            "pid": PID,
            "tid": TID,
            "ts": ts_launch,
            "cat": "ac2g",
            "name": "ac2g",
        },
        {
            "ph": "f",
            "id": correlation,
            "pid": 0,
            "tid": 7,
            "ts": ts_kernel,
            "cat": "ac2g",
            "name": "ac2g",
            "bp": "e",
        },
    ]


def gpu_trace() -> dict[str, Any]:
    """Two inferences on a GPU. The first runs layers features.0 (conv2d → convolution, which
    launches a kernel on stream 7 that runs after the operator has returned) and features.1 (relu,
    one kernel), then an add_ outside any layer and a device synchronise. The second copies a
    tensor (memcpy). A thread of the process runs an operator of its own meanwhile."""
    events = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "ts": 0.0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "ts": 0.0, "args": {"name": "thread"}},
        cpu("user_annotation", "mlscope.inference#0", 1000.0, 200.0, {"External id": 1}),
        cpu("user_annotation", "mlscope.layer:features.0", 1002.0, 40.0, {"External id": 2}),
        cpu(
            "cpu_op",
            "aten::conv2d",
            1003.0,
            38.0,
            {"External id": 3, "Input Dims": [[1, 3, 8, 8], [4, 3, 3, 3]]},
        ),
        cpu("cpu_op", "aten::convolution", 1004.0, 36.0, {"External id": 4, "Input Dims": [[1, 3, 8, 8]]}),
        cpu("cuda_runtime", "cudaLaunchKernel", 1010.0, 5.0, {"correlation": 42, "External id": 4}),
        gpu("kernel", "implicit_convolve_sgemm", 1090.0, 20.0, 42, 4, grid=[4, 1, 1], block=[256, 1, 1]),
        *launch_flow(42, 1010.0, 1090.0),
        cpu("user_annotation", "mlscope.layer:features.1", 1050.0, 20.0, {"External id": 5}),
        cpu("cpu_op", "aten::relu", 1051.0, 15.0, {"External id": 6, "Input Dims": [[1, 4, 6, 6]]}),
        cpu("cuda_runtime", "cudaLaunchKernel", 1055.0, 4.0, {"correlation": 43, "External id": 6}),
        gpu(
            "kernel",
            "vectorized_elementwise_kernel",
            1112.0,
            3.0,
            43,
            None,
            grid=[1, 1, 1],
            block=[128, 1, 1],
        ),
        *launch_flow(43, 1055.0, 1112.0),
        cpu("cpu_op", "aten::add_", 1075.0, 5.0, {"External id": 7, "Input Dims": [[1, 4], [1, 4]]}),
        cpu("cuda_runtime", "cudaDeviceSynchronize", 1085.0, 110.0, {"correlation": 44}),
        cpu("cpu_op", "aten::empty", 1020.0, 3.0, {"External id": 8}, tid=OTHER_TID),
        cpu("user_annotation", "mlscope.inference#1", 2000.0, 100.0, {"External id": 9}),
        cpu("cpu_op", "aten::copy_", 2010.0, 30.0, {"External id": 10}),
        cpu("cuda_runtime", "cudaMemcpyAsync", 2015.0, 10.0, {"correlation": 50, "External id": 10}),
        gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 2030.0, 8.0, 50, 10, bytes=64),
        {
            "ph": "X",
            "cat": "Trace",
            "name": "PyTorch Profiler (0)",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": 900.0,
            "dur": 1300.0,
            "args": {"Op count": 0},
        },
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 2200.0},
    ]
    return {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": events}


def convert(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return kineto_to_spans(trace, trace_id=TRACE_ID, parent_id=PASS_SPAN, offset_ns=OFFSET_NS, batch_size=2)


def one(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (span,) = [span for span in spans if span["name"] == name]
    return span


def at(micros: float) -> int:
    return BASE_NS + round(micros * 1000) + OFFSET_NS


def test_inferences_come_from_the_annotations_under_the_pass_span() -> None:
    # Given a GPU trace of two annotated inferences
    spans = convert(gpu_trace())
    # When the inference spans are picked out
    inferences = [span for span in spans if span["name"] == "inference"]
    # Then there is one MODEL span per annotation, under the pass, with its iteration
    assert [span["attributes"]["iteration"] for span in inferences] == [0, 1]
    for span in inferences:
        assert span["level"] == "MODEL" and span["parent_id"] == PASS_SPAN
        assert span["attributes"]["pass"] == "LIBRARY" and span["attributes"]["batch_size"] == 2
    # And its times are base + ts, shifted by the offset
    assert (inferences[0]["start_ns"], inferences[0]["end_ns"]) == (at(1000.0), at(1200.0))


def test_operators_nest_in_their_inference_and_know_their_layer() -> None:
    spans = convert(gpu_trace())
    first, second = (span["span_id"] for span in spans if span["name"] == "inference")
    conv2d, convolution = one(spans, "aten::conv2d"), one(spans, "aten::convolution")
    # The layer annotation is no span and no parent: the op sits straight under the inference
    assert not [span for span in spans if "features" in span["name"]]
    assert conv2d["parent_id"] == first and convolution["parent_id"] == conv2d["span_id"]
    assert one(spans, "aten::copy_")["parent_id"] == second
    # Each op knows its layer, or None outside any leaf module
    assert conv2d["attributes"]["layer"] == convolution["attributes"]["layer"] == "features.0"
    assert one(spans, "aten::relu")["attributes"]["layer"] == "features.1"
    assert one(spans, "aten::add_")["attributes"]["layer"] is None
    assert conv2d["attributes"]["input_shapes"] == [[1, 3, 8, 8], [4, 3, 3, 3]]
    assert conv2d["attributes"]["kind"] == "operator" and conv2d["attributes"]["thread"] == TID
    assert (conv2d["start_ns"], conv2d["end_ns"]) == (at(1003.0), at(1041.0))


def test_a_kernel_hangs_from_the_operator_that_launched_it() -> None:
    spans = convert(gpu_trace())
    convolution, kernel = one(spans, "aten::convolution"), one(spans, "implicit_convolve_sgemm")
    launch = next(
        s for s in spans if s["name"] == "cudaLaunchKernel" and s["attributes"]["correlation"] == 42
    )
    # The kernel ran on the GPU after its operator returned: time cannot link them, the correlation does
    assert kernel["start_ns"] > convolution["end_ns"]
    assert kernel["parent_id"] == convolution["span_id"]
    assert launch["parent_id"] == convolution["span_id"] and launch["attributes"]["kind"] == "runtime"
    assert kernel["level"] == "LIBRARY"
    assert kernel["attributes"] == {
        "pass": "LIBRARY",
        "batch_size": 2,
        "kind": "kernel",
        "correlation": 42,
        "device": 0,
        "stream": 7,
        "grid": [4, 1, 1],
        "block": [256, 1, 1],
        "operator": "aten::convolution",
        "layer": "features.0",
    }
    # Found by its launch's correlation alone (this kernel has no "External id")
    relu_kernel = one(spans, "vectorized_elementwise_kernel")
    assert relu_kernel["parent_id"] == one(spans, "aten::relu")["span_id"]
    assert relu_kernel["attributes"]["layer"] == "features.1"
    memcpy = one(spans, "Memcpy DtoH (Device -> Pinned)")
    assert memcpy["attributes"]["kind"] == "memcpy" and memcpy["attributes"]["operator"] == "aten::copy_"
    assert memcpy["parent_id"] == one(spans, "aten::copy_")["span_id"]


def test_threads_nest_apart() -> None:
    # An op on another thread lies within conv2d's interval but is not part of it
    spans = convert(gpu_trace())
    other = one(spans, "aten::empty")
    assert other["attributes"]["thread"] == OTHER_TID
    assert other["parent_id"] == next(s["span_id"] for s in spans if s["name"] == "inference")
    # A synchronise outside any operator sits under the inference
    sync = one(spans, "cudaDeviceSynchronize")
    assert sync["parent_id"] == other["parent_id"]


def test_every_span_is_well_formed_and_only_layers_carry_a_layer_type() -> None:
    spans = convert(gpu_trace())
    ids = [span["span_id"] for span in spans]
    assert len(set(ids)) == len(ids)
    for span in spans:
        assert re.fullmatch(r"[0-9a-f]{16}", span["span_id"]) and span["span_id"].strip("0")
        assert span["parent_id"] == PASS_SPAN or span["parent_id"] in ids
        assert span["trace_id"] == TRACE_ID and span["end_ns"] >= span["start_ns"]
        assert "layer_type" not in span["attributes"]
        assert not any(key.startswith("_") for key in span["attributes"])
    # Metadata, flow, instant and the profiler's own "Trace" span are not spans
    assert {span["name"] for span in spans}.isdisjoint({"process_name", "ac2g", "PyTorch Profiler (0)"})


def test_python_frames_become_the_stack_of_an_operator_not_spans() -> None:
    # Given with_stack frames around and between the annotations
    trace = {
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [
            cpu("python_function", "bench.py(10): run", 0.0, 100.0),
            cpu("user_annotation", "mlscope.inference#0", 5.0, 90.0),
            cpu("python_function", "module.py(1787): _call_impl", 6.0, 80.0),
            cpu("user_annotation", "mlscope.layer:fc", 7.0, 70.0),
            cpu("python_function", "linear.py(125): forward", 8.0, 60.0),
            cpu("cpu_op", "aten::linear", 9.0, 50.0),
        ],
    }
    # When it is converted
    spans = convert(trace)
    # Then the op's parent is the inference, and its stack holds the frames inside it, innermost first
    linear = one(spans, "aten::linear")
    assert linear["parent_id"] == one(spans, "inference")["span_id"]
    assert linear["attributes"]["python_stack"] == ["linear.py(125): forward", "module.py(1787): _call_impl"]
    assert linear["attributes"]["layer"] == "fc"
    assert len(spans) == 2


@pytest.mark.parametrize("base", [BASE_NS, None])
def test_times_are_base_plus_relative_microseconds_or_absolute_without_a_base(base: int | None) -> None:
    # Given an annotation at ts µs, relative to the base when the trace has one
    ts = 4_460_195_838_754.606 if base else 1_790_000_000_000_000.0
    trace: dict[str, Any] = {"traceEvents": [cpu("user_annotation", "mlscope.inference#3", ts, 1.0)]}
    if base:
        trace["baseTimeNanoseconds"] = base
    # When its start is read
    starts = kineto_inference_starts(trace)
    # Then it is epoch ns: base + ts * 1000 (ns precision kept)
    assert starts == {3: (base or 0) + round(ts * 1000)}
    (span,) = kineto_to_spans(trace, trace_id=TRACE_ID, parent_id=PASS_SPAN, offset_ns=-5, batch_size=1)
    assert span["start_ns"] == starts[3] - 5 and span["end_ns"] == span["start_ns"] + 1000


def test_importing_the_converter_imports_no_torch() -> None:
    # The converter runs wherever a trace is read; only the passes need torch, and import it late
    probe = "import sys, mlscope.runtime.predictors.pytorch.profile; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
