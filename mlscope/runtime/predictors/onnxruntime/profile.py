"""ONNX Runtime's session profile as spans: the converter from the events ORT writes with
`enable_profiling` to the FRAMEWORK pass's layer spans and the LIBRARY pass's operator and kernel
spans. Pure: imports no onnxruntime, so it runs (and is tested) anywhere.

What ORT 1.31.1 (CPU build) writes, found by profiling real sessions:

- The file is a JSON list of Chrome-trace "X" events {"cat", "pid", "tid", "dur", "ts", "ph",
  "name", "args"}. "ts" and "dur" are whole microseconds; "ts" counts from the profiler's start,
  which is the session's construction (its first events are "model_loading_uri" and
  "session_initialization" at a few µs). `InferenceSession.get_profiling_start_time_ns()` is that
  start in nanoseconds since the Unix epoch on this build (it fell between `time.time_ns()` read
  before and after the session was built): ORT takes it from `high_resolution_clock`, which is the
  system clock on Linux/libstdc++ but need not be elsewhere, so this converter never trusts it
  alone and aligns each inference to the caller's clock instead (see `ort_profile_to_spans`).
- Each `run()` is a "Session" event "model_run" around a "SequentialExecutor::Execute", and one
  "Node" event "<node name>_kernel_time" per graph node executed, with args "op_name" (the op type
  without its domain), "provider", "node_index", "input_type_shape"/"output_type_shape"
  ([{"float": [1, 3, 224, 224]}, ...]) and memory figures as strings. A weight ORT pre-packed is
  missing from "input_type_shape" (ResNet-18's Gemm lists [1, 512] and [1000], no [1000, 512],
  unless "session.disable_prepacking" is set), so a shape's position is not always its input's.
  Events are listed in the order they ended, so a run's nodes come before its "model_run"; this
  build writes no "fence_before"/"fence_after" events any more (older ones did; they are skipped).
- Every run is profiled, the warm-up runs too: they are the first "model_run" events.
- The node names are those of the optimised graph: at the default level "all", ResNet-18's 20
  convolutions run as NCHWc "Conv" nodes (domain com.microsoft.nchwc) with Relu and the residual
  Add fused in, named after the output they replaced ("/layer1/layer1.0/relu/Relu_output_0_nchwc");
  "op_name" says "Conv", never "FusedConv". 25 nodes run (20 Conv, MaxPool, GlobalAveragePool,
  ReorderOutput, Flatten, Gemm) where the exported graph has 65.
- With a CUDA build compiled with ENABLE_CUDA_PROFILING, the CUDA provider adds CUPTI activity as
  "Kernel" events (pid and tid -1, name = the demangled kernel, args "stream", "grid_x/y/z",
  "block_x/y/z" as strings; memory copies likewise, named "MemcpyHostToDevice"... with grid -1).
  ORT correlates them with the event that was open when they were launched (its external
  correlation id is that event's "ts"), copies that event's "op_name" and "name" into their args
  as "op_name" and "parent_name", and lists them right after it. Read from ORT's source
  (core/common/gpu_profiler_common.h, providers/cuda/cupti_manager.cc); no GPU here to record one.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

from mlscope.runtime.trace.profiled import clock_offset
from mlscope.runtime.trace.spans import make_span, new_span_id

__all__ = ["PROFILE_LEVELS", "ort_profile_to_spans"]

# The passes this converter serves.
PROFILE_LEVELS = ("FRAMEWORK", "LIBRARY")

_NODE_SUFFIX = "_kernel_time"
_RUN_EVENT = "model_run"
_US = 1000
# Nodes that run a subgraph, whose nodes ORT profiles inside them.
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
# ORT truncates every "ts" and "dur" to whole µs, so a run's last node can end up to 1 µs past it.
_ROUNDING_US = 1


def ort_profile_to_spans(
    events: Sequence[dict[str, Any]],
    *,
    trace_id: str,
    parent_id: str,
    offset_ns: int,
    batch_size: int,
    level: str,
    inference_starts_ns: Sequence[int] | None,
    new_id: Callable[[], str] = new_span_id,
    device: str | None = None,
) -> list[dict[str, Any]]:
    """Spans of the traced runs in an ORT session profile.

    Each traced "model_run" becomes a MODEL span "inference" (attributes "pass", "batch_size",
    "iteration") under `parent_id`. Inside it, each node executed becomes, for level FRAMEWORK, a
    layer span (kind "layer", name and "layer" = node name, "layer_type" = op type, "layer_index",
    "provider", "input_shapes", "output_shapes"), and for level LIBRARY an operator span (kind
    "operator", name = op type, "layer" = node name, "provider", shapes, "thread") with, when the
    profile has them, the GPU activity the node launched as kernel spans (kind "kernel",
    "correlation", "device", "stream", "operator", "layer", "grid"/"block") under it. Nodes are
    children of their run, or of the If/Loop/Scan node whose subgraph they ran in.

    Times: `offset_ns + ts µs` is a first guess; when `inference_starts_ns` is given, every time is
    then shifted by the median of (caller's reading - that guess of the run's start) over the
    traced runs, which puts the spans on the caller's clock whatever ORT's clock is. The shift
    includes the median Python-to-ORT call overhead (tens of µs), so runs start at about the
    caller's readings. A run's span is stretched to cover its last node when ORT's µs truncation
    put that node 1 µs past it.

    Args:
        events: the JSON list ORT wrote (`end_profiling()`'s file), in its order.
        trace_id: the trace every span belongs to.
        parent_id: the pass's span, parent of the inference spans.
        offset_ns: epoch ns of the profiler's "ts" 0 (`get_profiling_start_time_ns()`).
        batch_size: samples per inference, an attribute of every span.
        level: "FRAMEWORK" or "LIBRARY", also every span's "pass".
        inference_starts_ns: the caller's clock reading right before each traced run, in order;
            there are fewer of them than runs when warm-up runs were profiled too, and those
            first runs are dropped. None: every run is kept, times are `offset_ns + ts` only.
        new_id: makes span ids.
        device: the device kernels ran on ("cuda:0"), their "device" attribute.

    Returns:
        The spans, each run's inference span followed by its nodes (and kernels) by start time.

    Raises:
        ValueError: an unknown level, or fewer runs in the profile than readings.
    """
    if level not in PROFILE_LEVELS:
        raise ValueError(f"level {level!r} is not one of {', '.join(PROFILE_LEVELS)}")
    runs = sorted(
        (event for event in events if event.get("cat") == "Session" and event.get("name") == _RUN_EVENT),
        key=lambda event: int(event["ts"]),
    )
    if inference_starts_ns is not None:
        if len(runs) < len(inference_starts_ns):
            raise ValueError(
                f"the profile has {len(runs)} model_run events for {len(inference_starts_ns)} traced runs"
            )
        warmup_runs = len(runs) - len(inference_starts_ns)
    else:
        warmup_runs = 0
    shift_ns = _clock_shift(runs[warmup_runs:], inference_starts_ns or (), offset_ns)

    def epoch_ns(ts_us: Any) -> int:
        return offset_ns + int(ts_us) * _US + shift_ns

    common = {"pass": level, "batch_size": batch_size}
    inference_spans: list[dict[str, Any]] = []
    for iteration, run in enumerate(runs[warmup_runs:]):
        start = epoch_ns(run["ts"])
        inference_spans.append(
            make_span(
                trace_id,
                new_id(),
                parent_id,
                "inference",
                "MODEL",
                start,
                start + int(run["dur"]) * _US,
                {**common, "iteration": iteration},
            )
        )
    run_starts = [int(run["ts"]) for run in runs]

    def run_index(event: dict[str, Any]) -> int | None:
        """The traced run an event started in, or None (a warm-up run, or outside every run)."""
        ts = int(event["ts"])
        index = bisect.bisect_right(run_starts, ts) - 1
        if index < warmup_runs or ts > run_starts[index] + int(runs[index]["dur"]) + _ROUNDING_US:
            return None
        return index - warmup_runs

    children: list[list[dict[str, Any]]] = [[] for _ in inference_spans]
    node_spans: dict[int, dict[str, Any]] = {}  # by the id() of its event, for its kernels
    threads: dict[int, Any] = {}  # a node span's thread, by the id() of the span
    last_by_name: dict[str, dict[str, Any]] = {}
    last_node: dict[str, Any] | None = None
    for event in events:
        category, name = event.get("cat"), str(event.get("name", ""))
        if category == "Node" and name.endswith(_NODE_SUFFIX):
            last_by_name[name] = last_node = event
            index = run_index(event)
            if index is None:
                continue
            span = _node_span(event, level, common, trace_id, new_id(), inference_spans[index], epoch_ns)
            node_spans[id(event)] = span
            threads[id(span)] = event.get("tid")
            children[index].append(span)
        elif category == "Kernel" and level == "LIBRARY":
            # ORT lists a kernel right after the event it was launched in and names that event.
            parent_name = (event.get("args") or {}).get("parent_name")
            launcher = last_by_name.get(parent_name) if parent_name else last_node
            if launcher is None:
                continue
            index = run_index(launcher)
            if index is None:
                continue
            parent = node_spans.get(id(launcher), inference_spans[index])
            children[index].append(
                _kernel_span(event, launcher, parent, common, trace_id, new_id(), epoch_ns, device)
            )
        elif category == "Session":
            last_by_name[name] = event

    spans: list[dict[str, Any]] = []
    for inference, members in zip(inference_spans, children, strict=True):
        members.sort(key=lambda span: span["start_ns"])
        nodes = [span for span in members if span["attributes"]["kind"] != "kernel"]
        if level == "FRAMEWORK":
            for layer_index, span in enumerate(nodes):
                span["attributes"]["layer_index"] = layer_index
        _nest_in_control_flow(nodes, threads)
        if nodes:
            inference["end_ns"] = max(inference["end_ns"], max(span["end_ns"] for span in nodes))
        spans.append(inference)
        spans.extend(members)
    return spans


def _clock_shift(traced_runs: Sequence[dict[str, Any]], readings: Sequence[int], offset_ns: int) -> int:
    """The median of (caller's reading - profiler's start) over the traced runs, 0 without readings."""
    starts = {i: offset_ns + int(run["ts"]) * _US for i, run in enumerate(traced_runs)}
    return clock_offset(dict(enumerate(readings)), starts)


def _node_span(
    event: dict[str, Any],
    level: str,
    common: dict[str, Any],
    trace_id: str,
    span_id: str,
    inference: dict[str, Any],
    epoch_ns: Callable[[Any], int],
) -> dict[str, Any]:
    args = event.get("args") or {}
    node = str(event["name"])[: -len(_NODE_SUFFIX)]
    op_type = str(args.get("op_name", node))
    attributes: dict[str, Any] = {**common, "layer": node, "provider": args.get("provider")}
    attributes["input_shapes"] = _shapes(args.get("input_type_shape"))
    attributes["output_shapes"] = _shapes(args.get("output_type_shape"))
    if level == "FRAMEWORK":
        attributes.update(kind="layer", layer_type=op_type)
        name, span_level = node, "FRAMEWORK"
    else:
        attributes.update(kind="operator", thread=event.get("tid"))
        name, span_level = op_type, "LIBRARY"
    start = epoch_ns(event["ts"])
    end = start + int(event["dur"]) * _US
    return make_span(trace_id, span_id, inference["span_id"], name, span_level, start, end, attributes)


def _kernel_span(
    event: dict[str, Any],
    launcher: dict[str, Any],
    parent: dict[str, Any],
    common: dict[str, Any],
    trace_id: str,
    span_id: str,
    epoch_ns: Callable[[Any], int],
    device: str | None,
) -> dict[str, Any]:
    args = event.get("args") or {}
    launched_by_node = launcher.get("cat") == "Node"
    attributes: dict[str, Any] = {
        **common,
        "kind": "kernel",
        # ORT's external correlation id: the start (µs since the profiler's) of the launching event.
        "correlation": int(launcher["ts"]),
        "device": device,
        "stream": _int_or_none(args.get("stream")),
        "operator": args.get("op_name") or (launcher.get("args") or {}).get("op_name"),
        "layer": str(launcher["name"])[: -len(_NODE_SUFFIX)] if launched_by_node else None,
    }
    for key in ("grid", "block"):
        sizes = [_int_or_none(args.get(f"{key}_{axis}")) for axis in "xyz"]
        # Memory copies come as "Kernel" events with every size -1.
        if all(size is not None and size > 0 for size in sizes):
            attributes[key] = sizes
    start = epoch_ns(event["ts"])
    end = start + int(event["dur"]) * _US
    return make_span(
        trace_id, span_id, parent["span_id"], str(event["name"]), "LIBRARY", start, end, attributes
    )


def _nest_in_control_flow(nodes: list[dict[str, Any]], threads: dict[int, Any]) -> None:
    """Put each node of a run inside the innermost control-flow node (If, Loop, Scan: they run a
    subgraph) that contains it on the same thread.

    Not by containment alone: ORT's µs truncation makes a node of zero duration that starts as the
    previous one ends look contained in it.
    """
    containers = [span for span in nodes if _op_type(span) in _CONTROL_FLOW]
    for span in nodes:
        enclosing = [
            other
            for other in containers
            if other is not span
            and threads[id(other)] == threads[id(span)]
            and other["start_ns"] <= span["start_ns"]
            and other["end_ns"] >= span["end_ns"]
        ]
        if enclosing:
            span["parent_id"] = max(enclosing, key=lambda other: other["start_ns"])["span_id"]


def _op_type(span: dict[str, Any]) -> str:
    attributes = span["attributes"]
    return str(attributes.get("layer_type") if attributes["kind"] == "layer" else span["name"])


def _shapes(value: Any) -> list[list[int]] | None:
    """[{"float": [1, 3, 8, 8]}, {"int64": [2]}] as [[1, 3, 8, 8], [2]]; None when not recorded."""
    if not isinstance(value, list):
        return None
    shapes: list[list[int]] = []
    for entry in value:
        dims: list[Any] = next(iter(entry.values()), []) if isinstance(entry, dict) else []
        shapes.append([int(dim) for dim in dims])
    return shapes


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
