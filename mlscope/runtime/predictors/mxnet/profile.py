"""MXNet's profiled passes as spans: the FRAMEWORK pass (one span per leaf Gluon block call, timed
by forward hooks) and the LIBRARY pass (`mx.profiler`'s operator events), plus the pure converter
from the profiler's dump to spans.

Importing this module imports no mxnet: the passes take the network and a `run` callable, and get
mxnet from the caller's process when they run; the converter never needs it.

Both passes run the network imperatively (`hybridize(active=False)`, restored afterwards): a
hybridized Gluon block runs as one cached graph, so its children's hooks never fire, and MXNet's
profiler then records the graph as bulked segments named by up to ~15 joined operator names
("BatchNorm,Activation,Pooling,Convolution,...", truncated), not one event per operator.
MXNet's engine is asynchronous: an operator runs on an engine worker thread some time after the
Python call that queued it, so each hook waits for all queued work (`mx.nd.waitall`) before a
block starts and after it ends; a block's span, or annotation, then covers its own operators.

The dump (`mx.profiler.dump()`, Chrome trace event format, as MXNet 1.9.1 writes it):

- {"traceEvents": [...], "displayTimeUnit": "ms"}; "ts" is in whole microseconds since the Unix
  epoch (checked: the first operator of a run came about 1 ms after a `time.time_ns()` read just
  before it). No "dur": every interval is a "B"/"E" pair or a "b"/"e" pair.
- Each operator is a "B"/"E" pair, cat "operator", on pid = the device's index in the "M"
  process_name metadata ("cpu/0" is 0) and tid = the engine worker thread, and again as an async
  "b"/"e" pair (same name and times) on another pid: only the "B"/"E" pair is read. No shapes.
  "DeleteVariable" (freeing an array) and "WaitForVar"/"WaitForAll" (a wait) are the engine's
  bookkeeping, not operators, and are left out.
- A `mx.profiler.Task(domain, name)` is a "b"/"e" pair whose cat is the domain's name; mlscope's
  domain is "mlscope": each traced inference is a task "mlscope.inference#<i>" (the MODEL span, and
  the point where the profiler's clock is compared with the tracer's) and each leaf-block call a
  task "mlscope.layer:<block path>" (gives each operator its "layer"; not a span itself).
- Events are not in time order (about one in six is earlier than the one before it).
- One process writes one dump file: after `dump(finished=True)` `set_config` fails ("Check failed:
  auto_remove_ == false"), and `dump(finished=False)` leaves the file without its closing "]}".
  Every later `dump(finished=True)` appends to the same file the events recorded since the last
  one, as a continuation: `,` then the events, then the closing "]" and "displayTimeUnit" again,
  without the header and without the "M" metadata. `read_dump` reads one such piece.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlscope.runtime.trace.layers import LayerRecorder
from mlscope.runtime.trace.profiled import ProfiledPass, clock_offset
from mlscope.runtime.trace.spans import make_span, new_span_id

__all__ = [
    "DOMAIN",
    "INFERENCE_TASK",
    "LAYER_TASK",
    "layer_pass",
    "leaf_blocks",
    "mx_inference_starts",
    "mx_profile_to_spans",
    "operator_pass",
    "read_dump",
]

DOMAIN = "mlscope"
INFERENCE_TASK = "mlscope.inference#"
LAYER_TASK = "mlscope.layer:"
_US = 1000
_ENGINE_BOOKKEEPING = frozenset({"DeleteVariable", "WaitForVar", "WaitForAll"})


# -- FRAMEWORK: leaf-block hooks --------------------------------------------------------------


def leaf_blocks(net: Any) -> list[tuple[str, Any]]:
    """The Gluon blocks with no children, with dotted paths from the network ("features.4.0.body.0");
    the network itself, named by its class, when it has no children."""
    found: list[tuple[str, Any]] = []

    def visit(path: str, block: Any) -> None:
        # Gluon 1.x keeps a block's children in `_children` (name -> block); there is no public walk
        # that yields their names.
        children = list(block._children.items())
        if not children:
            found.append((path or type(block).__name__, block))
        for name, child in children:
            visit(f"{path}.{name}" if path else str(name), child)

    visit("", net)
    return found


def _shapes(value: Any) -> list[list[int]]:
    """Shapes of the arrays in a hook's inputs or outputs, through tuples and lists."""
    if isinstance(value, tuple | list):
        return [shape for item in value for shape in _shapes(item)]
    shape = getattr(value, "shape", None)
    return [[int(size) for size in shape]] if isinstance(shape, tuple) else []


@contextmanager
def _imperative(net: Any, restore: Callable[[], None]) -> Iterator[None]:
    """Run `net` imperatively inside, so its blocks' hooks fire; `restore` hybridizes it again."""
    net.hybridize(active=False)
    try:
        yield
    finally:
        restore()


@contextmanager
def _hooks(
    net: Any, before: Callable[[str, Any, Any], None], after: Callable[[str, Any, Any, Any], None]
) -> Iterator[None]:
    """Call before(path, block, inputs) and after(path, block, inputs, outputs) around every leaf call."""
    handles = []

    def pre_for(path: str) -> Callable[[Any, Any], None]:
        return lambda block, inputs: before(path, block, inputs)

    def post_for(path: str) -> Callable[[Any, Any, Any], None]:
        return lambda block, inputs, outputs: after(path, block, inputs, outputs)

    try:
        for path, block in leaf_blocks(net):
            handles.append(block.register_forward_pre_hook(pre_for(path)))
            handles.append(block.register_forward_hook(post_for(path)))
        yield
    finally:
        for handle in handles:
            handle.detach()


def layer_pass(
    net: Any,
    run: Callable[[], Any],
    profiled: ProfiledPass,
    *,
    wait_all: Callable[[], None],
    restore: Callable[[], None],
) -> None:
    """The FRAMEWORK pass: a span per leaf-block call, inside a MODEL span per inference.

    Args:
        net: the Gluon network `run` calls; run imperatively for the pass.
        run: one inference, returning when its outputs are computed.
        profiled: the tracer, the pass's span, batch size and inference counts (the warm-up ones
            run imperatively too, without hooks).
        wait_all: waits for every operator MXNet has queued (`mx.nd.waitall`).
        restore: hybridizes `net` again as it was measured.
    """
    recorder = LayerRecorder(profiled, shapes=_shapes, synchronize=wait_all)

    def before(path: str, block: Any, inputs: Any) -> None:
        recorder.before(inputs)

    def after(path: str, block: Any, inputs: Any, outputs: Any) -> None:
        recorder.after(path, type(block).__name__, outputs)

    with _imperative(net, restore):
        profiled.warm_up(run)
        with _hooks(net, before, after):
            recorder.inferences(run)


# -- LIBRARY: mx.profiler ---------------------------------------------------------------------

# The profiler's one dump file in this process, and how much of it earlier passes have read.
_DUMP: dict[str, Any] = {}


def _dump_file(profiler: Any) -> tuple[Path, int]:
    """The process's dump file (configured on first use) and the offset where the next piece starts."""
    if "path" not in _DUMP:
        folder = tempfile.mkdtemp(prefix="mlscope-mx-profile-")
        atexit.register(shutil.rmtree, folder, True)
        path = Path(folder) / "profile.json"
        profiler.set_config(
            profile_symbolic=True,
            profile_imperative=True,
            profile_memory=False,
            profile_api=False,
            aggregate_stats=False,
            filename=str(path),
        )
        _DUMP.update(path=path, offset=0)
    return _DUMP["path"], _DUMP["offset"]


def read_dump(text: str) -> list[dict[str, Any]]:
    """The events of one piece of an MXNet dump file: a whole document (the first dump) or a
    continuation appended by a later one (`,` + events + the closing lines).

    Raises:
        ValueError: the text is neither.
    """
    body = text.lstrip()
    if body.startswith("{"):
        document = json.loads(body)
    elif body.startswith(","):
        document = json.loads('{"traceEvents": [' + body[1:])
    else:
        raise ValueError(f"not an MXNet profiler dump: starts with {body[:40]!r}")
    events = document.get("traceEvents") if isinstance(document, dict) else None
    if not isinstance(events, list):
        raise ValueError("not an MXNet profiler dump: no traceEvents list")
    return events


def operator_pass(
    net: Any, run: Callable[[], Any], profiled: ProfiledPass, *, mx: Any, restore: Callable[[], None]
) -> None:
    """The LIBRARY pass: `mx.profiler` around the traced imperative inferences, as spans.

    Records MODEL spans "inference" and operator spans (see `mx_profile_to_spans`), shifted onto the
    tracer's clock by the median difference between the tracer's reading at each inference's start
    and the profiler's (`clock_offset`).

    Args:
        net: the Gluon network `run` calls; run imperatively for the pass.
        run: one inference, returning when its outputs are computed.
        profiled: the tracer, the pass's span, batch size and inference counts (the warm-up ones
            run unprofiled).
        mx: the mxnet module of the calling process.
        restore: hybridizes `net` again as it was measured.
    """
    tracer = profiled.tracer
    profiler = mx.profiler
    path, offset = _dump_file(profiler)
    domain = profiler.Domain(DOMAIN)
    open_tasks: list[Any] = []

    def before(block_path: str, block: Any, inputs: Any) -> None:
        mx.nd.waitall()
        task = profiler.Task(domain, LAYER_TASK + block_path)
        task.start()
        open_tasks.append(task)

    def after(block_path: str, block: Any, inputs: Any, outputs: Any) -> None:
        mx.nd.waitall()
        open_tasks.pop().stop()

    readings: dict[int, int] = {}
    with _imperative(net, restore):
        profiled.warm_up(run)
        mx.nd.waitall()
        profiler.set_state("run")
        try:
            with _hooks(net, before, after):
                for iteration in range(profiled.iterations):
                    task = profiler.Task(domain, f"{INFERENCE_TASK}{iteration}")
                    readings[iteration] = tracer.clock.now()
                    task.start()
                    try:
                        run()
                    finally:
                        task.stop()
        finally:
            while open_tasks:  # a forward that raised never ran its post-hooks
                open_tasks.pop().stop()
            mx.nd.waitall()
            profiler.set_state("stop")
            profiler.dump(finished=True)
    with path.open(encoding="utf-8") as handle:
        handle.seek(offset)
        text = handle.read()
    _DUMP["offset"] = offset + len(text.encode("utf-8"))
    events = read_dump(text)
    profiled.record(
        mx_profile_to_spans, events, offset_ns=clock_offset(readings, mx_inference_starts(events))
    )


# -- The converter (pure) --------------------------------------------------------------------


def _intervals(
    events: list[dict[str, Any]], begin: str, end: str, wanted: Callable[[dict[str, Any]], bool]
) -> list[tuple[dict[str, Any], int, int]]:
    """Begin/end pairs of the wanted events as (begin event, start µs, end µs), paired per
    (pid, tid, name) innermost first, in the order their ends were listed."""
    stacks: dict[tuple[Any, Any, str], list[dict[str, Any]]] = {}
    found: list[tuple[dict[str, Any], int, int]] = []
    for event in events:
        phase = event.get("ph")
        if phase not in (begin, end) or "ts" not in event or not wanted(event):
            continue
        key = (event.get("pid"), event.get("tid"), str(event.get("name", "")))
        if phase == begin:
            stacks.setdefault(key, []).append(event)
        elif stacks.get(key):
            opened = stacks[key].pop()
            found.append((opened, int(opened["ts"]), int(event["ts"])))
    return found


def _tasks(events: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int, int]]:
    return _intervals(events, "b", "e", lambda event: event.get("cat") == DOMAIN)


def _iteration(name: str) -> int | None:
    if not name.startswith(INFERENCE_TASK):
        return None
    suffix = name[len(INFERENCE_TASK) :]
    return int(suffix) if suffix.isdigit() else None


def mx_inference_starts(events: list[dict[str, Any]]) -> dict[int, int]:
    """The profiler's epoch time (ns, unshifted) at which each "mlscope.inference#<i>" task began."""
    starts: dict[int, int] = {}
    for event, start_us, _ in _tasks(events):
        iteration = _iteration(str(event.get("name", "")))
        if iteration is not None:
            starts.setdefault(iteration, start_us * _US)
    return starts


def mx_profile_to_spans(
    events: list[dict[str, Any]],
    *,
    trace_id: str,
    parent_id: str,
    offset_ns: int,
    batch_size: int,
    new_id: Callable[[], str] = new_span_id,
) -> list[dict[str, Any]]:
    """Spans of the traced inferences in the events of one MXNet dump (see `read_dump`).

    Each "mlscope.inference#<i>" task becomes a MODEL span "inference" (attributes "pass":
    "LIBRARY", "batch_size", "iteration") under `parent_id`; each operator ("B"/"E" pair, cat
    "operator", not engine bookkeeping) that started inside one becomes a LIBRARY span under it:
    kind "operator", name = the operator ("Convolution"), "layer" = the path of the innermost
    "mlscope.layer:<path>" task containing it (None: work outside any leaf block, like a residual
    add written inline in a block's forward), "thread" = the engine thread's id as a string (MXNet's
    ids are 64-bit hashes, past what some stores keep as integers). Operators outside every
    inference (warm-up, input copies) are dropped.

    Containment is by time across threads, which holds because the passes wait for the engine at
    every block and inference boundary.

    Args:
        events: the dump's "traceEvents".
        trace_id: the trace every span belongs to.
        parent_id: the pass's span, parent of the inference spans.
        offset_ns: added to every profiler time (µs since the epoch * 1000) to put it on the
            caller's clock.
        batch_size: samples per inference, an attribute of every span.
        new_id: makes span ids.

    Returns:
        Each inference's span followed by its operators by start time, inferences in order.
    """
    common = {"pass": "LIBRARY", "batch_size": batch_size}

    def at(micros: int) -> int:
        return micros * _US + offset_ns

    inferences: list[tuple[int, int, dict[str, Any]]] = []
    layers: list[tuple[int, int, str]] = []
    for event, start, end in _tasks(events):
        name = str(event.get("name", ""))
        iteration = _iteration(name)
        if iteration is not None:
            span = make_span(
                trace_id,
                new_id(),
                parent_id,
                "inference",
                "MODEL",
                at(start),
                at(end),
                {**common, "iteration": iteration},
            )
            inferences.append((start, end, span))
        elif name.startswith(LAYER_TASK):
            layers.append((start, end, name[len(LAYER_TASK) :]))
    inferences.sort(key=lambda item: item[2]["attributes"]["iteration"])
    # Innermost first: of the layers containing an operator, the one that started last.
    layers.sort(key=lambda item: item[0], reverse=True)

    members: dict[str, list[dict[str, Any]]] = {span["span_id"]: [] for _, _, span in inferences}
    operators = _intervals(
        events,
        "B",
        "E",
        lambda event: event.get("cat") == "operator" and str(event.get("name")) not in _ENGINE_BOOKKEEPING,
    )
    for event, start, end in operators:
        inference = next((span for first, last, span in inferences if first <= start <= last), None)
        if inference is None:
            continue
        layer = next((path for first, last, path in layers if first <= start and end <= last), None)
        attributes = {**common, "kind": "operator", "layer": layer, "thread": str(event.get("tid"))}
        members[inference["span_id"]].append(
            make_span(
                trace_id,
                new_id(),
                inference["span_id"],
                str(event["name"]),
                "LIBRARY",
                at(start),
                at(end),
                attributes,
            )
        )
    spans: list[dict[str, Any]] = []
    for _, _, inference in inferences:
        operator_spans = sorted(members[inference["span_id"]], key=lambda span: span["start_ns"])
        if operator_spans:
            inference["end_ns"] = max(inference["end_ns"], *(span["end_ns"] for span in operator_spans))
        spans.append(inference)
        spans.extend(operator_spans)
    return spans
