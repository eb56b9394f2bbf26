"""XLA's profiler events as the FRAMEWORK pass's layer spans (docs/jax.md).

What JAX gives (`jax.profiler.start_trace` / `stop_trace`, read back with `jax.profiler.ProfileData`):
on the CPU, one event per thunk XLA executed, on the thread that ran it, each with its start and
duration in the profiler's clock and the stats `hlo_op` (the HLO instruction: "fusion.3",
"convolution.2", "dot.1"), `hlo_module` ("jit_forward") and `run_id` (one per execution of a
compiled program). So a layer here is an HLO instruction of the compiled program, after XLA's
fusion, not a Flax layer: XLA keeps no trace of the module that wrote an op.

The events of one traced inference are those of one run_id, in the order they started; the runs are
matched to the caller's inferences in order, and the profiler's clock is moved onto the tracer's by
`clock_offset` (the median difference between the caller's reading before an inference and the
start of its first event). The conversion (`xla_to_spans`) is pure; `profiled_layers` runs the
profiler (and imports jax).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlscope.runtime.trace.profiled import ProfiledPass, clock_offset
from mlscope.runtime.trace.spans import make_span, new_span_id

__all__ = ["PROFILE_LEVELS", "XlaRun", "profiled_layers", "xla_runs", "xla_to_spans"]

# The passes this converter serves: XLA's events are HLO instructions, nothing below them on a CPU.
PROFILE_LEVELS = ("FRAMEWORK",)


@dataclass(frozen=True)
class XlaRun:
    """One traced inference: the caller's clock (epoch ns) before and after it, and XLA's events of
    its run (dicts {"hlo_op", "hlo_module", "start_ns", "duration_ns"}, profiler clock), in order."""

    start_ns: int
    end_ns: int
    events: Sequence[Mapping[str, Any]]


def xla_runs(events: Iterable[Mapping[str, Any]], module_prefix: str = "jit_") -> list[list[dict[str, Any]]]:
    """XLA's thunk events (dicts with "hlo_op", "hlo_module", "run_id", "start_ns", "duration_ns")
    grouped by run, the runs in the order they started, each run's events in the order they
    started; events of modules not named `module_prefix`... are left out."""
    by_run: dict[Any, list[dict[str, Any]]] = {}
    for event in events:
        if str(event.get("hlo_module", "")).startswith(module_prefix):
            by_run.setdefault(event["run_id"], []).append(dict(event))
    runs = [sorted(run, key=lambda e: e["start_ns"]) for run in by_run.values()]
    return sorted(runs, key=lambda run: run[0]["start_ns"])


def _op_type(hlo_op: str) -> str:
    """The instruction's kind: its name without XLA's ".N" numbering ("fusion.3" → "fusion")."""
    return re.sub(r"\.\d+$", "", hlo_op)


def xla_to_spans(
    runs: Sequence[XlaRun],
    *,
    trace_id: str,
    parent_id: str,
    batch_size: int,
    new_id: Callable[[], str] = new_span_id,
) -> list[dict[str, Any]]:
    """Spans of the traced inferences: each a MODEL span "inference" (attributes "pass", "batch_size",
    "iteration") under `parent_id`, with one FRAMEWORK layer span per XLA event of its run inside it
    (kind "layer", name and "layer" = the HLO instruction, "layer_type" = its kind, "layer_index",
    "hlo_module", "timing": "profiler"), moved onto the caller's clock (see the module's docstring).
    An inference span is stretched to cover its events where the move leaves one outside."""
    readings = {i: run.start_ns for i, run in enumerate(runs) if run.events}
    starts = {i: int(run.events[0]["start_ns"]) for i, run in enumerate(runs) if run.events}
    offset = clock_offset(readings, starts)
    common = {"pass": "FRAMEWORK", "batch_size": batch_size}
    spans: list[dict[str, Any]] = []
    for iteration, run in enumerate(runs):
        inference_id = new_id()
        members = []
        for index, event in enumerate(run.events):
            start = int(event["start_ns"]) + offset
            end = start + max(0, int(event["duration_ns"]))
            name = str(event["hlo_op"])
            attributes = {
                **common,
                "kind": "layer",
                "layer": name,
                "layer_type": _op_type(name),
                "layer_index": index,
                "hlo_module": event.get("hlo_module"),
                "timing": "profiler",
            }
            members.append(
                make_span(trace_id, new_id(), inference_id, name, "FRAMEWORK", start, end, attributes)
            )
        first = min([run.start_ns, *(s["start_ns"] for s in members)])
        last = max([run.end_ns, *(s["end_ns"] for s in members)])
        spans.append(
            make_span(
                trace_id,
                inference_id,
                parent_id,
                "inference",
                "MODEL",
                first,
                last,
                {**common, "iteration": iteration},
            )
        )
        spans.extend(members)
    return spans


def _read_events(directory: Path) -> list[dict[str, Any]]:
    """XLA's thunk events (those with an `hlo_op` stat) of the XSpace the profiler wrote under
    `directory`."""
    from jax.profiler import ProfileData

    events = []
    for path in sorted(directory.rglob("*.xplane.pb")):
        for plane in ProfileData.from_file(str(path)).planes:
            for line in plane.lines:
                for event in line.events:
                    stats = dict(event.stats)
                    if "hlo_op" in stats and "run_id" in stats:
                        events.append(
                            {
                                "hlo_op": str(stats["hlo_op"]),
                                "hlo_module": str(stats.get("hlo_module", "")),
                                "run_id": stats["run_id"],
                                "start_ns": int(event.start_ns),
                                "duration_ns": int(event.duration_ns),
                            }
                        )
    return events


def profiled_layers(run: Callable[[], Any], profiled: ProfiledPass) -> list[dict[str, Any]]:
    """Run the pass's traced inferences under jax.profiler and return their spans (`xla_to_spans`);
    an inference XLA recorded no event for has no layers."""
    import jax

    clock = profiled.tracer.clock
    with tempfile.TemporaryDirectory(prefix="mlscope-jax-profile-") as folder:
        readings = []
        jax.profiler.start_trace(folder)
        try:
            for _ in range(profiled.iterations):
                start = clock.now()
                run()
                readings.append((start, clock.now()))
        finally:
            jax.profiler.stop_trace()
        grouped = xla_runs(_read_events(Path(folder)))
    runs = [
        XlaRun(start, end, grouped[i] if i < len(grouped) else []) for i, (start, end) in enumerate(readings)
    ]
    return xla_to_spans(
        runs, trace_id=profiled.tracer.trace_id, parent_id=profiled.parent_id, batch_size=profiled.batch_size
    )
