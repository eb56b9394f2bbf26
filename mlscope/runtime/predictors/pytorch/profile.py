"""PyTorch's profiled passes as spans: the FRAMEWORK pass (one span per leaf-module call, timed by
forward hooks) and the LIBRARY pass (torch.profiler's operators, and on a GPU its CUDA runtime
calls and kernels), plus the pure converter from the profiler's Kineto trace to spans.

Importing this module imports no torch: the passes import it when they run, and the converter
never does, so it can be tested, and reused on a saved trace, anywhere.

The Kineto trace (what `torch.profiler.profile.export_chrome_trace` writes, the Chrome trace event
format with Kineto's additions; see pytorch/kineto libkineto/src/output_json.cpp):

- Top level: "traceEvents", "baseTimeNanoseconds", "schemaVersion", "deviceProperties".
- Times: "ts" and "dur" are microseconds as decimals with three places (nanosecond precision).
  "ts" is RELATIVE to "baseTimeNanoseconds", an epoch time in ns, because an absolute epoch time
  in µs does not fit a double at ns precision. So an event starts at
  baseTimeNanoseconds + ts * 1000 ns since the epoch. Checked on torch 2.14.1 (CPU): the trace
  had "baseTimeNanoseconds": 1790857026000000000 (a whole second, weeks before the run) and "ts"
  near 4.46e12 µs; base + ts*1000 of a record_function came 0.3 ms after the `time.time_ns()`
  read just before entering it. A trace without the key (older PyTorch) has absolute "ts": base 0.
- Events used, all complete events (ph "X"): cat "cpu_op" (an aten operator; args "Input Dims"
  with record_shapes), "user_annotation" (a `record_function`), "python_function" (with_stack:
  one per Python frame), "cuda_runtime"/"cuda_driver" (host API calls, args "correlation"),
  "kernel"/"gpu_memcpy"/"gpu_memset" (device work; pid = device, tid = stream; args "device",
  "stream", "correlation", kernels also "grid", "block"). A launch and its kernel share
  args "correlation"; both carry the launching operator's "External id". Flow events (ph "s"/"f",
  cat "ac2g") draw the same link and are not needed. CPU events sit on (pid = process,
  tid = thread) and nest by time within a thread.

mlscope's own annotations: each traced inference is `record_function("mlscope.inference#<i>")`
(the MODEL span "inference", and the point where the profiler's clock is compared with the
tracer's), each leaf-module call `record_function("mlscope.layer:<module path>")` (gives every
operator its "layer"; not a span itself: layer spans come from the FRAMEWORK pass only).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlscope.runtime.trace.layers import LayerRecorder
from mlscope.runtime.trace.profiled import ProfiledPass, clock_offset
from mlscope.runtime.trace.spans import nest_by_containment, new_span_id

if TYPE_CHECKING:
    import torch

__all__ = [
    "INFERENCE_ANNOTATION",
    "LAYER_ANNOTATION",
    "kineto_inference_starts",
    "kineto_to_spans",
    "layer_pass",
    "leaf_modules",
    "operator_pass",
]

INFERENCE_ANNOTATION = "mlscope.inference#"
LAYER_ANNOTATION = "mlscope.layer:"

_RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
_DEVICE_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_KERNEL_ARGS = ("device", "stream", "grid", "block", "bytes")
_GROUP = "_kineto_thread"  # the nesting key, removed before the spans leave the converter


# -- FRAMEWORK: leaf-module hooks -------------------------------------------------------------


def leaf_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The modules with no children, with their paths from `named_modules()` (the model itself
    when it has no children, named by its class as its path is empty)."""
    return [
        (path or type(module).__name__, module)
        for path, module in model.named_modules()
        if next(module.children(), None) is None
    ]


def _tensor_shapes(value: Any) -> list[list[int]]:
    """Shapes of the tensors in a hook's arguments or output, through tuples, lists and dicts."""
    import torch

    if isinstance(value, torch.Tensor):
        return [list(value.shape)]
    if isinstance(value, tuple | list):
        return [shape for item in value for shape in _tensor_shapes(item)]
    if isinstance(value, dict):
        return [shape for item in value.values() for shape in _tensor_shapes(item)]
    return []


def _synchronizer(device: torch.device) -> Callable[[], None]:
    import torch

    if device.type != "cuda":
        return lambda: None
    return lambda: torch.cuda.synchronize(device)


def layer_pass(
    model: torch.nn.Module, run: Callable[[], Any], profiled: ProfiledPass, *, device: torch.device
) -> None:
    """The FRAMEWORK pass: a span per leaf-module call, inside a MODEL span per inference.

    Args:
        model: the module `run` calls (its leaf modules get hooks for the pass only).
        run: one inference, returning when its results are ready.
        profiled: the tracer, the pass's span, batch size and inference counts (the warm-up ones
            run without hooks).
        device: where the model runs; on CUDA every layer is synchronised.
    """
    profiled.warm_up(run)
    # On a GPU a layer's work is queued, not done, when its forward returns: synchronising before
    # and after each layer makes its span cover its kernels, but serialises the GPU (no overlap of
    # one layer's kernels with the next layer's launches). That is this pass's framework-level
    # view; the LIBRARY pass shows the kernels as they really ran.
    recorder = LayerRecorder(profiled, shapes=_tensor_shapes, synchronize=_synchronizer(device))

    def after_for(path: str) -> Callable[[torch.nn.Module, tuple[Any, ...], Any], None]:
        return lambda module, args, output: recorder.after(path, type(module).__name__, output)

    handles = []
    try:
        for path, module in leaf_modules(model):
            handles.append(module.register_forward_pre_hook(lambda module, args: recorder.before(args)))
            handles.append(module.register_forward_hook(after_for(path)))
        recorder.inferences(run)
    finally:
        for handle in handles:
            handle.remove()


# -- LIBRARY: torch.profiler -----------------------------------------------------------------


@contextmanager
def _layer_annotations(model: torch.nn.Module) -> Iterator[None]:
    """Wrap every leaf-module call in `record_function("mlscope.layer:<path>")` while open."""
    from torch.autograd.profiler import record_function

    open_annotations: list[record_function] = []

    def enter_for(path: str) -> Callable[[torch.nn.Module, tuple[Any, ...]], None]:
        def enter(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            annotation = record_function(LAYER_ANNOTATION + path)
            annotation.__enter__()
            open_annotations.append(annotation)

        return enter

    def leave(module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        open_annotations.pop().__exit__(None, None, None)

    handles = []
    try:
        for path, module in leaf_modules(model):
            handles.append(module.register_forward_pre_hook(enter_for(path)))
            handles.append(module.register_forward_hook(leave))
        yield
    finally:
        for handle in handles:
            handle.remove()
        # A forward that raised never ran its post-hooks: close what it left open.
        while open_annotations:
            open_annotations.pop().__exit__(None, None, None)


def operator_pass(
    model: torch.nn.Module,
    run: Callable[[], Any],
    profiled: ProfiledPass,
    *,
    device: torch.device,
    with_stack: bool = False,
) -> None:
    """The LIBRARY pass: torch.profiler around the traced inferences, converted to spans.

    Records MODEL spans "inference", operator spans, and on CUDA runtime and kernel spans (see
    `kineto_to_spans`), shifted onto the tracer's clock by the median difference between the
    tracer's reading at each inference's start and the profiler's (`clock_offset`).

    Args:
        model: the module `run` calls (its leaf modules are annotated for the pass only).
        run: one inference, returning when its results are ready.
        profiled: the tracer, the pass's span, batch size and inference counts (the warm-up ones
            run unprofiled).
        device: where the model runs; CUDA adds the profiler's CUDA activity.
        with_stack: record Python stacks (each operator gets "python_stack"; costs time).
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    tracer = profiled.tracer
    profiled.warm_up(run)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    readings: dict[int, int] = {}
    with (
        _layer_annotations(model),
        profile(activities=activities, record_shapes=True, with_stack=with_stack) as profiler,
    ):
        for iteration in range(profiled.iterations):
            readings[iteration] = tracer.clock.now()
            with record_function(f"{INFERENCE_ANNOTATION}{iteration}"):
                run()
    with tempfile.TemporaryDirectory(prefix="mlscope-kineto-") as folder:
        path = Path(folder) / "trace.json"
        profiler.export_chrome_trace(str(path))
        trace = json.loads(path.read_text(encoding="utf-8"))
    profiled.record(kineto_to_spans, trace, offset_ns=clock_offset(readings, kineto_inference_starts(trace)))


# -- The converter (pure) --------------------------------------------------------------------


def _epoch_ns(trace: dict[str, Any]) -> Callable[[Any], int]:
    base = int(trace.get("baseTimeNanoseconds") or 0)
    return lambda micros: base + round(float(micros) * 1000)


def _iteration(name: str) -> int | None:
    if not name.startswith(INFERENCE_ANNOTATION):
        return None
    suffix = name[len(INFERENCE_ANNOTATION) :]
    return int(suffix) if suffix.isdigit() else None


def kineto_inference_starts(trace: dict[str, Any]) -> dict[int, int]:
    """The profiler's epoch time (ns, unshifted) at which each "mlscope.inference#<i>" began.

    Returns:
        Start times by iteration i.
    """
    at = _epoch_ns(trace)
    starts: dict[int, int] = {}
    for event in trace.get("traceEvents", []):
        if event.get("ph") == "X" and event.get("cat") == "user_annotation":
            iteration = _iteration(str(event.get("name", "")))
            if iteration is not None:
                starts.setdefault(iteration, at(event["ts"]))
    return starts


def _node(name: str, role: str, start: int, end: int, attributes: dict[str, Any]) -> dict[str, Any]:
    """A working record: span-shaped, so `nest_by_containment` can nest it, plus its role."""
    return {
        "span_id": new_span_id(),
        "parent_id": None,
        "name": name,
        "role": role,
        "start_ns": start,
        "end_ns": max(end, start),
        "attributes": attributes,
    }


def _read_events(
    trace: dict[str, Any], offset_ns: int, base: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], dict[str, Any]]]]:
    """The events the converter uses as working records: those on a CPU thread (inferences,
    layers, Python frames, operators, runtime calls), and device events with their args."""
    at = _epoch_ns(trace)
    cpu_nodes: list[dict[str, Any]] = []
    device_nodes: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for event in trace.get("traceEvents", []):
        if event.get("ph") != "X" or "ts" not in event:
            continue
        category, name = event.get("cat"), str(event.get("name", ""))
        args = event.get("args") or {}
        start = at(event["ts"]) + offset_ns
        end = start + round(float(event.get("dur") or 0) * 1000)
        thread = {_GROUP: (event.get("pid"), event.get("tid"))}
        if category == "user_annotation":
            iteration = _iteration(name)
            if iteration is not None:
                attributes = {**base, "iteration": iteration, **thread}
                cpu_nodes.append(_node("inference", "inference", start, end, attributes))
            elif name.startswith(LAYER_ANNOTATION):
                cpu_nodes.append(_node(name[len(LAYER_ANNOTATION) :], "layer", start, end, thread))
        elif category == "cpu_op":
            attributes = {**base, "kind": "operator", "thread": event.get("tid"), **thread}
            if "Input Dims" in args:
                attributes["input_shapes"] = args["Input Dims"]
            node = _node(name, "operator", start, end, attributes)
            node["external_id"] = args.get("External id")
            cpu_nodes.append(node)
        elif category in _RUNTIME_CATEGORIES:
            attributes = {**base, "kind": "runtime", "thread": event.get("tid"), **thread}
            if "correlation" in args:
                attributes["correlation"] = args["correlation"]
            cpu_nodes.append(_node(name, "runtime", start, end, attributes))
        elif category == "python_function":
            cpu_nodes.append(_node(name, "frame", start, end, thread))
        elif category in _DEVICE_KINDS:
            attributes = {**base, "kind": _DEVICE_KINDS[category]}
            attributes.update({key: args[key] for key in ("correlation", *_KERNEL_ARGS) if key in args})
            device_nodes.append((_node(name, "device", start, end, attributes), args))

    return cpu_nodes, device_nodes


def kineto_to_spans(
    trace: dict[str, Any],
    *,
    trace_id: str,
    parent_id: str,
    offset_ns: int,
    batch_size: int,
    new_id: Callable[[], str] = new_span_id,
) -> list[dict[str, Any]]:
    """Spans from a Kineto trace of a LIBRARY pass (format: this module's docstring).

    Emits a MODEL span "inference" per "mlscope.inference#<i>" annotation (parent `parent_id`),
    a LIBRARY span per "cpu_op" (kind "operator"), per CUDA runtime/driver call (kind "runtime")
    and per kernel, memcpy and memset (kinds "kernel", "memcpy", "memset"). CPU events nest by
    containment within their thread; a layer annotation gives the operators inside it their
    "layer" and is skipped as a parent. A device event's parent is the operator containing the
    launch with its "correlation" (else the operator with its "External id"), else the inference
    its start falls in, else `parent_id`; it takes that operator's name and layer.

    Args:
        trace: the parsed JSON of `export_chrome_trace`.
        trace_id: the trace the spans belong to.
        parent_id: the pass's span, parent of the inferences (and of anything outside them).
        offset_ns: added to every time, to put the profiler's clock on the tracer's.
        batch_size: samples per inference, an attribute of every span.
        new_id: makes span ids.

    Returns:
        Spans in the store's shape, inferences first, then by start time.
    """
    cpu_nodes, device_nodes = _read_events(trace, offset_ns, {"pass": "LIBRARY", "batch_size": batch_size})
    nest_by_containment(cpu_nodes, key=_GROUP)
    by_id = {node["span_id"]: node for node in cpu_nodes}
    inferences = sorted((n for n in cpu_nodes if n["role"] == "inference"), key=lambda n: n["start_ns"])

    def ancestors(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        parent = by_id.get(node["parent_id"])
        while parent is not None:
            yield parent
            parent = by_id.get(parent["parent_id"])

    def inference_at(time_ns: int) -> dict[str, Any] | None:
        return next((n for n in inferences if n["start_ns"] <= time_ns <= n["end_ns"]), None)

    # Per operator or runtime call: its parent's id, and the innermost operator around it.
    resolved: dict[str, tuple[str | None, dict[str, Any] | None]] = {}
    for node in cpu_nodes:
        if node["role"] in ("inference", "layer", "frame"):
            continue
        layer: str | None = None
        operator: dict[str, Any] | None = None
        parent: dict[str, Any] | None = None
        frames: list[str] = []
        for ancestor in ancestors(node):
            role = ancestor["role"]
            if role == "frame":
                frames.append(ancestor["name"])
            elif role == "layer" and layer is None:
                layer = ancestor["name"]
            elif role != "layer":
                parent = parent or ancestor
                if role == "operator":
                    operator = operator or ancestor
                if role == "inference":
                    break
        if parent is None:  # on a thread of its own: the inference it ran during, if any
            parent = inference_at(node["start_ns"])
        node["attributes"]["layer"] = layer
        if frames and node["role"] == "operator":
            node["attributes"]["python_stack"] = frames
        resolved[node["span_id"]] = (parent["span_id"] if parent else None, operator)

    launches = {
        node["attributes"]["correlation"]: node
        for node in cpu_nodes
        if node["role"] == "runtime" and "correlation" in node["attributes"]
    }
    operators_by_external = {
        node["external_id"]: node for node in cpu_nodes if node["role"] == "operator" and node["external_id"]
    }
    for node, args in device_nodes:
        launch = launches.get(args.get("correlation"))
        operator = resolved[launch["span_id"]][1] if launch is not None else None
        operator = operator or operators_by_external.get(args.get("External id"))
        if operator is not None:
            node["parent_id"] = operator["span_id"]
            node["attributes"]["operator"] = operator["name"]
            node["attributes"]["layer"] = operator["attributes"].get("layer")
        else:
            inference = inference_at(node["start_ns"])
            node["parent_id"] = inference["span_id"] if inference else None
            node["attributes"]["layer"] = None

    kept = [n for n in cpu_nodes if n["role"] in ("operator", "runtime")] + [n for n, _ in device_nodes]
    ids = {node["span_id"]: new_id() for node in (*inferences, *kept)}
    spans = []
    for node in inferences:
        spans.append(_span(node, "MODEL", ids[node["span_id"]], parent_id, trace_id))
    for node in sorted(kept, key=lambda n: (n["start_ns"], -n["end_ns"])):
        found = node["parent_id"] if node["role"] == "device" else resolved[node["span_id"]][0]
        parent_span = ids[found] if found is not None else parent_id
        spans.append(_span(node, "LIBRARY", ids[node["span_id"]], parent_span, trace_id))
    return spans


def _span(node: dict[str, Any], level: str, span_id: str, parent_id: str, trace_id: str) -> dict[str, Any]:
    attributes = {key: value for key, value in node["attributes"].items() if key != _GROUP}
    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_id": parent_id,
        "name": node["name"] if level == "LIBRARY" else "inference",
        "level": level,
        "start_ns": node["start_ns"],
        "end_ns": node["end_ns"],
        "attributes": attributes,
    }
