"""TensorFlow's profiler as spans: the capture (`tf.profiler.experimental` around the traced
inferences, read back as an XSpace) and the pure converter from that XSpace to the FRAMEWORK
pass's Keras layer spans and the LIBRARY pass's operator spans (and, on a GPU, runtime calls and
kernels).

Importing this module imports no TensorFlow: `capture_xspace` imports it when it runs, and the
converter never does, so it is tested, and reusable on a saved profile, anywhere. What the XSpace
holds, and how Keras names the ops of its layers: `xspace`.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from mlscope.runtime.predictors.tensorflow.xspace import (
    INFERENCE_ANNOTATION,
    OP_EVENT,
    ProfileEvents,
    XEvent,
    as_int,
)
from mlscope.runtime.trace.profiled import ProfiledPass
from mlscope.runtime.trace.spans import nest_by_containment, new_span_id

__all__ = ["INFERENCE_ANNOTATION", "PROFILE_LEVELS", "capture_xspace", "layer_scopes", "xspace_to_spans"]

# The passes this converter serves.
PROFILE_LEVELS = ("FRAMEWORK", "LIBRARY")

_UNIQUE_SUFFIX = re.compile(r"(?P<base>.+)_\d+")
_STREAM = re.compile(r"Stream #(?P<id>\d+)")
_GRID = re.compile(r"grid:(\d+),(\d+),(\d+)")
_BLOCK = re.compile(r"block:(\d+),(\d+),(\d+)")


# -- Capture (imports TensorFlow when called) -----------------------------------------------------


def capture_xspace(run: Callable[[], Any], profiled: ProfiledPass) -> tuple[dict[str, Any], list[int]]:
    """Profile the pass's traced inferences (after its warm-up ones, unprofiled) with TF's profiler.

    Each traced inference is wrapped in a `Trace("mlscope.inference#<i>")` annotation, and the
    tracer's clock is read right before it, so the converter can put the profiler's times on that
    clock.

    Args:
        run: one inference, returning when its results are ready.
        profiled: the inference counts, and the tracer whose clock is read.

    Returns:
        The XSpace as a dict (see `xspace`), and the clock's reading before each traced inference.

    Raises:
        RuntimeError: the profiler wrote no XSpace.
    """
    import tensorflow as tf
    from google.protobuf.json_format import MessageToDict
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    clock = profiled.tracer.clock
    profiled.warm_up(run)
    readings: list[int] = []
    with tempfile.TemporaryDirectory(prefix="mlscope-tf-profile-") as folder:
        # No ProfilerOptions: TF 2.21 ignores every level passed (the session logs "host_tracer_level
        # expects an i value" for an int, numpy int, float or str alike), so the defaults apply:
        # host level 2, no Python tracer, the device tracer on.
        tf.profiler.experimental.start(folder)
        try:
            for iteration in range(profiled.iterations):
                readings.append(clock.now())
                with tf.profiler.experimental.Trace(f"{INFERENCE_ANNOTATION}{iteration}"):
                    run()
        finally:
            tf.profiler.experimental.stop()
        written = sorted(Path(folder).rglob("*.xplane.pb"))
        if not written:
            raise RuntimeError("TensorFlow's profiler wrote no .xplane.pb file")
        space = xplane_pb2.XSpace()
        space.ParseFromString(written[-1].read_bytes())
    return MessageToDict(space, preserving_proto_field_name=True), readings


# -- Layer scopes (pure) --------------------------------------------------------------------------


def layer_scopes(scopes: Collection[str], layer_names: Collection[str]) -> dict[str, str]:
    """Which name scope holds which Keras layer's ops.

    A layer's scope is its name, or its name with a "_<n>" suffix the function graph added to make
    it unique (Keras 3 on TF 2.21: every layer's). A scope that could be both (layers "conv" and
    "conv_1" exist, scope "conv_1" was seen) is "conv"'s when the graph suffixes scopes (a scope
    "conv_1_<n>" was seen, or another scope is a layer's only once its suffix is taken off), else
    "conv_1"'s own.

    Args:
        scopes: name-scope components seen in op names.
        layer_names: the model's layer names.

    Returns:
        Layer name by scope, for the scopes that are a layer's.
    """
    names = set(layer_names)
    seen = set(scopes)
    bases = {scope: match["base"] for scope in seen if (match := _UNIQUE_SUFFIX.fullmatch(scope))}
    suffixing = any(scope not in names and base in names for scope, base in bases.items())
    found: dict[str, str] = {}
    for scope in seen:
        base = bases.get(scope)
        if scope in names and base in names:
            suffixed = suffixing or scope in bases.values()
            found[scope] = str(base) if suffixed else scope
        elif scope in names:
            found[scope] = scope
        elif base in names:
            found[scope] = str(base)
    return found


# -- The converter (pure) -------------------------------------------------------------------------


def _shapes(shapes: Any, batch_size: int) -> list[list[int]] | None:
    """Keras shapes with the batch axis unknown ([[None, 7, 7, 2048]]) for this batch size."""
    if not isinstance(shapes, list):
        return None
    return [[batch_size if dim is None else int(dim) for dim in shape] for shape in shapes]


def xspace_to_spans(
    xspace: Mapping[str, Any],
    *,
    trace_id: str,
    parent_id: str,
    level: str,
    batch_size: int,
    inference_starts_ns: Sequence[int] | None,
    layers: Mapping[str, Mapping[str, Any]] | None = None,
    parameter_ops: Collection[str] = (),
    new_id: Callable[[], str] = new_span_id,
) -> list[dict[str, Any]]:
    """Spans of the traced inferences in a TF profile (format: this module's docstring).

    Each "mlscope.inference#<i>" annotation becomes a MODEL span "inference" (attributes "pass",
    "batch_size", "iteration") under `parent_id`; an op event belongs to the inference its start
    falls in (others are dropped). An op's layer is the first component of its node name that is a
    layer's scope (`layer_scopes`).

    FRAMEWORK: one layer span per Keras layer per inference (kind "layer", name and "layer" = the
    layer's name, "layer_type" = its class, "layer_index" = order of start within the inference,
    "input_shapes"/"output_shapes" from `layers`, "operators" = the ops it spans), from the start of
    its first op to the end of its last, leaving out `parameter_ops` (ops that depend on weights
    only run whenever the executor has a free thread, often at the function's start, so they do
    not say when the layer ran on this input; they stay visible as operators in the LIBRARY pass).
    A layer whose every op is a parameter op spans those. Layers on parallel branches overlap.

    LIBRARY: one operator span per op event (kind "operator", name = op type as executed, "op" =
    node name, "layer", "thread" = the profiler's line id), parent its inference or the op that
    contains it on the same thread; on a GPU also runtime spans (kind "runtime": the driver calls
    with a "correlation") and kernel/memcpy/memset spans (kind "kernel"... with "correlation",
    "device", "stream", "operator" = launching op's type, "layer", "grid"/"block"), parent the op
    that launched them.

    Args:
        xspace: the XSpace as a dict (`capture_xspace`).
        trace_id: the trace every span belongs to.
        parent_id: the pass's span, parent of the inference spans.
        level: "FRAMEWORK" or "LIBRARY", also every span's "pass".
        batch_size: samples per inference, an attribute of every span.
        inference_starts_ns: the caller's clock reading before each traced inference, in order;
            every time is shifted by the median of (reading - annotation start). None: no shift.
        layers: layer name -> {"layer_type", "input_shapes", "output_shapes"} (shapes with None
            for the batch axis); None or empty: no op has a layer.
        parameter_ops: node names of ops that do not depend on the model's inputs.
        new_id: makes span ids.

    Returns:
        The spans, each inference followed by its members by start time.

    Raises:
        ValueError: an unknown level.
    """
    if level not in PROFILE_LEVELS:
        raise ValueError(f"level {level!r} is not one of {', '.join(PROFILE_LEVELS)}")
    converted = ProfileEvents(xspace, inference_starts_ns)
    layers = layers or {}
    scopes = {part for op in converted.ops for part in op.node.split("/")[:-1]}
    build = _Builder(
        trace_id, new_id, {"pass": level, "batch_size": batch_size}, layer_scopes(scopes, layers)
    )
    for iteration in sorted(converted.annotations):
        build.inference(parent_id, converted.annotations[iteration], iteration)
    if level == "FRAMEWORK":
        build.layers(converted.ops, layers, parameter_ops, batch_size)
    else:
        build.operators(converted)
    result: list[dict[str, Any]] = []
    for inference, members in zip(build.inferences, build.members, strict=True):
        members.sort(key=lambda span: (span["start_ns"], -span["end_ns"]))
        result.append(inference)
        result.extend(members)
    return result


class _Builder:
    """Makes one conversion's spans: its inferences, and the members of each."""

    def __init__(
        self, trace_id: str, new_id: Callable[[], str], common: dict[str, Any], scope_layer: dict[str, str]
    ) -> None:
        self.trace_id, self.new_id, self.common, self.scope_layer = trace_id, new_id, common, scope_layer
        self.inferences: list[dict[str, Any]] = []
        self.members: list[list[dict[str, Any]]] = []

    def span(
        self, parent_id: str, name: str, level: str, start_ns: int, end_ns: int, attributes: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "span_id": self.new_id(),
            "parent_id": parent_id,
            "name": name,
            "level": level,
            "start_ns": int(start_ns),
            "end_ns": int(max(end_ns, start_ns)),
            "attributes": {**self.common, **attributes},
        }

    def inference(self, parent_id: str, annotation: XEvent, iteration: int) -> None:
        attributes = {"iteration": iteration}
        span = self.span(parent_id, "inference", "MODEL", annotation.start_ns, annotation.end_ns, attributes)
        self.inferences.append(span)
        self.members.append([])

    def inference_at(self, time_ns: int) -> int | None:
        """The index of the inference running at `time_ns`, or None."""
        return next(
            (i for i, s in enumerate(self.inferences) if s["start_ns"] <= time_ns <= s["end_ns"]), None
        )

    def layer_of(self, node: str) -> str | None:
        """The layer whose scope is the first layer scope in a node's name, or None."""
        return next(
            (self.scope_layer[part] for part in node.split("/")[:-1] if part in self.scope_layer), None
        )

    def layers(
        self,
        ops: Sequence[XEvent],
        layers: Mapping[str, Mapping[str, Any]],
        parameter_ops: Collection[str],
        batch_size: int,
    ) -> None:
        """One layer span per (inference, layer) over the layer's ops (see `xspace_to_spans`)."""
        grouped: dict[tuple[int, str], list[tuple[XEvent, bool]]] = {}
        for op in ops:
            index, layer = self.inference_at(op.start_ns), self.layer_of(op.node)
            if index is not None and layer is not None:
                grouped.setdefault((index, layer), []).append((op, op.node in parameter_ops))
        for (index, layer), members in grouped.items():
            timed = [op for op, parameter in members if not parameter] or [op for op, _ in members]
            facts = layers.get(layer) or {}
            attributes = {
                "kind": "layer",
                "layer_type": facts.get("layer_type"),
                "layer": layer,
                "operators": len(timed),
                "input_shapes": _shapes(facts.get("input_shapes"), batch_size),
                "output_shapes": _shapes(facts.get("output_shapes"), batch_size),
            }
            start, end = min(op.start_ns for op in timed), max(op.end_ns for op in timed)
            parent = self.inferences[index]["span_id"]
            self.members[index].append(self.span(parent, layer, "FRAMEWORK", start, end, attributes))
        for spans in self.members:
            spans.sort(key=lambda span: (span["start_ns"], span["end_ns"]))
            for layer_index, span in enumerate(spans):
                span["attributes"]["layer_index"] = layer_index

    def operators(self, converted: ProfileEvents) -> None:
        """The LIBRARY pass's operator, runtime and device spans (see `xspace_to_spans`)."""
        operators: list[dict[str, Any]] = []
        by_node: dict[str, list[dict[str, Any]]] = {}
        for op in converted.ops:
            index = self.inference_at(op.start_ns)
            if index is None:
                continue
            attributes: dict[str, Any] = {
                "kind": "operator",
                "op": op.node,
                "layer": self.layer_of(op.node),
                "thread": op.line_id,
            }
            span = self.span(
                self.inferences[index]["span_id"], op.op_type, "LIBRARY", op.start_ns, op.end_ns, attributes
            )
            operators.append(span)
            self.members[index].append(span)
            by_node.setdefault(op.node, []).append(span)
        nest_by_containment(operators, key="thread")

        launch_times: dict[int, int] = {}
        for launch in converted.launches:
            index = self.inference_at(launch.start_ns)
            if index is None:
                continue
            correlation = as_int(launch.stats.get("correlation_id"))
            launch_times[correlation] = launch.start_ns
            parent = _innermost(launch.start_ns, operators) or self.inferences[index]
            attributes = {"kind": "runtime", "correlation": correlation, "thread": launch.line_id}
            span = self.span(
                parent["span_id"], launch.name, "LIBRARY", launch.start_ns, launch.end_ns, attributes
            )
            self.members[index].append(span)

        for event, device in converted.device:
            kind = _device_kind(event)
            correlation = as_int(event.stats.get("correlation_id"), default=-1)
            launched_at = launch_times.get(correlation, event.start_ns)
            index = self.inference_at(launched_at)
            if kind is None or index is None:
                continue
            tf_op = OP_EVENT.fullmatch(str(event.stats.get("tf_op", "")))
            candidates = by_node.get(tf_op["node"], []) if tf_op else []
            # The run of the op that launched it: around the launch, else the last one before it.
            launcher = _innermost(launched_at, candidates) or next(
                (s for s in reversed(candidates) if s["start_ns"] <= launched_at), None
            )
            stream = _STREAM.match(event.line_name)
            attributes = {
                "kind": kind,
                "correlation": correlation if correlation >= 0 else None,
                "device": device,
                "stream": int(stream["id"]) if stream else event.line_id,
                "operator": launcher["name"] if launcher else (tf_op["type"] if tf_op else None),
                "layer": self.layer_of(tf_op["node"]) if tf_op else None,
            }
            details = str(event.stats.get("kernel_details", ""))
            for key, pattern in (("grid", _GRID), ("block", _BLOCK)):
                if sizes := pattern.search(details):
                    attributes[key] = [int(size) for size in sizes.groups()]
            parent = launcher or self.inferences[index]
            span = self.span(
                parent["span_id"], event.name, "LIBRARY", event.start_ns, event.end_ns, attributes
            )
            self.members[index].append(span)


def _innermost(time_ns: int, candidates: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The shortest of the spans running at `time_ns`, or None."""
    around = [s for s in candidates if s["start_ns"] <= time_ns <= s["end_ns"]]
    return min(around, key=lambda s: s["end_ns"] - s["start_ns"]) if around else None


def _device_kind(event: XEvent) -> str | None:
    """ "kernel", "memcpy" or "memset" for device work; None for anything else on a device line."""
    if "memcpy_details" in event.stats:
        return "memcpy"
    if "memset_details" in event.stats:
        return "memset"
    if "kernel_details" in event.stats or "correlation_id" in event.stats:
        return "kernel"
    return None
