"""TensorFlow's profile (an XSpace) becomes the FRAMEWORK pass's Keras layer spans and the LIBRARY
pass's operator, runtime and kernel spans, on the caller's clock.

The XSpaces here are built, not captured (the converter imports no TensorFlow and this test runs
where TF is not installed). Their shape is a real capture's: TF 2.21 (tensorflow-cpu) profiling
MobileNetV2 in a `tf.function`, turned into a dict by `MessageToDict(space,
preserving_proto_field_name=True)` — 64-bit integers as strings, map keys as strings, zero fields
left out, a "Task Environment" plane with "profile_start_time", line timestamps relative to it, op
events named "<node>:<type>" with the op type as display name, Keras scopes with a "_1" suffix, and
`Trace("mlscope.inference#<i>")` annotations on the "python" line. The GPU planes ("/device:GPU:0",
"/host:CUPTI") follow TF/XLA's backends/profiler/gpu/cupti_collector.cc: there is no GPU here.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

from mlscope.runtime.predictors.tensorflow.profile import layer_scopes, xspace_to_spans

START_NS = 1_795_000_000_000_000_000
US = 1_000_000  # picoseconds per microsecond
MODEL = "mobilenetv2_1.00_224_1"
LAYERS = {
    "Conv1": {"layer_type": "Conv2D", "input_shapes": [[None, 8, 8, 3]], "output_shapes": [[None, 4, 4, 2]]},
    "bn_Conv1": {"layer_type": "BatchNormalization"},
    "Conv1_relu": {"layer_type": "ReLU"},
}


class XSpaceBuilder:
    """Planes of an XSpace in MessageToDict's shape."""

    def __init__(self) -> None:
        self.planes: list[dict[str, Any]] = [
            {
                "id": "0",
                "name": "Task Environment",
                "stat_metadata": {"1": {"id": "1", "name": "profile_start_time"}},
                "stats": [{"metadata_id": "1", "uint64_value": str(START_NS)}],
            }
        ]
        self._ids = itertools.count(1)

    def plane(self, name: str) -> dict[str, Any]:
        found = next((p for p in self.planes if p["name"] == name), None)
        if found is None:
            found = {"id": "1", "name": name, "lines": [], "event_metadata": {}, "stat_metadata": {}}
            self.planes.append(found)
        return found

    def _metadata(self, plane: dict[str, Any], table: str, name: str, display: str = "") -> str:
        for key, meta in plane[table].items():
            if meta["name"] == name:
                return key
        key = str(next(self._ids))
        plane[table][key] = {"id": key, "name": name, **({"display_name": display} if display else {})}
        return key

    def event(
        self,
        plane_name: str,
        line: str,
        name: str,
        start_us: float,
        duration_us: float,
        display: str = "",
        stats: dict[str, Any] | None = None,
        line_id: int = 7,
    ) -> None:
        plane = self.plane(plane_name)
        found = next((x for x in plane["lines"] if x["name"] == line), None)
        if found is None:
            found = {"id": str(line_id), "name": line, "timestamp_ns": "13347", "events": []}
            plane["lines"].append(found)
        event: dict[str, Any] = {"metadata_id": self._metadata(plane, "event_metadata", name, display)}
        if start_us:  # MessageToDict leaves zero fields out
            event["offset_ps"] = str(round(start_us * US))
        if duration_us:
            event["duration_ps"] = str(round(duration_us * US))
        event["stats"] = []
        for key, value in (stats or {}).items():
            stat: dict[str, Any] = {"metadata_id": self._metadata(plane, "stat_metadata", key)}
            if isinstance(value, tuple):  # ("ref", text): a stat whose value is another metadata's name
                stat["ref_value"] = self._metadata(plane, "stat_metadata", value[1])
            else:
                stat["int64_value"] = str(value)
            event["stats"].append(stat)
        found["events"].append(event)

    def op(
        self, node: str, op_type: str, start_us: float, duration_us: float, line: str = "tf_Compute/7"
    ) -> None:
        line_id = int(line.rpartition("/")[2])
        self.event(
            "/host:CPU", line, f"{MODEL}/{node}:{op_type}", start_us, duration_us, op_type, None, line_id
        )

    def space(self) -> dict[str, Any]:
        return {"planes": self.planes, "hostnames": ["vm"]}


def at_us(value: float) -> int:
    """The epoch ns of a time in the built profile (µs after the line start), before any shift."""
    return START_NS + 13347 + round(value * 1000)


def mobilenet_start() -> XSpaceBuilder:
    """Two traced inferences of the first three layers; an op before them (a warm-up's)."""
    built = XSpaceBuilder()
    built.op("Conv1_1/convolution", "_MklNativeConv2D", 5, 10)  # before the first annotation
    for base in (100, 300):
        built.event("/host:CPU", "python", f"mlscope.inference#{(base - 100) // 200}", base, 150, line_id=1)
        # a weight read and BN's rsqrt(var + eps) run first, on another thread, before any data op
        built.op("bn_Conv1_1/Cast_2/ReadVariableOp", "ReadVariableOp", base + 2, 1, line="tf_Compute/2")
        built.op("bn_Conv1_1/batchnorm/Rsqrt", "Rsqrt", base + 4, 2, line="tf_Compute/2")
        built.op("Conv1_1/convolution", "_MklNativeConv2D", base + 10, 40)
        built.op("bn_Conv1_1/batchnorm/mul_1", "Mul", base + 55, 10)
        built.op("bn_Conv1_1/batchnorm/add_1", "AddV2", base + 66, 9)
        built.op("Conv1_relu_1/Relu6", "Relu6", base + 80, 20)
        built.op("Identity", "Identity", base + 120, 1)  # no layer scope
    return built


PARAMETER_OPS = {f"{MODEL}/bn_Conv1_1/Cast_2/ReadVariableOp", f"{MODEL}/bn_Conv1_1/batchnorm/Rsqrt"}


def convert(space: dict[str, Any], level: str, readings: list[int] | None = None) -> list[dict[str, Any]]:
    ids = (f"{n:016x}" for n in itertools.count(1))
    return xspace_to_spans(
        space,
        trace_id="ab" * 16,
        parent_id="feedfacecafebeef",
        level=level,
        batch_size=2,
        inference_starts_ns=readings,
        layers=LAYERS,
        parameter_ops=PARAMETER_OPS,
        new_id=lambda: next(ids),
    )


def test_each_annotation_is_an_inference_on_the_callers_clock_shifted_by_the_median_offset() -> None:
    # Given readings 1 µs, 3 µs and (an outlier) 900 µs before each annotation's start on the profiler
    built = mobilenet_start()
    built.event("/host:CPU", "python", "mlscope.inference#2", 500, 150, line_id=1)
    readings = [at_us(100) - 1000, at_us(300) - 3000, at_us(500) - 900_000]
    # When converted
    spans = convert(built.space(), "FRAMEWORK", readings)
    inferences = [s for s in spans if s["name"] == "inference"]
    # Then each is a MODEL span under the pass, shifted by the median offset (3 µs earlier)
    assert [s["attributes"]["iteration"] for s in inferences] == [0, 1, 2]
    assert all(s["level"] == "MODEL" and s["parent_id"] == "feedfacecafebeef" for s in inferences)
    assert [s["start_ns"] for s in inferences] == [at_us(t) - 3000 for t in (100, 300, 500)]
    assert inferences[0]["end_ns"] - inferences[0]["start_ns"] == 150_000
    assert {s["trace_id"] for s in spans} == {"ab" * 16}


def test_layers_group_their_scopes_ops_and_leave_out_ops_that_depend_on_weights_only() -> None:
    spans = convert(mobilenet_start().space(), "FRAMEWORK", None)
    inferences = {s["span_id"]: s for s in spans if s["name"] == "inference"}
    layers = [s for s in spans if s["level"] == "FRAMEWORK"]
    # Then each inference has one span per Keras layer (not the warm-up's op, not the scope-less one)
    assert Counter(s["parent_id"] for s in layers) == dict.fromkeys(inferences, 3)
    first = sorted(
        (s for s in layers if inferences[s["parent_id"]]["attributes"]["iteration"] == 0),
        key=lambda s: s["attributes"]["layer_index"],
    )
    assert [(s["name"], s["attributes"]["layer_type"]) for s in first] == [
        ("Conv1", "Conv2D"),
        ("bn_Conv1", "BatchNormalization"),
        ("Conv1_relu", "ReLU"),
    ]
    # And the BN layer spans its data ops only (mul_1 .. add_1), not the early weight read and rsqrt
    bn = first[1]
    assert (bn["start_ns"], bn["end_ns"]) == (at_us(155), at_us(175))
    assert bn["attributes"]["operators"] == 2
    # And shapes have the batch axis filled in; kind and pass are set; layers are inside their inference
    assert first[0]["attributes"]["input_shapes"] == [[2, 8, 8, 3]]
    assert first[0]["attributes"]["output_shapes"] == [[2, 4, 4, 2]]
    assert first[1]["attributes"]["input_shapes"] is None
    for span in layers:
        parent = inferences[span["parent_id"]]
        assert parent["start_ns"] <= span["start_ns"] <= span["end_ns"] <= parent["end_ns"]
        assert span["attributes"]["kind"] == "layer" and span["attributes"]["pass"] == "FRAMEWORK"
        assert span["attributes"]["batch_size"] == 2


def test_operators_are_every_op_in_an_inference_with_their_layer_and_thread_never_a_layer_type() -> None:
    spans = convert(mobilenet_start().space(), "LIBRARY", None)
    inferences = {s["span_id"] for s in spans if s["name"] == "inference"}
    operators = [s for s in spans if s["level"] == "LIBRARY"]
    assert len(operators) == 2 * 7
    assert all(s["parent_id"] in inferences and s["attributes"]["kind"] == "operator" for s in operators)
    assert not any("layer_type" in s["attributes"] for s in spans)
    conv = next(s for s in operators if s["name"] == "_MklNativeConv2D")
    assert conv["attributes"]["op"] == f"{MODEL}/Conv1_1/convolution"
    assert conv["attributes"]["layer"] == "Conv1" and conv["attributes"]["thread"] == 7
    assert {s["attributes"]["layer"] for s in operators if s["name"] in ("Rsqrt", "ReadVariableOp")} == {
        "bn_Conv1"
    }
    assert {s["attributes"]["layer"] for s in operators if s["name"] == "Identity"} == {None}


def test_an_op_running_inside_another_on_its_thread_is_its_child() -> None:
    built = XSpaceBuilder()
    built.event("/host:CPU", "python", "mlscope.inference#0", 0, 100, line_id=1)
    built.op("call/PartitionedCall", "PartitionedCall", 10, 50)
    built.op("call/inner/Relu", "Relu", 20, 5)
    built.op("other/Relu", "Relu", 20, 5, line="tf_Compute/9")
    spans = convert(built.space(), "LIBRARY", None)
    outer = next(s for s in spans if s["name"] == "PartitionedCall")
    inner = next(s for s in spans if s.get("attributes", {}).get("op") == f"{MODEL}/call/inner/Relu")
    other = next(s for s in spans if s.get("attributes", {}).get("op") == f"{MODEL}/other/Relu")
    assert inner["parent_id"] == outer["span_id"]
    assert other["parent_id"] == spans[0]["span_id"]  # the same time on another thread: not nested


def test_gpu_kernels_hang_under_the_op_that_launched_them() -> None:
    """Built GPU events (cupti_collector.cc's shape): there is no GPU here to record them."""
    built = XSpaceBuilder()
    built.event("/host:CPU", "python", "mlscope.inference#0", 0, 200, line_id=1)
    built.op("Conv1_1/convolution", "Conv2D", 10, 30)
    built.event("/host:CUPTI", "Host Threads/7", "cuLaunchKernel", 20, 5, stats={"correlation_id": 41})
    kernel_stats = {
        "correlation_id": 41,
        "tf_op": ("ref", f"{MODEL}/Conv1_1/convolution:Conv2D"),
        "kernel_details": (
            "ref",
            "regs:64 static_shared:0 dynamic_shared:0 grid:14,14,2 block:256,1,1 occ_pct:50",
        ),
    }
    built.event("/device:GPU:0", "Stream #13(Kernel)", "implicit_convolve_sgemm", 30, 80, stats=kernel_stats)
    copy_stats = {
        "correlation_id": 42,
        "memcpy_details": ("ref", "kind_src:pageable kind_dst:device size:4096"),
    }
    built.event("/device:GPU:0", "Stream #14(MemcpyH2D)", "MemcpyH2D", 2, 3, stats=copy_stats)
    spans = convert(built.space(), "LIBRARY", None)
    conv = next(s for s in spans if s["name"] == "Conv2D")
    launch = next(s for s in spans if s["name"] == "cuLaunchKernel")
    kernel = next(s for s in spans if s["name"] == "implicit_convolve_sgemm")
    copy = next(s for s in spans if s["name"] == "MemcpyH2D")
    assert launch["parent_id"] == conv["span_id"] and launch["attributes"]["kind"] == "runtime"
    assert launch["attributes"]["correlation"] == 41
    assert kernel["parent_id"] == conv["span_id"]
    expected = {
        "kind": "kernel",
        "correlation": 41,
        "device": "cuda:0",
        "stream": 13,
        "operator": "Conv2D",
        "layer": "Conv1",
        "grid": [14, 14, 2],
        "block": [256, 1, 1],
    }
    assert {key: kernel["attributes"].get(key) for key in expected} == expected
    assert copy["attributes"]["kind"] == "memcpy" and copy["parent_id"] == spans[0]["span_id"]
    assert (kernel["end_ns"] - kernel["start_ns"]) == 80_000


@pytest.mark.parametrize(
    ("scopes", "expected"),
    [
        ({"conv_1", "bn_1", "mobilenet_1"}, {"conv_1": "conv", "bn_1": "bn"}),  # Keras 3 on TF 2.21
        ({"conv", "bn"}, {"conv": "conv", "bn": "bn"}),  # scopes without a suffix
        ({"conv_1", "conv_1_1"}, {"conv_1": "conv", "conv_1_1": "conv_1"}),  # layers conv and conv_1
    ],
)
def test_layer_scopes_match_names_with_or_without_the_unique_suffix(
    scopes: set[str], expected: dict[str, str]
) -> None:
    assert layer_scopes(scopes, ["conv", "bn", "conv_1"]) == expected


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="FRAMEWORK, LIBRARY"):
        convert(mobilenet_start().space(), "HARDWARE", None)


def test_the_converter_module_imports_no_tensorflow() -> None:
    probe = (
        "import sys, json; import mlscope.runtime.predictors.tensorflow.profile; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert loaded.isdisjoint({"tensorflow", "keras", "torch"})
