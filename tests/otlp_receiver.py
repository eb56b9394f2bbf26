"""A real OTLP/HTTP trace receiver for tests: what Jaeger or the OpenTelemetry Collector would do
with `POST /v1/traces`, in a thread of the test process.

It decodes the protobuf body (gzip or deflate too) exactly as a collector does and keeps every span
as a plain dict, so a test can check what arrived over the wire rather than what was handed to an
exporter. It can be told to answer an error status, to test a refusing collector.

    with OtlpReceiver() as receiver:
        OtlpExporter(receiver.endpoint).export(spans)
        received = receiver.wait_for(len(spans))
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["OtlpReceiver", "ReceivedRequest", "decode_attributes", "decode_value"]

TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class ReceivedRequest:
    """One request that reached the receiver, whatever its fate.

    Attributes:
        path: the request path.
        content_type: its Content-Type header.
        content_encoding: its Content-Encoding header ("" when absent).
        status: the status the receiver answered.
        span_count: how many spans it carried (0 unless it was decoded).
    """

    path: str
    content_type: str
    content_encoding: str
    status: int
    span_count: int


def decode_value(value: AnyValue) -> Any:
    """An OTLP AnyValue as the Python value it encodes (array → list, kvlist → dict)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [decode_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return decode_attributes(value.kvlist_value.values)
    return getattr(value, which)


def decode_attributes(attributes: Any) -> dict[str, Any]:
    """OTLP KeyValues as a dict."""
    pairs: list[KeyValue] = list(attributes)
    return {pair.key: decode_value(pair.value) for pair in pairs}


def _enum_suffix(name: str, prefix: str) -> str:
    return name[len(prefix) :] if name.startswith(prefix) else name


def _decode_spans(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    spans = []
    for resource_spans in request.resource_spans:
        resource = decode_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_id": span.parent_span_id.hex() or None,
                        "name": span.name,
                        "start_ns": span.start_time_unix_nano,
                        "end_ns": span.end_time_unix_nano,
                        "attributes": decode_attributes(span.attributes),
                        "kind": _enum_suffix(Span.SpanKind.Name(span.kind), "SPAN_KIND_"),
                        "status_code": _enum_suffix(Status.StatusCode.Name(span.status.code), "STATUS_CODE_"),
                        "status_message": span.status.message,
                        "service_name": resource.get("service.name"),
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                    }
                )
    return spans


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the exporter's requests session expects
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows what a test asserts, not an access log."""

    def do_GET(self) -> None:
        self._answer(404, b"not found", "text/plain")

    def do_POST(self) -> None:
        length = self.headers.get("Content-Length")
        body = self.rfile.read(int(length)) if length else b""
        content_type = self.headers.get("Content-Type", "")
        encoding = self.headers.get("Content-Encoding", "").strip().lower()
        status, count, answer, answer_type = self._handle(body, content_type, encoding)
        # Recorded before answering: once the exporter has its answer, the test may look.
        self.server.receiver._record(ReceivedRequest(self.path, content_type, encoding, status, count))
        self._answer(status, answer, answer_type)

    def _handle(self, body: bytes, content_type: str, encoding: str) -> tuple[int, int, bytes, str]:
        """What to answer a POST: status, spans it carried, body and its Content-Type."""
        receiver = self.server.receiver
        if self.path != TRACES_PATH:
            return 404, 0, b"not found", "text/plain"
        if content_type.split(";")[0].strip() != PROTOBUF:
            return 415, 0, f"expected {PROTOBUF}".encode(), "text/plain"
        if encoding not in ("", "identity", "gzip", "deflate"):
            return 415, 0, f"unknown Content-Encoding {encoding}".encode(), "text/plain"
        try:
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            spans = _decode_spans(request)
        except Exception as exc:  # gzip.BadGzipFile, zlib.error, protobuf's DecodeError ...
            return 400, 0, f"bad body: {exc}".encode(), "text/plain"
        if receiver.status != 200:
            return receiver.status, len(spans), b"refused by the test", "text/plain"
        receiver._keep(spans)
        return 200, len(spans), ExportTraceServiceResponse().SerializeToString(), PROTOBUF

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # an idle keep-alive connection must not hold up the test's exit
    receiver: OtlpReceiver


class OtlpReceiver:
    """An OTLP/HTTP receiver on 127.0.0.1 at a free port, running while the context is open.

    Args:
        status: what to answer a well-formed export (200 accepts it; any other refuses it, and
            its spans are counted in `requests` but not kept). May be changed while running.

    Attributes:
        endpoint: the base URL, as a collector's is configured ("http://127.0.0.1:<port>").
        spans: the accepted spans as dicts, in arrival order: trace_id/span_id/parent_id (hex,
            parent None for a root), name, start_ns/end_ns, attributes (decoded to Python values),
            kind ("SERVER", "INTERNAL", ...), status_code ("UNSET", "ERROR", ...), status_message,
            service_name and the whole resource, scope (the instrumentation scope's name).
        requests: every request received, accepted or not.
    """

    def __init__(self, *, status: int = 200) -> None:
        self.status = status
        self.spans: list[dict[str, Any]] = []
        self.requests: list[ReceivedRequest] = []
        self._changed = threading.Condition()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.endpoint = ""

    def __enter__(self) -> OtlpReceiver:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.receiver = self
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """The accepted spans once there are at least `count`.

        Raises:
            TimeoutError: fewer than `count` arrived within `timeout_s`.
        """
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while len(self.spans) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"{len(self.spans)} of {count} spans arrived at {self.endpoint} in {timeout_s} s "
                        f"({len(self.requests)} requests)"
                    )
                self._changed.wait(remaining)
            return list(self.spans)

    def _keep(self, spans: list[dict[str, Any]]) -> None:
        with self._changed:
            self.spans.extend(spans)
            self._changed.notify_all()

    def _record(self, request: ReceivedRequest) -> None:
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()
