"""OpenVINO's performance counters as spans: the FRAMEWORK pass's layer spans and the LIBRARY pass's
operator spans. Pure: imports no openvino, so it runs (and is tested) anywhere.

What OpenVINO gives (a model compiled with `PERF_COUNT: YES`; `InferRequest.get_profiling_info()`
after an inference, which covers that inference only): one record per node of the compiled graph,
in the order the CPU plugin executes them, each with `node_name` (the node's name in the compiled
graph: fused nodes keep the name of the node they were fused into), `node_type` (the plugin's
operation, "FullyConnected", "Convolution", "Eltwise"...), `exec_type` (the implementation chosen,
"brgemm_avx512_amx_f32", "jit_avx512_f32"...: the instruction set and the precision it ran in),
`status` (EXECUTED, NOT_RUN: inputs, constants and outputs, OPTIMIZED_OUT) and `real_time` /
`cpu_time` (datetime.timedelta, whole microseconds). No start times: a record says how long a node
took, not when it started.

So a layer span's duration is OpenVINO's, but its start is placed, not measured: the nodes executed
are laid end to end from the start of their inference (the caller's clock reading just before
`infer`), in OpenVINO's order, and every such span says so with `timing: "sequential"`. One
inference request runs its nodes one after another (a node's own work may be parallel), so the
layout keeps their order and durations; the gaps between nodes (OpenVINO's own bookkeeping) fall at
the end of the inference span instead of between layers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from mlscope.runtime.trace.spans import make_span, new_span_id

__all__ = ["PROFILE_LEVELS", "ProfiledRun", "ov_profile_to_spans", "profiled_nodes"]

# The passes this converter serves.
PROFILE_LEVELS = ("FRAMEWORK", "LIBRARY")
_EXECUTED = "EXECUTED"


@dataclass(frozen=True)
class ProfiledRun:
    """One traced inference: the caller's clock (epoch ns) before and after `infer`, and the
    performance counters OpenVINO recorded for it (`profiled_nodes`)."""

    start_ns: int
    end_ns: int
    nodes: Sequence[Mapping[str, Any]]


def _ns(value: Any) -> int:
    """A timedelta (OpenVINO's times), or a number of ns, as ns."""
    if isinstance(value, timedelta):
        return (value // timedelta(microseconds=1)) * 1000
    return int(value)


def profiled_nodes(infos: Iterable[Any]) -> list[dict[str, Any]]:
    """OpenVINO's ProfilingInfo records as plain dicts {"node_name", "node_type", "exec_type",
    "status" ("EXECUTED", "NOT_RUN", "OPTIMIZED_OUT"), "real_time_ns", "cpu_time_ns"}, in their order."""
    nodes = []
    for info in infos:
        status = getattr(info.status, "name", str(info.status))
        nodes.append(
            {
                "node_name": str(info.node_name),
                "node_type": str(info.node_type),
                "exec_type": str(info.exec_type),
                "status": status.rpartition(".")[2],
                "real_time_ns": _ns(info.real_time),
                "cpu_time_ns": _ns(info.cpu_time),
            }
        )
    return nodes


def ov_profile_to_spans(
    runs: Sequence[ProfiledRun],
    *,
    trace_id: str,
    parent_id: str,
    batch_size: int,
    level: str,
    new_id: Callable[[], str] = new_span_id,
) -> list[dict[str, Any]]:
    """Spans of the traced inferences: each a MODEL span "inference" (attributes "pass",
    "batch_size", "iteration") under `parent_id`, with each node OpenVINO executed inside it, laid
    end to end from the inference's start (see the module's docstring).

    A node is, for level FRAMEWORK, a layer span (kind "layer", name and "layer" = node name,
    "layer_type" = node type, "layer_index", "implementation" = exec type, "cpu_time_ns", "timing":
    "sequential"), and for level LIBRARY an operator span (kind "operator", name = node type, "layer"
    = node name, "implementation", "cpu_time_ns", "timing"). Nodes not executed (NOT_RUN,
    OPTIMIZED_OUT) are left out. An inference span is stretched to cover its nodes when their
    durations add up to more than the caller measured (they are whole microseconds each).

    Raises:
        ValueError: an unknown level.
    """
    if level not in PROFILE_LEVELS:
        raise ValueError(f"level {level!r} is not one of {', '.join(PROFILE_LEVELS)}")
    common = {"pass": level, "batch_size": batch_size}
    spans: list[dict[str, Any]] = []
    for iteration, run in enumerate(runs):
        inference_id = new_id()
        members: list[dict[str, Any]] = []
        cursor = run.start_ns
        executed = [node for node in run.nodes if node.get("status") == _EXECUTED]
        for index, node in enumerate(executed):
            end = cursor + max(0, int(node["real_time_ns"]))
            attributes: dict[str, Any] = {
                **common,
                "layer": node["node_name"],
                "implementation": node.get("exec_type"),
                "cpu_time_ns": node.get("cpu_time_ns"),
                "timing": "sequential",
            }
            if level == "FRAMEWORK":
                attributes.update(kind="layer", layer_type=node["node_type"], layer_index=index)
                name = str(node["node_name"])
            else:
                attributes["kind"] = "operator"
                name = str(node["node_type"])
            members.append(make_span(trace_id, new_id(), inference_id, name, level, cursor, end, attributes))
            cursor = end
        spans.append(
            make_span(
                trace_id,
                inference_id,
                parent_id,
                "inference",
                "MODEL",
                run.start_ns,
                max(run.end_ns, cursor),
                {**common, "iteration": iteration},
            )
        )
        spans.extend(members)
    return spans
