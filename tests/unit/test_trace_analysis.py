"""The trace analyses and the Chrome/Perfetto export (mlscope.analysis) on a hand-built trace that
follows the span conventions: an api request, a worker task, a predictor process with a measured
pass, a FRAMEWORK pass at batch sizes 1 and 8, a LIBRARY pass with nested operators, a runtime call and
GPU kernels, and hardware samples. Every expected figure is computed from the durations the trace is
built from. Given / When / Then in each test's comments."""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from typing import Any

import pytest

from mlscope.analysis.timeline import chrome_trace, trace_summary
from mlscope.analysis.traces import (
    BETWEEN_LAYERS,
    NO_LAYER,
    hotspots,
    kernel_breakdown,
    layer_breakdown,
    layers_report,
)
from mlscope.contract.errors import UserError

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
T0 = 1_700_000_000_000_000_000
MS = 1_000_000
# The FRAMEWORK pass: layer (path, type, duration ms) per inference; inference length per batch size.
LAYERS = {
    1: [("conv1", "Conv2d", 3.0), ("relu", "ReLU", 1.0), ("fc", "Linear", 2.0)],
    8: [("conv1", "Conv2d", 5.0), ("relu", "ReLU", 1.0), ("fc", "Linear", 1.5)],
}
INFERENCE_MS = {1: 8.0, 8: 9.0}
INFERENCES = {1: 2, 8: 1}
EVALUATION = {
    "id": "e" * 32,
    "model": {"name": "resnet18"},
    "framework": {"name": "pytorch", "version": "2.3.0"},
    "device": "cuda:0",
    "trace_id": TRACE_ID,
    "trace_level": "FULL",
}


class TraceBuilder:
    """Spans in the store's shape, times given in ms from T0, ids numbered in creation order."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    def add(
        self,
        name: str,
        level: str,
        start_ms: float,
        end_ms: float,
        parent: str | None = None,
        **attributes: Any,
    ) -> str:
        span_id = f"{len(self.spans) + 1:016x}"
        self.spans.append(
            {
                "trace_id": TRACE_ID,
                "span_id": span_id,
                "parent_id": parent,
                "name": name,
                "level": level,
                "start_ns": T0 + round(start_ms * MS),
                "end_ns": T0 + round(end_ms * MS),
                "attributes": attributes,
            }
        )
        return span_id


def framework_pass(trace: TraceBuilder, parent: str, batch_size: int, start_ms: float) -> float:
    """INFERENCES[batch_size] traced inferences, 1 ms apart, each running LAYERS[batch_size] from its
    start with 0.25 ms between layers; returns when the pass ended."""
    at = start_ms
    for iteration in range(INFERENCES[batch_size]):
        common = {"pass": "FRAMEWORK", "batch_size": batch_size}
        inference = trace.add(
            "inference", "MODEL", at, at + INFERENCE_MS[batch_size], parent, iteration=iteration, **common
        )
        layer_at = at + 0.25
        for index, (path, layer_type, ms) in enumerate(LAYERS[batch_size]):
            trace.add(
                path,
                "FRAMEWORK",
                layer_at,
                layer_at + ms,
                inference,
                kind="layer",
                layer_type=layer_type,
                layer=path,
                layer_index=index,
                **common,
            )
            layer_at += ms + 0.25
        at += INFERENCE_MS[batch_size] + 1
    return at


def library_pass(trace: TraceBuilder, parent: str, start_ms: float) -> None:
    """One traced inference at batch 1: conv2d ⊃ convolution (conv1), relu, linear ⊃ addmm ⊃
    cudaLaunchKernel (fc), and a kernel per layer on stream 7."""
    common = {"pass": "LIBRARY", "batch_size": 1}
    s = start_ms
    inference = trace.add("inference", "MODEL", s, s + 10, parent, iteration=0, **common)
    conv2d = trace.add(
        "aten::conv2d",
        "LIBRARY",
        s + 0.5,
        s + 4.0,
        inference,
        kind="operator",
        layer="conv1",
        thread=1,
        **common,
    )
    trace.add(
        "aten::convolution",
        "LIBRARY",
        s + 0.6,
        s + 3.9,
        conv2d,
        kind="operator",
        layer="conv1",
        thread=1,
        **common,
    )
    relu = trace.add(
        "aten::relu",
        "LIBRARY",
        s + 4.5,
        s + 5.0,
        inference,
        kind="operator",
        layer="relu",
        thread=1,
        **common,
    )
    linear = trace.add(
        "aten::linear",
        "LIBRARY",
        s + 5.5,
        s + 8.0,
        inference,
        kind="operator",
        layer="fc",
        thread=1,
        **common,
    )
    addmm = trace.add(
        "aten::addmm", "LIBRARY", s + 5.6, s + 7.8, linear, kind="operator", layer="fc", thread=1, **common
    )
    trace.add(
        "cudaLaunchKernel",
        "LIBRARY",
        s + 6.0,
        s + 6.2,
        addmm,
        kind="runtime",
        correlation=3,
        thread=1,
        **common,
    )
    gpu = {"kind": "kernel", "device": 0, "stream": 7, **common}
    trace.add(
        "implicit_gemm",
        "LIBRARY",
        s + 1.0,
        s + 3.5,
        conv2d,
        operator="aten::convolution",
        layer="conv1",
        correlation=1,
        **gpu,
    )
    trace.add(
        "relu_kernel",
        "LIBRARY",
        s + 4.6,
        s + 4.8,
        relu,
        operator="aten::relu",
        layer="relu",
        correlation=2,
        **gpu,
    )
    trace.add(
        "sgemm", "LIBRARY", s + 6.5, s + 8.5, addmm, operator="aten::addmm", layer="fc", correlation=3, **gpu
    )


def build_trace() -> list[dict[str, Any]]:
    trace = TraceBuilder()
    request = trace.add("POST /api/v1/evaluations", "APPLICATION", 0, 2, None, **{"mlscope.process": "api"})
    task = trace.add("mlscope.evaluate", "APPLICATION", 5, 200, request, **{"mlscope.process": "worker"})
    # The queue wait starts at submission, before the task span: it overlaps it without nesting.
    trace.add("queue_wait", "APPLICATION", 1, 6, task)
    evaluation = trace.add("evaluation", "APPLICATION", 10, 190, task, **{"mlscope.process": "predictor"})
    trace.add("import", "APPLICATION", 10, 12, evaluation)
    trace.add("load", "APPLICATION", 12, 14, evaluation)
    predict = trace.add("predict", "APPLICATION", 14, 30, evaluation, scenario="single_stream", batch_size=1)
    for iteration in range(3):
        start = 14 + 4 * iteration
        trace.add(
            "inference",
            "MODEL",
            start,
            start + 3,
            predict,
            **{"pass": "MODEL", "scenario": "single_stream", "batch_size": 1, "iteration": iteration},
        )
    at = 30.0
    for batch_size in (1, 8):
        profile = trace.add(
            "profile",
            "APPLICATION",
            at,
            at + 40,
            evaluation,
            **{"pass": "FRAMEWORK", "batch_size": batch_size},
        )
        framework_pass(trace, profile, batch_size, at)
        at += 40
    profile = trace.add(
        "profile", "APPLICATION", at, at + 30, evaluation, **{"pass": "LIBRARY", "batch_size": 1}
    )
    library_pass(trace, profile, at + 1)
    for index, sample_at in enumerate((at, at + 10)):
        sample = {
            "kind": "cpu",
            "cpu_percent": 50.0 + index,
            "cpu_mhz": 2400.0,
            "per_cpu_percent": [40.0, 60.0],
            "pass": "LIBRARY",
            "batch_size": 1,
        }
        trace.add("cpu", "HARDWARE", sample_at, sample_at + 10, profile, **sample)
    trace.add(
        "gpu:0",
        "HARDWARE",
        at,
        at + 10,
        profile,
        kind="gpu",
        gpu_index=0,
        utilization_gpu=80,
        power_w=120.5,
        throttle_reasons=[],
        batch_size=1,
    )
    trace.add("store", "APPLICATION", 195, 199, task)
    return trace.spans


@pytest.fixture
def spans() -> list[dict[str, Any]]:
    return build_trace()


def rows_of(rows: list[dict[str, Any]], batch_size: int) -> dict[str, dict[str, Any]]:
    return {row["key"]: row for row in rows if row["batch_size"] == batch_size}


# ----- layer breakdown ---------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 8])
def test_layer_shares_are_of_the_framework_pass_inferences_with_the_rest_between_layers(
    spans: list[dict[str, Any]], batch_size: int
) -> None:
    # Given the trace, whose measured pass also has MODEL inference spans (which must not count)
    # When the FRAMEWORK pass is broken down by layer type
    rows = layer_breakdown(spans, group_by="layer_type")

    # Then each layer type's share is its time over the pass's inference time at that batch size
    got = rows_of(rows, batch_size)
    inferences = INFERENCES[batch_size]
    inference_ms = INFERENCE_MS[batch_size] * inferences
    layers_ms = 0.0
    for _, layer_type, ms in LAYERS[batch_size]:
        row = got[layer_type]
        assert row["calls"] == inferences
        assert row["total_ms"] == pytest.approx(ms * inferences)
        assert row["mean_ms"] == pytest.approx(ms)
        assert row["per_inference_ms"] == pytest.approx(ms)
        assert row["share"] == pytest.approx(ms * inferences / inference_ms)
        layers_ms += ms * inferences
    # And the framework's time between layers is the remainder, so the shares sum to 1
    between = got[BETWEEN_LAYERS]
    assert between["calls"] == inferences
    assert between["total_ms"] == pytest.approx(inference_ms - layers_ms)
    assert sum(row["share"] for row in got.values()) == pytest.approx(1.0)
    assert set(got) == {layer_type for _, layer_type, _ in LAYERS[batch_size]} | {BETWEEN_LAYERS}


def test_layer_rows_come_by_batch_size_then_largest_total_first(spans: list[dict[str, Any]]) -> None:
    # When the breakdown is grouped by layer path
    rows = layer_breakdown(spans, group_by="layer")

    # Then batch 1's rows precede batch 8's, each block sorted by total, descending
    sizes = [row["batch_size"] for row in rows]
    assert sizes == sorted(sizes) and set(sizes) == {1, 8}
    for batch_size in (1, 8):
        totals = [row["total_ms"] for row in rows if row["batch_size"] == batch_size]
        assert totals == sorted(totals, reverse=True)
    assert set(rows_of(rows, 1)) == {path for path, _, _ in LAYERS[1]} | {BETWEEN_LAYERS}


def test_layer_breakdown_refuses_an_unknown_grouping_naming_the_allowed_ones(
    spans: list[dict[str, Any]],
) -> None:
    with pytest.raises(UserError) as raised:
        layer_breakdown(spans, group_by="module")
    assert raised.value.field == "group_by"
    assert "layer_type, name, layer" in raised.value.message


# ----- hotspots and kernels ----------------------------------------------------------------------------


def test_operator_hotspots_rank_cpu_work_by_total_with_self_time_and_share_of_the_pass(
    spans: list[dict[str, Any]],
) -> None:
    # When the LIBRARY pass's operators are ranked
    rows = hotspots(spans, level="LIBRARY", n=10)

    # Then operators and the runtime call are ranked by total, kernels are left to kernel_breakdown
    keys = [row["key"] for row in rows]
    by_key = {row["key"]: row for row in rows}
    totals = [row["total_ms"] for row in rows]
    assert totals == sorted(totals, reverse=True)
    assert keys[0] == "aten::conv2d"
    assert "cudaLaunchKernel" in keys
    assert not {"implicit_gemm", "sgemm", "relu_kernel"} & set(keys)
    # And self time excludes nested operators; shares are of the pass's one 10 ms inference
    conv2d = by_key["aten::conv2d"]
    assert conv2d["total_ms"] == pytest.approx(3.5)
    assert conv2d["self_ms"] == pytest.approx(3.5 - 3.3)
    assert conv2d["share"] == pytest.approx(3.5 / 10)
    assert by_key["aten::addmm"]["self_ms"] == pytest.approx(2.2 - 0.2)
    assert all(row["level"] == "LIBRARY" and row["batch_size"] == 1 for row in rows)


def test_hotspots_by_layer_count_nested_operators_of_a_layer_once(spans: list[dict[str, Any]]) -> None:
    # When operators are grouped by the layer they ran in, top 2 only
    rows = hotspots(spans, level="LIBRARY", n=2, group_by="layer")

    # Then conv1's time is conv2d's (its nested convolution is inside it), and fc's is linear's
    assert [row["key"] for row in rows] == ["conv1", "fc"]
    assert rows[0]["total_ms"] == pytest.approx(3.5) and rows[0]["calls"] == 1
    assert rows[1]["total_ms"] == pytest.approx(2.5)
    # And self time adds up the operators' own time in the layer (the launch call names no layer)
    assert rows[1]["self_ms"] == pytest.approx((2.5 - 2.2) + (2.2 - 0.2))
    unlabelled = hotspots(spans, level="LIBRARY", group_by="layer")[-1]
    assert (unlabelled["key"], unlabelled["total_ms"]) == (NO_LAYER, pytest.approx(0.2))


def test_framework_hotspots_rank_layers_per_batch_size(spans: list[dict[str, Any]]) -> None:
    rows = hotspots(spans, level="FRAMEWORK", n=1, group_by="layer_type")
    assert [(row["batch_size"], row["key"]) for row in rows] == [(1, "Conv2d"), (8, "Conv2d")]
    assert rows[1]["share"] == pytest.approx(5.0 / INFERENCE_MS[8])


def test_hotspots_refuse_a_level_without_a_pass(spans: list[dict[str, Any]]) -> None:
    with pytest.raises(UserError) as raised:
        hotspots(spans, level="MODEL")
    assert raised.value.field == "level" and "LIBRARY, FRAMEWORK" in raised.value.message


def test_kernel_time_is_broken_down_by_kernel_and_by_layer(spans: list[dict[str, Any]]) -> None:
    # When the kernels are broken down
    rows = kernel_breakdown(spans)

    # Then by kernel name and by layer, each block's shares of kernel time summing to 1
    kernel_ms = 2.5 + 0.2 + 2.0
    by_kernel = {row["key"]: row for row in rows if row["by"] == "kernel"}
    by_layer = {row["key"]: row for row in rows if row["by"] == "layer"}
    assert list(by_kernel) == ["implicit_gemm", "sgemm", "relu_kernel"]
    assert by_kernel["sgemm"]["share"] == pytest.approx(2.0 / kernel_ms)
    assert by_layer["fc"]["total_ms"] == pytest.approx(2.0)
    assert by_layer["relu"]["calls"] == 1
    for block in (by_kernel, by_layer):
        assert sum(row["share"] for row in block.values()) == pytest.approx(1.0)


def test_a_trace_without_kernels_has_no_kernel_rows(spans: list[dict[str, Any]]) -> None:
    cpu_only = [span for span in spans if span["attributes"].get("kind") != "kernel"]
    assert kernel_breakdown(cpu_only) == []
    assert layers_report(cpu_only)["kernels"] == []


def test_the_layers_report_picks_the_deepest_traced_pass_for_hotspots(spans: list[dict[str, Any]]) -> None:
    assert layers_report(spans, top=3)["hotspot_level"] == "LIBRARY"
    no_library = [span for span in spans if span["level"] != "LIBRARY"]
    report = layers_report(no_library, top=3)
    assert report["hotspot_level"] == "FRAMEWORK"
    assert {row["key"] for row in report["hotspots"]} == {"conv1", "fc", "relu"}


# ----- summary and Chrome export -----------------------------------------------------------------------


def test_the_summary_counts_levels_and_lists_the_application_timeline(spans: list[dict[str, Any]]) -> None:
    summary = trace_summary(reversed(spans))
    assert summary["count"] == len(spans)
    assert list(summary["levels"]) == ["APPLICATION", "MODEL", "FRAMEWORK", "LIBRARY", "HARDWARE"]
    assert summary["levels"]["HARDWARE"] == 3
    timeline = summary["timeline"]
    assert [entry["offset_ms"] for entry in timeline] == sorted(entry["offset_ms"] for entry in timeline)
    first = timeline[0]
    assert (first["name"], first["process"], first["depth"], first["offset_ms"]) == (
        "POST /api/v1/evaluations",
        "api",
        0,
        0.0,
    )
    load = next(entry for entry in timeline if entry["name"] == "load")
    assert (load["process"], load["depth"], load["duration_ms"]) == ("predictor", 3, pytest.approx(2.0))


def x_events(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [event for event in document["traceEvents"] if event["ph"] == "X"]


def assert_well_nested(events: list[dict[str, Any]]) -> None:
    """Within each (pid, tid), two events either nest or do not overlap (a viewer's call stack)."""
    lanes: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        lanes[(event["pid"], event["tid"])].append(event)
    tolerance = 1e-6
    for lane in lanes.values():
        lane.sort(key=lambda e: (e["ts"], -e["dur"]))
        ends: list[float] = []
        for event in lane:
            while ends and ends[-1] <= event["ts"] + tolerance:
                ends.pop()
            end = event["ts"] + event["dur"]
            assert not ends or end <= ends[-1] + tolerance, f"{event['name']} overlaps its lane's open event"
            ends.append(end)


def test_the_chrome_trace_follows_the_trace_event_format(spans: list[dict[str, Any]]) -> None:
    # When the trace is exported
    document = chrome_trace(EVALUATION, spans)

    # Then it is the JSON Object Format, JSON-able, with the evaluation in otherData
    assert json.loads(json.dumps(document)) == document
    assert document["displayTimeUnit"] == "ms"
    assert document["otherData"]["evaluation_id"] == EVALUATION["id"]
    assert document["otherData"]["trace_id"] == TRACE_ID
    assert document["otherData"]["origin_unix_ns"] == T0
    # And every span but the hardware samples is a complete event, at or after the origin
    events = x_events(document)
    assert len(events) == len(spans) - 3
    assert all(event["ts"] >= 0 and event["dur"] >= 0 for event in events)
    # And times keep their nanoseconds: µs floats that give back each span's exact offset
    by_id = {span["span_id"]: span for span in spans}
    for event in events:
        span = by_id[event["args"]["span_id"]]
        assert round(event["ts"] * 1000) == span["start_ns"] - T0
        assert round(event["dur"] * 1000) == span["end_ns"] - span["start_ns"]
        assert event["args"]["level"] == span["level"]
        assert event["args"]["parent_id"] == span["parent_id"]
    # And no lane holds partially overlapping events
    assert_well_nested(events)


def test_the_chrome_trace_names_one_process_per_mlscope_process_and_its_lanes(
    spans: list[dict[str, Any]],
) -> None:
    document = chrome_trace(EVALUATION, spans)
    metadata = [event for event in document["traceEvents"] if event["ph"] == "M"]
    processes = {e["pid"]: e["args"]["name"] for e in metadata if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in metadata if e["name"] == "thread_name"}
    assert sorted(processes.values()) == ["mlscope api", "mlscope predictor", "mlscope worker"]
    # Every event's lane is named; spans inherit the process of their nearest labelled ancestor
    events = x_events(document)
    assert {(e["pid"], e["tid"]) for e in events} <= set(threads)
    pid = {name: p for p, name in processes.items()}
    lane_of = {e["name"]: (processes[e["pid"]], threads[(e["pid"], e["tid"])]) for e in events}
    assert lane_of["load"] == ("mlscope predictor", "APPLICATION")
    assert lane_of["conv1"] == ("mlscope predictor", "FRAMEWORK")
    assert lane_of["aten::addmm"] == ("mlscope predictor", "LIBRARY thread 1")
    assert lane_of["sgemm"] == ("mlscope predictor", "kernels device 0 stream 7")
    # And the worker's queue wait, overlapping its task span without nesting, gets a lane of its own
    assert lane_of["mlscope.evaluate"][0] == lane_of["queue_wait"][0] == "mlscope worker"
    assert lane_of["queue_wait"][1] != lane_of["mlscope.evaluate"][1]
    assert all(tid != 0 for p, tid in threads if p == pid["mlscope worker"])


def test_hardware_samples_become_one_numeric_counter_per_figure(spans: list[dict[str, Any]]) -> None:
    document = chrome_trace(EVALUATION, spans)
    counters = [event for event in document["traceEvents"] if event["ph"] == "C"]
    names = {event["name"] for event in counters}
    assert {"cpu cpu_percent", "cpu cpu_mhz", "gpu:0 utilization_gpu", "gpu:0 power_w"} == names
    cpu = sorted((e for e in counters if e["name"] == "cpu cpu_percent"), key=lambda e: e["ts"])
    assert [e["args"]["value"] for e in cpu] == [50.0, 51.0]
    assert cpu[1]["ts"] - cpu[0]["ts"] == pytest.approx(10 * 1000)
    assert all(isinstance(e["args"]["value"], (int, float)) and e["ts"] >= 0 for e in counters)


def test_an_empty_trace_exports_as_a_valid_empty_document() -> None:
    document = chrome_trace({**EVALUATION, "trace_id": None}, [])
    assert document["traceEvents"] == []
    assert document["otherData"]["span_count"] == 0 and document["otherData"]["trace_id"] is None
    assert layer_breakdown([]) == [] and hotspots([]) == [] and kernel_breakdown([]) == []
    assert trace_summary([])["timeline"] == []


def test_a_200k_span_trace_exports_and_analyses_in_seconds() -> None:
    # Given 200k spans: 5000 traced inferences of 39 layers each (a ResNet-sized FRAMEWORK pass)
    trace = TraceBuilder()
    profile = trace.add("profile", "APPLICATION", 0, 5000 * 10, None, **{"mlscope.process": "predictor"})
    for iteration in range(5000):
        start = iteration * 10.0
        inference = trace.add(
            "inference", "MODEL", start, start + 9, profile, **{"pass": "FRAMEWORK", "batch_size": 1}
        )
        for index in range(39):
            at = start + 0.1 + index * 0.2
            trace.add(
                f"layer{index}",
                "FRAMEWORK",
                at,
                at + 0.15,
                inference,
                kind="layer",
                layer_type=f"T{index % 4}",
                batch_size=1,
            )
    assert len(trace.spans) > 200_000

    # When it is exported and broken down
    began = time.perf_counter()
    document = chrome_trace(EVALUATION, trace.spans)
    rows = layer_breakdown(trace.spans)
    elapsed = time.perf_counter() - began

    # Then it took seconds, not minutes (a shared 2-core machine: a generous bound), and is well formed
    assert elapsed < 30, f"took {elapsed:.1f}s"
    assert len(x_events(document)) == len(trace.spans)
    assert_well_nested(x_events(document))
    assert math.isclose(sum(row["share"] for row in rows), 1.0)
