"""The result and event types (contract/result.py, contract/events.py) against the result shape the
docs fix (tests/result_shape.py) and against each other: the types cannot say other than the
design of record, and every event kind has one type, told apart by its "event" tag."""

from __future__ import annotations

import typing

from mlscope.contract import events, result
from tests.fixtures.typed_keys import declared_keys, required_keys, tag
from tests.result_shape import LATENCY_KEYS, RESULT_KEYS


def test_the_stored_result_type_requires_exactly_the_result_shape() -> None:
    # The public shape, plus the request and manifest snapshots the store returns with it
    assert required_keys(result.EvaluationResult) == RESULT_KEYS | {"request", "manifest"}
    # ... and the sections, present only when measured
    optional = declared_keys(result.EvaluationResult) - required_keys(result.EvaluationResult)
    assert optional == {"accuracy", "parity", "memory"}
    assert required_keys(result.LatencyMs) == declared_keys(result.LatencyMs) == LATENCY_KEYS
    assert required_keys(result.ValidityVerdict) == {"valid", "reasons"}


def test_a_measurement_type_requires_what_every_scenario_reports() -> None:
    assert required_keys(result.ResultMeasurement) == {
        "scenario",
        "batch_size",
        "latency_ms",
        "throughput",
        "validity",
    }
    # The sections docs/design.md places on each measurement are all declared, none required
    optional = declared_keys(result.ResultMeasurement) - required_keys(result.ResultMeasurement)
    assert {"load", "generation", "energy", "cost"} <= optional
    # ... and a section of which nothing is certain has every key optional
    assert required_keys(result.ColdStart) == required_keys(result.Energy) == set()


def test_every_event_kind_has_one_type_named_by_itstag() -> None:
    kinds = typing.get_args(events.EvaluationEvent)
    tags = [tag(kind) for kind in kinds]
    assert sorted(tags) == sorted(["phase", "progress", "probe", "measurement", "created", "start", "end"]), (
        tags
    )
    assert [tag(kind) for kind in typing.get_args(events.PredictorEvent)] == [
        "phase",
        "progress",
        "probe",
        "measurement",
    ]
    assert sorted(tag(kind) for kind in typing.get_args(events.FinalEvent)) == ["error", "result"]
    # Every event type requires its tag
    for kind in (*kinds, *typing.get_args(events.FinalEvent)):
        assert "event" in required_keys(kind), kind


def test_an_error_event_carries_the_error_of_a_failed_result() -> None:
    error_keys = required_keys(result.ErrorInfo)
    assert error_keys == declared_keys(result.ErrorInfo) == {"type", "message", "phase"}
    assert error_keys < required_keys(events.ErrorEvent)
