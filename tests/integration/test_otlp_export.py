"""Stored spans exported over OTLP/HTTP arrive at a real receiver (tests/otlp_receiver.py) as the
trace they are: same ids, parents and times, one service per process, errors as error status,
nested attributes as JSON; and a receiver that is down or refuses costs a bounded time and one
warning, never an exception."""

from __future__ import annotations

import gzip
import json
import logging
import math
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from mlscope.broker.otlp import MAX_SPANS_PER_REQUEST, OtlpExporter, traces_url
from mlscope.contract.errors import UserError
from mlscope.runtime.trace.spans import new_span_id, new_trace_id
from tests.otlp_receiver import OtlpReceiver

NS = 1_000_000


def make_span(
    trace_id: str, parent_id: str | None, name: str, level: str, start_ms: int, end_ms: int, **attributes: Any
) -> dict[str, Any]:
    base = 1_790_000_000_000 * NS  # an epoch time in ns, as the Tracer's clock gives
    return {
        "trace_id": trace_id,
        "span_id": new_span_id(),
        "parent_id": parent_id,
        "name": name,
        "level": level,
        "start_ns": base + start_ms * NS,
        "end_ns": base + end_ms * NS,
        "attributes": attributes,
    }


def three_process_trace() -> list[dict[str, Any]]:
    """An api request, the worker task it queued, and the predictor's spans down to an operator."""
    trace = new_trace_id()
    request = make_span(trace, None, "POST /evaluations", "APPLICATION", 0, 900, **{"mlscope.process": "api"})
    task = make_span(
        trace,
        request["span_id"],
        "mlscope.evaluate",
        "APPLICATION",
        10,
        890,
        **{"mlscope.process": "worker", "messaging.system": "redis", "job_id": "j1"},
    )
    evaluate = make_span(
        trace, task["span_id"], "evaluate", "APPLICATION", 20, 880, **{"mlscope.process": "predictor"}
    )
    inference = make_span(
        trace,
        evaluate["span_id"],
        "inference",
        "MODEL",
        30,
        70,
        **{"mlscope.process": "predictor", "pass": "FRAMEWORK", "batch_size": 1, "iteration": 0},
    )
    layer = make_span(
        trace,
        inference["span_id"],
        "layer1.0.conv1",
        "FRAMEWORK",
        31,
        40,
        **{
            "mlscope.process": "predictor",
            "kind": "layer",
            "layer_type": "Conv2d",
            "input_shapes": [[1, 64, 56, 56]],
            "output_shapes": [[1, 64, 56, 56]],
            "layer_index": 4,
        },
    )
    operator = make_span(
        trace,
        layer["span_id"],
        "aten::conv2d",
        "LIBRARY",
        32,
        39,
        **{
            "mlscope.process": "predictor",
            "kind": "operator",
            "layer": None,
            "thread": 7,
            "error": "RuntimeError: out of memory",
            "strides": [1, 1],
            "flags": [True, False],
            "mixed": [1, "a"],
            "extra": {"k": 1},
            "huge": 2**70,
        },
    )
    return [request, task, evaluate, inference, layer, operator]


def free_port() -> int:
    """A port nothing listens on (bound and released, so no other test holds it either)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
        ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
        ("https://collector.example/otlp", "https://collector.example/otlp/v1/traces"),
        ("http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318/v1/traces"),
    ],
)
def test_the_traces_path_is_appended_unless_already_there(endpoint: str, url: str) -> None:
    assert traces_url(endpoint) == url


def test_an_endpoint_that_is_not_an_http_url_is_the_users_mistake() -> None:
    with pytest.raises(UserError, match="otlp_endpoint"):
        OtlpExporter("127.0.0.1:4318")


def test_a_three_process_trace_arrives_whole() -> None:
    # Given a trace made by the api, the worker and the predictor
    spans = three_process_trace()
    with OtlpReceiver() as receiver:
        # When it is exported
        exporter = OtlpExporter(receiver.endpoint, timeout_s=5)
        accepted = exporter.export(spans)
        exporter.shutdown()
        received = {span["span_id"]: span for span in receiver.wait_for(len(spans))}

    # Then every span arrived once, with its ids, parent and times
    assert accepted
    assert len(receiver.spans) == len(spans)
    for sent in spans:
        got = received[sent["span_id"]]
        assert (got["trace_id"], got["parent_id"], got["name"]) == (
            sent["trace_id"],
            sent["parent_id"],
            sent["name"],
        )
        assert (got["start_ns"], got["end_ns"]) == (sent["start_ns"], sent["end_ns"])
        assert got["attributes"]["mlscope.level"] == sent["level"]
        process = sent["attributes"]["mlscope.process"]
        assert got["service_name"] == f"mlscope-{process}"
        assert got["resource"]["service.version"]
        assert got["resource"]["host.name"] == socket.gethostname()
    request, task, *predictor = spans
    # the api's request is a SERVER span, the worker's task a CONSUMER, the rest INTERNAL
    assert received[request["span_id"]]["kind"] == "SERVER"
    assert received[task["span_id"]]["kind"] == "CONSUMER"
    assert {received[span["span_id"]]["kind"] for span in predictor} == {"INTERNAL"}
    # only the span that failed has the error status, with its message
    errors = [span for span in received.values() if span["status_code"] == "ERROR"]
    assert [span["name"] for span in errors] == ["aten::conv2d"]
    assert errors[0]["status_message"] == "RuntimeError: out of memory"
    # shapes (lists of lists) and dicts are JSON strings; flat homogeneous lists stay lists
    layer = received[predictor[2]["span_id"]]["attributes"]
    assert isinstance(layer["input_shapes"], str)
    assert json.loads(layer["input_shapes"]) == [[1, 64, 56, 56]]
    operator = received[predictor[3]["span_id"]]["attributes"]
    assert operator["strides"] == [1, 1]
    assert operator["flags"] == [True, False]
    assert json.loads(operator["mixed"]) == [1, "a"]
    assert json.loads(operator["extra"]) == {"k": 1}
    assert operator["huge"] == str(2**70)  # beyond OTLP's int64
    assert "layer" not in operator  # None is dropped
    assert operator["thread"] == 7


def test_a_large_trace_goes_in_requests_of_at_most_512_spans() -> None:
    # Given 1300 predictor spans under one inference
    trace = new_trace_id()
    root = make_span(trace, None, "inference", "MODEL", 0, 2000, **{"mlscope.process": "predictor"})
    spans = [root] + [
        make_span(
            trace, root["span_id"], f"aten::op{i}", "LIBRARY", i, i + 1, **{"mlscope.process": "predictor"}
        )
        for i in range(1299)
    ]
    with OtlpReceiver() as receiver:
        # When they are exported
        accepted = OtlpExporter(receiver.endpoint, timeout_s=20).export(spans)
        received = receiver.wait_for(len(spans))

    # Then all arrive, once each, in as many requests as it takes at 512 a request
    assert accepted
    assert sorted(span["span_id"] for span in received) == sorted(span["span_id"] for span in spans)
    counts = [request.span_count for request in receiver.requests]
    assert len(counts) >= math.ceil(len(spans) / MAX_SPANS_PER_REQUEST) >= 3
    assert max(counts) <= MAX_SPANS_PER_REQUEST
    assert sum(counts) == len(spans)


def test_gzip_compression_from_the_environment_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given OpenTelemetry's own variable asking for gzip
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
    spans = three_process_trace()
    with OtlpReceiver() as receiver:
        # When the trace is exported
        accepted = OtlpExporter(receiver.endpoint, timeout_s=5).export(spans)
        received = receiver.wait_for(len(spans))

    # Then it went gzipped and was decoded whole
    assert accepted
    assert {request.content_encoding for request in receiver.requests} == {"gzip"}
    assert {span["span_id"] for span in received} == {span["span_id"] for span in spans}


def test_a_receiver_that_is_down_costs_one_warning_and_at_most_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given an endpoint where nothing listens
    endpoint = f"http://127.0.0.1:{free_port()}"
    exporter = OtlpExporter(endpoint, timeout_s=2)

    # When a trace is exported there
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG):
        accepted = exporter.export(three_process_trace())
    elapsed = time.monotonic() - started

    # Then it fails within the budget, with one warning naming the endpoint and why
    assert not accepted
    assert elapsed < exporter.timeout_s + 2
    [warning] = warnings_of(caplog)
    assert warning.name == "mlscope.broker.otlp"
    assert endpoint in warning.getMessage()
    assert "refused" in warning.getMessage().lower()


def test_a_receiver_answering_500_is_a_failure_without_retries(caplog: pytest.LogCaptureFixture) -> None:
    with OtlpReceiver(status=500) as receiver:
        exporter = OtlpExporter(receiver.endpoint, timeout_s=5)
        with caplog.at_level(logging.DEBUG):
            accepted = exporter.export(three_process_trace())

    assert not accepted
    assert receiver.spans == []
    assert [request.status for request in receiver.requests] == [500]
    [warning] = warnings_of(caplog)
    assert receiver.endpoint in warning.getMessage()
    assert "500" in warning.getMessage()


def test_a_receiver_answering_503_is_retried_within_the_timeout_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a receiver that is "unavailable", which OTLP says to retry
    with OtlpReceiver(status=503) as receiver:
        exporter = OtlpExporter(receiver.endpoint, timeout_s=3)
        started = time.monotonic()
        with caplog.at_level(logging.DEBUG):
            accepted = exporter.export(three_process_trace())
        elapsed = time.monotonic() - started

    # Then it was retried, but gave up within the budget with one warning
    assert not accepted
    assert len(receiver.requests) >= 2
    assert elapsed < exporter.timeout_s + 2
    assert len(warnings_of(caplog)) == 1


def test_shutdown_stops_an_export_that_is_waiting_to_retry() -> None:
    # Given an export retrying against an unavailable receiver with a long budget
    with OtlpReceiver(status=503) as receiver:
        exporter = OtlpExporter(receiver.endpoint, timeout_s=30)
        outcome: list[bool] = []
        worker = threading.Thread(target=lambda: outcome.append(exporter.export(three_process_trace())))
        started = time.monotonic()
        worker.start()
        while not receiver.requests and time.monotonic() - started < 5:
            time.sleep(0.01)
        # When the exporter is shut down meanwhile
        exporter.shutdown()
        worker.join(timeout=10)
        elapsed = time.monotonic() - started

    # Then the export gives up at once rather than after its budget, and later exports are refused
    assert outcome == [False]
    assert elapsed < 5
    assert exporter.export(three_process_trace()) is False


def test_a_malformed_span_is_left_out_and_the_rest_still_sent(caplog: pytest.LogCaptureFixture) -> None:
    spans = three_process_trace()
    broken = {**spans[-1], "span_id": "not-hex"}
    with OtlpReceiver() as receiver:
        accepted = OtlpExporter(receiver.endpoint, timeout_s=5).export([*spans[:-1], broken])
        received = receiver.wait_for(len(spans) - 1)

    assert not accepted
    assert {span["span_id"] for span in received} == {span["span_id"] for span in spans[:-1]}
    [warning] = warnings_of(caplog)
    assert "not-hex" in warning.getMessage()


def test_without_opentelemetry_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenTelemetry is installed here, so its absence is simulated: a None in sys.modules makes
    the import fail as it would on a machine without the `otlp` extra."""
    monkeypatch.setitem(
        __import__("sys").modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None
    )
    with pytest.raises(UserError, match=r"pip install 'mlscope\[otlp\]'"):
        OtlpExporter("http://127.0.0.1:4318")


def test_the_receiver_answers_404_elsewhere_and_400_to_a_bad_body() -> None:
    with OtlpReceiver() as receiver:
        statuses = []
        for path, body, headers in [
            ("/v1/metrics", b"", {"Content-Type": "application/x-protobuf"}),
            ("/v1/traces", b"not protobuf", {"Content-Type": "application/x-protobuf"}),
            (
                "/v1/traces",
                b"not gzip",
                {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            ),
            (
                "/v1/traces",
                gzip.compress(b""),
                {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            ),
        ]:
            request = urllib.request.Request(
                receiver.endpoint + path, data=body, headers=headers, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    statuses.append(response.status)
            except urllib.error.HTTPError as error:
                statuses.append(error.code)

    # an empty request is valid OTLP (no spans); garbage is not
    assert statuses == [404, 400, 400, 200]
    assert receiver.spans == []
