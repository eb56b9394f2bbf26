"""The span recorder of the predictor runtime: W3C trace context, levels, nesting, one clock, and
parents rebuilt by interval containment."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.measure.loop import threaded_loop, timed_loop
from mlscope.runtime.trace.spans import Clock, TraceContext, Tracer, level_enabled, nest_by_containment

HEX32 = re.compile(r"[0-9a-f]{32}")
HEX16 = re.compile(r"[0-9a-f]{16}")


def test_traceparent_round_trips_and_rejects_what_w3c_calls_invalid() -> None:
    # Given the example of the W3C Trace Context recommendation
    header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    context = TraceContext.parse(header)
    assert context == TraceContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", sampled=True)
    assert context.traceparent() == header
    assert TraceContext.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").sampled is False
    # A future version may append fields; version 00 may not.
    assert TraceContext.parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra") is not None
    for bad in (
        None,
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
    ):
        assert TraceContext.parse(bad) is None, bad


def test_levels_nest_from_application_to_full() -> None:
    assert not level_enabled("NO_TRACE", "APPLICATION")
    assert level_enabled("MODEL", "APPLICATION") and level_enabled("MODEL", "MODEL")
    assert not level_enabled("MODEL", "FRAMEWORK")
    assert all(level_enabled("FULL", level) for level in ("APPLICATION", "LIBRARY", "HARDWARE"))
    with pytest.raises(ValueError, match="not one of"):
        Tracer("EVERYTHING")


def test_spans_nest_under_the_context_and_a_deeper_level_records_nothing() -> None:
    # Given a tracer at MODEL level continuing a caller's trace
    parent = TraceContext.new()
    tracer = Tracer("MODEL", parent)
    # When spans of several levels are opened inside each other
    with tracer.span("evaluation") as outer:
        assert outer is not None
        outer["model"] = "m"
        with tracer.span("predict"):
            tracer.add("inference", "MODEL", tracer.clock.now(), tracer.clock.now() + 5)
            with tracer.span("layer", "FRAMEWORK") as skipped:
                assert skipped is None
    # Then the deeper span is absent and the rest hang under each other, inside the caller's span
    by_name = {span["name"]: span for span in tracer.spans}
    assert set(by_name) == {"evaluation", "predict", "inference"}
    assert by_name["evaluation"]["parent_id"] == parent.span_id
    assert by_name["predict"]["parent_id"] == by_name["evaluation"]["span_id"]
    assert by_name["inference"]["parent_id"] == by_name["predict"]["span_id"]
    assert by_name["evaluation"]["attributes"] == {"model": "m"}
    for span in tracer.spans:
        assert span["trace_id"] == parent.trace_id
        assert HEX16.fullmatch(span["span_id"])
        assert span["end_ns"] >= span["start_ns"]
    outer_span, inner_span = by_name["evaluation"], by_name["predict"]
    assert outer_span["start_ns"] <= inner_span["start_ns"] <= inner_span["end_ns"] <= outer_span["end_ns"]


def test_no_trace_records_nothing_and_a_failure_is_named_on_its_span() -> None:
    silent = Tracer("NO_TRACE")
    with silent.span("evaluation") as attributes:
        assert attributes is None
    assert silent.add("inference", "MODEL", 1, 2) is None
    assert silent.spans == []

    tracer = Tracer("APPLICATION")
    assert HEX32.fullmatch(tracer.trace_id)
    with pytest.raises(RuntimeError), tracer.span("load"):
        raise RuntimeError("no such file")
    assert tracer.spans[0]["attributes"]["error"] == "RuntimeError: no such file"
    assert tracer.drain()[0]["name"] == "load"
    assert tracer.spans == []


def test_the_clock_is_the_epoch_advanced_by_the_performance_counter() -> None:
    clock = Clock()
    before = time.time_ns()
    reading = clock.now()
    after = time.time_ns()
    # The anchor is read once; allow the wall clock's granularity and a scheduler hiccup.
    assert before - 50_000_000 <= reading <= after + 50_000_000
    perf = time.perf_counter_ns()
    assert clock.from_perf(perf) == perf + clock.offset_ns


def _span(name: str, start: int, end: int, **attributes: object) -> dict:
    return {
        "trace_id": "1" * 32,
        "span_id": f"{abs(hash(name)) % 16**15 + 1:016x}",
        "parent_id": "a" * 16,
        "name": name,
        "level": "LIBRARY",
        "start_ns": start,
        "end_ns": end,
        "attributes": dict(attributes),
    }


def test_containment_finds_the_innermost_parent_per_thread() -> None:
    # Given an inference holding two layers, one with two operators, and work on another thread
    spans = [
        _span("op2", 30, 40, thread=1),
        _span("inference", 0, 100, thread=1),
        _span("layer1", 10, 50, thread=1),
        _span("op1", 10, 20, thread=1),
        _span("layer2", 50, 90, thread=1),
        _span("other-thread", 15, 45, thread=2),
        _span("outside", 200, 210, thread=1),
    ]
    ids = {span["name"]: span["span_id"] for span in spans}
    # When parents are rebuilt
    nest_by_containment(spans, key="thread")
    parents = {span["name"]: span["parent_id"] for span in spans}
    # Then each span hangs under the innermost span containing it on its own thread
    assert parents["layer1"] == ids["inference"]
    assert parents["op1"] == ids["layer1"]  # same start as its layer: the longer one is the parent
    assert parents["op2"] == ids["layer1"]
    assert parents["layer2"] == ids["inference"]  # starts where layer1 ends: a sibling, not a child
    assert parents["other-thread"] == "a" * 16  # contained by nothing on thread 2: keeps its parent
    assert parents["outside"] == "a" * 16
    assert parents["inference"] == "a" * 16


def test_the_timed_loop_records_when_each_inference_started() -> None:
    settings = MeasureSettings(warmup_count=2, warmup_seconds=0, min_count=20, min_seconds=0, max_seconds=5)

    def predict(batch: object) -> None:
        time.sleep(0.0005)

    for loop in (
        timed_loop(predict, [1], settings, record_starts=True),
        threaded_loop(predict, [1], settings, 2, record_starts=True),
    ):
        assert loop.starts_ns is not None
        assert loop.starts_ns.shape == loop.latencies_ns.shape
        assert (loop.latencies_ns >= 400_000).all()
        assert (loop.starts_ns > 0).all()
    # One thread: each inference starts after the previous one ended.
    single = timed_loop(predict, [1], settings, record_starts=True)
    assert single.starts_ns is not None
    ends = single.starts_ns + single.latencies_ns
    assert (single.starts_ns[1:] >= ends[:-1]).all()
    assert timed_loop(predict, [1], settings).starts_ns is None
    assert np.all(np.diff(single.starts_ns) > 0)


def test_a_new_trace_has_one_root_and_nothing_to_hand_on_before_it_opens() -> None:
    tracer = Tracer("APPLICATION")
    with pytest.raises(RuntimeError, match="no span is open"):
        _ = tracer.current_id
    with tracer.span("run"):
        child_context = TraceContext(tracer.trace_id, tracer.current_id)
        with tracer.span("store"):
            pass
    run, store = sorted(tracer.spans, key=lambda span: span["start_ns"])
    assert run["parent_id"] is None
    assert store["parent_id"] == run["span_id"] == child_context.span_id
