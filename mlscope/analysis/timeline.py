"""An evaluation's trace as a timeline: a short summary (span counts per level, the APPLICATION
phases in order) and the whole trace in the Chrome Trace Event Format, which Perfetto opens.

Pure functions over span dicts in the store's shape, like analysis/traces.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from mlscope.analysis.spans import attributes_of, duration_of
from mlscope.store.records import SPAN_LEVELS

__all__ = ["chrome_trace", "span_lane", "trace_summary"]

# The processes of an evaluation in the order a timeline shows them (attributes["mlscope.process"]).
_PROCESS_ORDER = ("api", "worker", "predictor")
_UNKNOWN_PROCESS = "mlscope"
# Numeric attributes of a hardware sample that label it rather than measure anything.
_SAMPLE_LABELS = frozenset({"batch_size", "gpu_index", "iteration"})
_LEVEL_RANK = {level: rank for rank, level in enumerate(SPAN_LEVELS)}


def _ancestry(spans: list[Mapping[str, Any]]) -> tuple[dict[str, int], dict[str, str]]:
    """Each span's depth among `spans` and the process it ran in: its own attributes["mlscope.process"],
    else its nearest ancestor's (a process labels its outermost spans), else _UNKNOWN_PROCESS."""
    by_id = {span["span_id"]: span for span in spans}
    depth: dict[str, int] = {}
    process: dict[str, str] = {}
    for span in spans:
        path: list[Mapping[str, Any]] = []
        on_path: set[str] = set()
        current: Mapping[str, Any] | None = span
        # Walks up to the first span already placed; a cycle in broken parent links ends the walk.
        while current is not None and current["span_id"] not in depth and current["span_id"] not in on_path:
            path.append(current)
            on_path.add(current["span_id"])
            current = by_id.get(current.get("parent_id") or "")
        placed = current is not None and current["span_id"] in depth
        level = depth[current["span_id"]] if placed and current else -1
        inherited = process[current["span_id"]] if placed and current else _UNKNOWN_PROCESS
        for member in reversed(path):
            level += 1
            inherited = str(attributes_of(member).get("mlscope.process") or inherited)
            depth[member["span_id"]], process[member["span_id"]] = level, inherited
    return depth, process


def trace_summary(spans: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """How many spans of each level a trace has, and its APPLICATION spans as a timeline.

    Returns:
        {"count", "levels": {level: count} (levels present, shallowest first), "start_ns",
        "end_ns" (None without spans), "timeline": [{"name", "process", "depth", "offset_ms"
        (from the trace's first start), "duration_ms", "span_id"}] ordered by start}, where depth
        counts APPLICATION ancestors only.
    """
    listed = list(spans)
    levels: dict[str, int] = {}
    for span in listed:
        levels[span["level"]] = levels.get(span["level"], 0) + 1
    application = [span for span in listed if span["level"] == "APPLICATION"]
    depth, process = _ancestry(application)
    origin = min((span["start_ns"] for span in listed), default=None)
    timeline = [
        {
            "name": span["name"],
            "process": process[span["span_id"]],
            "depth": depth[span["span_id"]],
            "offset_ms": (span["start_ns"] - (origin or 0)) / 1e6,
            "duration_ms": duration_of(span) / 1e6,
            "span_id": span["span_id"],
        }
        for span in sorted(application, key=lambda s: (s["start_ns"], -s["end_ns"], depth[s["span_id"]]))
    ]
    return {
        "count": len(listed),
        "levels": {level: levels[level] for level in sorted(levels, key=lambda lv: _LEVEL_RANK.get(lv, 99))},
        "start_ns": origin,
        "end_ns": max((span["end_ns"] for span in listed), default=None),
        "timeline": timeline,
    }


def span_lane(span: Mapping[str, Any]) -> tuple[int, str]:
    """The timeline row a span belongs on within its process, as (order, name): one per level, the
    LIBRARY work per profiler thread, and device kernels per (device, stream)."""
    attributes = attributes_of(span)
    rank = _LEVEL_RANK.get(span["level"], len(_LEVEL_RANK))
    if attributes.get("kind") == "kernel":
        return rank * 2 + 1, f"kernels device {attributes.get('device')} stream {attributes.get('stream')}"
    thread = attributes.get("thread")
    if span["level"] == "LIBRARY" and thread is not None:
        return rank * 2, f"LIBRARY thread {thread}"
    return rank * 2, str(span["level"])


def _us(ns: int) -> float:
    # Microseconds as the format wants them; an int / 1000 is the nearest double, so ns stay exact.
    return ns / 1000


def _counter_events(span: Mapping[str, Any], pid: int, origin: int) -> list[dict[str, Any]]:
    """A hardware sample as counter events, one per measured figure: a counter of several series is
    drawn stacked, which would add utilisation to megahertz."""
    ts = _us(int(span["start_ns"]) - origin)
    return [
        {
            "name": f"{span['name']} {metric}",
            "cat": "hardware",
            "ph": "C",
            "ts": ts,
            "pid": pid,
            "tid": 0,
            "args": {"value": value},
        }
        for metric, value in attributes_of(span).items()
        if metric not in _SAMPLE_LABELS
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    ]


def _metadata(kind: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _complete_event(span: Mapping[str, Any], pid: int, tid: int, origin: int) -> dict[str, Any]:
    start = int(span["start_ns"])
    return {
        "name": span["name"],
        "cat": str(span["level"]).lower(),
        "ph": "X",
        "ts": _us(start - origin),
        "dur": _us(int(span["end_ns"]) - start),
        "pid": pid,
        "tid": tid,
        "args": {
            **attributes_of(span),
            "span_id": span["span_id"],
            "parent_id": span.get("parent_id"),
            "level": span["level"],
        },
    }


def _stack_lanes(members: list[Mapping[str, Any]]) -> list[int]:
    """The sub-row of each span (sorted by start, longest first) such that spans of one sub-row nest
    or follow one another: viewers draw a row as a call stack and mangle partial overlaps."""
    open_ends: list[list[int]] = []
    placed: list[int] = []
    for span in members:
        start, end = int(span["start_ns"]), int(span["end_ns"])
        for index, stack in enumerate(open_ends):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                placed.append(index)
                break
        else:
            open_ends.append([end])
            placed.append(len(open_ends) - 1)
    return placed


def chrome_trace(evaluation: Mapping[str, Any], spans: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The trace in the Chrome Trace Event Format (JSON Object Format), which Perfetto
    (ui.perfetto.dev) and chrome://tracing open.

    One process per mlscope process (api, worker, predictor: attributes["mlscope.process"], else
    the nearest ancestor's), named by "process_name" metadata; within it one named row ("thread")
    per level, per profiler thread for LIBRARY work and per (device, stream) for kernels, split into
    numbered rows where spans overlap without nesting. Spans are complete events ("X") with ts and
    dur in microseconds from the first span's start (fractions keep the nanoseconds) and args = the
    attributes plus span_id, parent_id and level; HARDWARE samples are counter events ("C"), one
    counter per numeric figure, holding its value from the start of the interval it covers.

    Args:
        evaluation: the evaluation in the store's public shape (id, model, framework, trace_id...).
        spans: its spans, any order.

    Returns:
        {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {"evaluation_id", "model",
        "framework", "framework_version", "device", "trace_id", "trace_level", "span_count",
        "origin_unix_ns"}}, JSON-able.
    """
    listed = list(spans)
    origin = min((int(span["start_ns"]) for span in listed), default=0)
    depth, process = _ancestry(listed)
    present = set(process.values())
    pids = {name: index + 1 for index, name in enumerate(n for n in _PROCESS_ORDER if n in present)}
    lanes: dict[tuple[int, tuple[int, str]], list[Mapping[str, Any]]] = {}
    counters: list[dict[str, Any]] = []
    for span in listed:
        pid = pids.setdefault(process[span["span_id"]], len(pids) + 1)
        if span["level"] == "HARDWARE":
            counters += _counter_events(span, pid, origin)
        else:
            lanes.setdefault((pid, span_lane(span)), []).append(span)
    events = [_metadata("process_name", pid, 0, {"name": f"mlscope {name}"}) for name, pid in pids.items()]
    events += [_metadata("process_sort_index", pid, 0, {"sort_index": pid}) for pid in pids.values()]
    next_tid: dict[int, int] = {}
    for (pid, (_, lane_name)), members in sorted(lanes.items(), key=lambda item: item[0]):
        members.sort(key=lambda s: (s["start_ns"], -s["end_ns"], depth[s["span_id"]]))
        tids: dict[int, int] = {}
        for span, row in zip(members, _stack_lanes(members), strict=True):
            if row not in tids:
                tids[row] = tid = next_tid[pid] = next_tid.get(pid, 0) + 1
                label = lane_name if row == 0 else f"{lane_name} ({row + 1})"
                events += [_metadata("thread_name", pid, tid, {"name": label})]
                events += [_metadata("thread_sort_index", pid, tid, {"sort_index": tid})]
            events.append(_complete_event(span, pid, tids[row], origin))
    framework = evaluation.get("framework") or {}
    return {
        "traceEvents": events + counters,
        "displayTimeUnit": "ms",
        "otherData": {
            "evaluation_id": evaluation.get("id"),
            "model": (evaluation.get("model") or {}).get("name"),
            "framework": framework.get("name"),
            "framework_version": framework.get("version"),
            "device": evaluation.get("device"),
            "trace_id": evaluation.get("trace_id") or (listed[0]["trace_id"] if listed else None),
            "trace_level": evaluation.get("trace_level"),
            "span_count": len(listed),
            "origin_unix_ns": origin if listed else None,
        },
    }
