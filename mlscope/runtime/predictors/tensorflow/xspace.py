"""The XSpace TensorFlow's profiler writes, read into the events a conversion to spans needs: one
pass over its planes, every time put on the caller's clock. Pure: imports no TensorFlow.

The XSpace (tsl/profiler/protobuf/xplane.proto; in TF 2.21 the Python classes are
`tensorflow.tsl.profiler.protobuf.xplane_pb2`), as the converter takes it: the message turned into
a dict by `google.protobuf.json_format.MessageToDict(space, preserving_proto_field_name=True)`, so
64-bit integers are strings, map keys are strings and fields at their default value (0, "") are
absent. What TF 2.21 (tensorflow-cpu) wrote for Keras ResNet-50 and MobileNetV2 in a `tf.function`:

- "planes": "/host:CPU" (the host tracer), "Task Environment" (plane stats "profile_start_time"
  and "profile_stop_time": uint64 epoch ns), and with a GPU "/device:GPU:<n>" (CUPTI activity, one
  line per stream named "Stream #<id>(Kernel,...)") and "/host:CUPTI" (driver API calls such as
  cuLaunchKernel on lines "Host Threads/<tid>"). Each plane has "event_metadata" and
  "stat_metadata" maps (id -> {"id", "name", "display_name"}) and "lines".
- A line has "id", "name" ("python", "tf_Compute/<id>" for the inter-op pool, "tf_numa_-1_Eigen/..."
  for the intra-op pool), "timestamp_ns" and "events". An event has "metadata_id", "offset_ps"
  (from the line's timestamp), "duration_ps" and "stats" ([{"metadata_id", one of "int64_value",
  "uint64_value", "double_value", "str_value", "ref_value" (a stat_metadata id whose name is the
  value)}]). The profiler normalises line timestamps to "profile_start_time" (the lines said
  13347 ns), so an event starts at profile_start_time + timestamp_ns + offset_ps / 1000 (epoch ns).
- A TF op executed is an event whose metadata "name" is "<node name>:<op type>" and
  "display_name" the op type: "resnet50_1/conv1_conv_1/convolution:_MklNativeFusedConv2D". The
  node names are the function graph's (grappler keeps a node's name when it rewrites its type;
  nodes it adds are named inside the same scope, "…/conv2_block1_add_1/ArithmeticOptimizer/
  AddOpsRewrite_Add"). Keras 3 puts each layer's ops in a name scope of the layer's name, which
  the function graph made unique with a suffix: layer "conv1_conv" ran as scope "conv1_conv_1",
  the model "resnet50" as "resnet50_1". Ops run on several threads at once (the executor's
  inter-op pool), and ops that depend on weights only (ReadVariableOp; BatchNormalization's
  rsqrt(variance + ε)·γ) run whenever a thread is free, often right at the function's start.
  Op events carry no shapes. oneDNN primitives below an op are not events. Ops the executor has
  learnt are cheap (its cost estimate: ReadVariableOp, Rsqrt, Sub after a few hundred runs of the
  function; all of them are in the first runs) are traced at TraceMe level 3 only, and the host
  tracer records level 2 (a MobileNetV2 inference had 262 op events after 8 runs, 201 after 200), so
  the LIBRARY pass shows the ops that cost time, not every node.
- `tf.profiler.experimental.Trace(name)` records an event "name" on the calling thread's line
  ("python"): `capture_xspace` wraps each traced inference in "mlscope.inference#<i>".
- GPU events (not recorded here: this machine has no GPU; shapes from TF/XLA's
  backends/profiler/gpu/cupti_collector.cc): a kernel is named by its demangled name, with stats
  "correlation_id" (shared with its launch on "/host:CUPTI"), "kernel_details" (a string holding
  "grid:x,y,z block:x,y,z"), "tf_op" (the "<node name>:<op type>" that launched it), copies
  "memcpy_details", fills "memset_details".
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlscope.runtime.trace.profiled import clock_offset

__all__ = ["INFERENCE_ANNOTATION", "OP_EVENT", "ProfileEvents", "XEvent", "as_int"]

INFERENCE_ANNOTATION = "mlscope.inference#"
# A TF op executed: "<node name>:<op type>".
OP_EVENT = re.compile(r"(?P<node>[^:\s]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)")
_GPU_PLANE = re.compile(r"/device:GPU:(?P<ordinal>\d+)")
_STAT_VALUES = ("int64_value", "uint64_value", "double_value", "str_value", "bytes_value")


@dataclass
class XEvent:
    """One XEvent with its times on the profiler's clock (epoch ns, before the shift)."""

    name: str
    display_name: str
    start_ns: int
    end_ns: int
    line_id: int
    line_name: str
    stats: dict[str, Any] = field(default_factory=dict)
    node: str = ""  # a TF op's node name and type, from its name "<node>:<type>"
    op_type: str = ""


def as_int(value: Any, default: int = 0) -> int:
    """An XSpace integer (64-bit ones are strings), `default` for what is not one."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _stat_value(stat: Mapping[str, Any], stat_names: Mapping[str, str]) -> Any:
    if "ref_value" in stat:
        return stat_names.get(str(stat["ref_value"]), "")
    for key in _STAT_VALUES:
        if key in stat:
            return stat[key]
    return 0  # a field at its default value is absent from the dict


def _stats(stats: Sequence[Mapping[str, Any]], stat_names: Mapping[str, str]) -> dict[str, Any]:
    return {stat_names.get(str(s.get("metadata_id", 0)), ""): _stat_value(s, stat_names) for s in stats}


def _profile_start_ns(xspace: Mapping[str, Any]) -> int:
    """The "profile_start_time" stat of the "Task Environment" plane, 0 when absent."""
    for plane in xspace.get("planes", []):
        names = {key: meta.get("name", "") for key, meta in (plane.get("stat_metadata") or {}).items()}
        start = _stats(plane.get("stats", []), names).get("profile_start_time")
        if start is not None:
            return as_int(start)
    return 0


def _plane_events(plane: Mapping[str, Any], base_ns: int) -> Iterator[XEvent]:
    metadata = plane.get("event_metadata") or {}
    stat_names = {key: meta.get("name", "") for key, meta in (plane.get("stat_metadata") or {}).items()}
    for line in plane.get("lines", []):
        line_start = base_ns + as_int(line.get("timestamp_ns"))
        for event in line.get("events", []):
            meta = metadata.get(str(event.get("metadata_id", 0))) or {}
            start = line_start + round(as_int(event.get("offset_ps")) / 1000)
            yield XEvent(
                name=str(meta.get("name", "")),
                display_name=str(meta.get("display_name", "")),
                start_ns=start,
                end_ns=start + round(as_int(event.get("duration_ps")) / 1000),
                line_id=as_int(line.get("id")),
                line_name=str(line.get("name", "")),
                stats=_stats(event.get("stats", []), stat_names),
            )


def _iteration(name: str) -> int | None:
    suffix = name[len(INFERENCE_ANNOTATION) :] if name.startswith(INFERENCE_ANNOTATION) else ""
    return int(suffix) if suffix.isdigit() else None


class ProfileEvents:
    """The events of an XSpace a conversion uses, by kind, on the caller's clock: the inference
    annotations by iteration, the ops, the driver calls (launches) and the device events."""

    def __init__(self, xspace: Mapping[str, Any], readings: Sequence[int] | None) -> None:
        base_ns = _profile_start_ns(xspace)
        self.annotations: dict[int, XEvent] = {}
        self.ops: list[XEvent] = []
        self.launches: list[XEvent] = []
        self.device: list[tuple[XEvent, str]] = []
        for plane in xspace.get("planes", []):
            name = str(plane.get("name", ""))
            gpu = _GPU_PLANE.fullmatch(name)
            for event in _plane_events(plane, base_ns):
                if gpu is not None:
                    self.device.append((event, f"cuda:{gpu['ordinal']}"))
                elif not name.startswith("/host:"):
                    continue
                elif (iteration := _iteration(event.name)) is not None:
                    self.annotations.setdefault(iteration, event)
                elif op := OP_EVENT.fullmatch(event.name):
                    event.node, event.op_type = op["node"], event.display_name or op["type"]
                    self.ops.append(event)
                elif "correlation_id" in event.stats:
                    self.launches.append(event)
        shift = self._shift(readings or ())
        for event in self._all_events():
            event.start_ns += shift
            event.end_ns += shift

    def _all_events(self) -> Iterator[XEvent]:
        yield from self.annotations.values()
        yield from self.ops
        yield from self.launches
        yield from (event for event, _ in self.device)

    def _shift(self, readings: Sequence[int]) -> int:
        """What puts the profiler's times on the caller's clock (`clock_offset`)."""
        starts = {i: event.start_ns for i, event in self.annotations.items()}
        return clock_offset(dict(enumerate(readings)), starts)
