"""The MXNet profiler converter on events shaped like a real MXNet 1.9.1 dump (see
runtime/predictors/mxnet/profile.py): operators as "B"/"E" pairs on the device's pid and again as async
"b"/"e" pairs, mlscope's tasks as "b"/"e" pairs in the "mlscope" domain, engine bookkeeping, events
out of time order, and later dumps appended to the same file as continuations."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from mlscope.runtime.predictors.mxnet.profile import mx_inference_starts, mx_profile_to_spans, read_dump

ENGINE_TID = 15496377576671395674  # MXNet's thread ids are 64-bit hashes
PYTHON_TID = 18213698599492368631
T0 = 1795319244873942  # µs since the epoch, as MXNet writes "ts"


def operator(name: str, start: int, end: int) -> list[dict[str, Any]]:
    """An operator as MXNet lists it: a B/E pair on the device (pid 0) and an async b/e copy."""
    sync = [
        {"name": name, "cat": "operator", "ph": phase, "ts": ts, "pid": 0, "tid": ENGINE_TID}
        for phase, ts in (("B", start), ("E", end))
    ]
    copy = [
        {"name": name, "cat": "operator", "ph": phase, "ts": ts, "id": ENGINE_TID, "pid": 3060606181218273969,
         "tid": ENGINE_TID}
        for phase, ts in (("b", start), ("e", end))
    ]  # fmt: skip
    return sync + copy


def task(name: str, start: int, end: int) -> list[dict[str, Any]]:
    return [
        {"name": name, "cat": "mlscope", "ph": phase, "ts": ts, "id": PYTHON_TID, "pid": 5860558487921547662,
         "tid": PYTHON_TID}
        for phase, ts in (("b", start), ("e", end))
    ]  # fmt: skip


def two_inferences() -> list[dict[str, Any]]:
    """Two inferences of conv -> relu block, then an inline add outside any block, in list order as
    MXNet writes them: operators as they end, tasks when they stop (after their operators)."""
    events: list[dict[str, Any]] = [{"ph": "M", "args": {"name": "cpu/0"}, "pid": 0, "name": "process_name"}]
    events += operator("Convolution", T0 - 500, T0 - 400)  # a warm-up's: before every inference
    for i, base in enumerate((T0, T0 + 1000)):
        events += operator("Convolution", base + 10, base + 300)
        events += operator("DeleteVariable", base + 301, base + 302)
        events += operator("Activation", base + 320, base + 400)
        events += operator("broadcast_add", base + 420, base + 480)
        events += operator("WaitForVar", base + 481, base + 483)
        events += task("mlscope.layer:features.0", base + 5, base + 305)
        events += task("mlscope.layer:features.1", base + 310, base + 410)
        events += task(f"mlscope.inference#{i}", base, base + 490)
    return events


def ids() -> Any:
    counter = itertools.count()
    return lambda: f"{next(counter):016x}"


def test_inferences_hold_their_operators_each_knowing_its_layer() -> None:
    # Given a dump of two traced inferences
    spans = mx_profile_to_spans(
        two_inferences(), trace_id="t" * 32, parent_id="p" * 16, offset_ns=0, batch_size=4, new_id=ids()
    )
    # Then there is an inference span per task, under the pass, in order
    inferences = [s for s in spans if s["name"] == "inference"]
    assert [s["attributes"]["iteration"] for s in inferences] == [0, 1]
    assert all(s["parent_id"] == "p" * 16 and s["level"] == "MODEL" for s in inferences)
    assert inferences[0]["start_ns"] == T0 * 1000 and inferences[0]["end_ns"] == (T0 + 490) * 1000
    # And each holds its three operators once (the async copies and the bookkeeping left out)
    for inference in inferences:
        inside = [s for s in spans if s["parent_id"] == inference["span_id"]]
        assert [s["name"] for s in inside] == ["Convolution", "Activation", "broadcast_add"]
        assert [s["attributes"]["layer"] for s in inside] == ["features.0", "features.1", None]
        for span in inside:
            assert span["level"] == "LIBRARY" and span["attributes"]["kind"] == "operator"
            assert span["attributes"]["thread"] == str(ENGINE_TID)
            assert span["attributes"]["pass"] == "LIBRARY" and span["attributes"]["batch_size"] == 4
            assert "layer_type" not in span["attributes"]
            assert inference["start_ns"] <= span["start_ns"] <= span["end_ns"] <= inference["end_ns"]
    # And the warm-up's operator, outside every inference, is dropped
    assert len(spans) == 2 + 2 * 3


def test_times_are_shifted_by_the_offset_and_an_inference_covers_its_operators() -> None:
    events = two_inferences()
    # Given an operator that ended after its inference's task stopped (the task stops on the Python
    # thread, the operator ends on the engine's)
    events += operator("FullyConnected", T0 + 485, T0 + 495)
    spans = mx_profile_to_spans(events, trace_id="t" * 32, parent_id="p" * 16, offset_ns=-7, batch_size=1)
    first = next(s for s in spans if s["name"] == "inference")
    dense = next(s for s in spans if s["name"] == "FullyConnected")
    assert dense["start_ns"] == (T0 + 485) * 1000 - 7
    assert dense["parent_id"] == first["span_id"] and first["end_ns"] == dense["end_ns"]


def test_inference_starts_are_the_profilers_own_times() -> None:
    assert mx_inference_starts(two_inferences()) == {0: T0 * 1000, 1: (T0 + 1000) * 1000}
    assert mx_inference_starts(operator("Convolution", 1, 2)) == {}


def dump_text(events: list[dict[str, Any]]) -> str:
    """A first dump as MXNet writes it (indented, blank lines before the closing bracket)."""
    body = "\n,\n".join(json.dumps(event, indent=4) for event in events)
    return '{\n    "traceEvents": [\n' + body + '\n\n\n    ],\n    "displayTimeUnit": "ms"\n}\n'


def continuation_text(events: list[dict[str, Any]]) -> str:
    """A later dump: appended to the same file, without the header."""
    body = "\n,\n".join(json.dumps(event, indent=4) for event in events)
    return ",\n\n" + body + '\n\n\n    ],\n    "displayTimeUnit": "ms"\n}\n'


def test_a_dump_file_is_read_piece_by_piece() -> None:
    # Given a file holding a first dump and, appended, a second one
    first, second = two_inferences(), task("mlscope.inference#0", T0 + 5000, T0 + 5100)
    text = dump_text(first) + continuation_text(second)
    split = len(dump_text(first))
    # Then the whole file is not JSON, but each piece reads as its own events
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert read_dump(text[:split]) == first
    assert read_dump(text[split:]) == second
    with pytest.raises(ValueError, match="not an MXNet profiler dump"):
        read_dump("[]")
