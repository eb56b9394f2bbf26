"""OTLP/HTTP export of stored spans: turns the store's span dicts into OpenTelemetry spans, one
Resource per process that made them, and sends them to a collector (Jaeger, the OpenTelemetry
Collector) in requests of at most `MAX_SPANS_PER_REQUEST` spans.

Used by the api and the worker once a trace is stored; never by the predictor runtime, which only
makes dicts (`workers/trace/spans.py`). OpenTelemetry is imported when an exporter is made, so the
rest of the broker runs without the `otlp` extra. Exporting is best effort: a collector that is
down or refuses costs one warning and at most `timeout_s`, never an exception or a failed job.
"""

from __future__ import annotations

import importlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from mlscope import __version__
from mlscope.contract.errors import UserError

if TYPE_CHECKING:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "HTTP_METHODS",
    "MAX_SPANS_PER_REQUEST",
    "TRACES_PATH",
    "OtlpExporter",
    "otel_attributes",
    "service_name",
    "span_kind",
    "traces_url",
]

logger = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
# The OpenTelemetry SDK's BatchSpanProcessor default batch: collectors are tuned for it.
MAX_SPANS_PER_REQUEST = 512
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})

_INT64 = range(-(2**63), 2**63)
_SCALARS = (bool, int, float, str)
# Where opentelemetry-exporter-otlp-proto-http logs a failed or retried request (the client logs
# through the exporter's logger) and where its encoder logs an attribute it could not encode.
_LIBRARY_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.common._internal",
)


def traces_url(endpoint: str) -> str:
    """The URL spans are POSTed to: the base URL (Jaeger's `http://127.0.0.1:4318`) with
    `/v1/traces` appended, or `endpoint` itself when its path already ends with `/v1/traces`.

    Raises:
        UserError: `endpoint` is not an http(s) URL with a host.
    """
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(
            f"setting otlp_endpoint={endpoint!r} is not an http(s) URL: expected e.g. http://127.0.0.1:4318",
            field="otlp_endpoint",
        )
    path = parts.path.rstrip("/")
    if not path.endswith(TRACES_PATH):
        path += TRACES_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _otel_value(value: Any) -> Any:
    """An attribute value OpenTelemetry accepts, or None to drop it."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value not in _INT64:
        return str(value)  # OTLP ints are int64; the encoder would silently drop a larger one
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)):
        kinds = {type(item) for item in value}
        # bool is an int subclass: [True, 1] is mixed, hence type() rather than isinstance().
        if len(kinds) <= 1 and kinds <= set(_SCALARS) and all(_otel_value(item) == item for item in value):
            return list(value)
    return json.dumps(value, separators=(",", ":"), default=str)


def otel_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """A span's attributes as OpenTelemetry allows them: str/bool/int/float or a homogeneous list
    of one of them; anything nested (shapes as lists of lists, dicts) becomes compact JSON; None
    values are dropped."""
    converted = {str(key): _otel_value(value) for key, value in attributes.items()}
    return {key: value for key, value in converted.items() if value is not None}


def service_name(span: Mapping[str, Any]) -> str:
    """`mlscope-<process>` for the process named by attributes["mlscope.process"] ("api",
    "worker", "predictor"), plain `mlscope` for a span that names none."""
    process = (span.get("attributes") or {}).get("mlscope.process")
    return f"mlscope-{process}" if process else "mlscope"


def span_kind(span: Mapping[str, Any]) -> str:
    """The OpenTelemetry SpanKind name of a stored span: SERVER for the api's request spans (named
    "<METHOD> <route>"), CONSUMER for a task span that took a message off a queue (it carries
    "messaging.system"), INTERNAL for every other."""
    attributes = span.get("attributes") or {}
    method = str(span.get("name", "")).split(" ", 1)[0]
    if attributes.get("mlscope.process") == "api" and method in HTTP_METHODS:
        return "SERVER"
    if attributes.get("messaging.system"):
        return "CONSUMER"
    return "INTERNAL"


class _LibraryLogCapture(logging.Filter):
    """Collects what the OTLP library logs during one of our exports on this thread, and demotes it
    to DEBUG: the exporter logs one warning of its own with the reason, instead of the library's
    error plus one warning per retry."""

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()

    @contextmanager
    def capturing(self) -> Iterator[list[str]]:
        messages: list[str] = []
        self._local.messages = messages
        try:
            yield messages
        finally:
            self._local.messages = None

    def filter(self, record: logging.LogRecord) -> bool:
        messages = getattr(self._local, "messages", None)
        if messages is not None:
            messages.append(record.getMessage())
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


_CAPTURE = _LibraryLogCapture()


def _install_capture() -> None:
    for name in _LIBRARY_LOGGERS:
        library_logger = logging.getLogger(name)
        if _CAPTURE not in library_logger.filters:
            library_logger.addFilter(_CAPTURE)


def _failure_reason(messages: Sequence[str]) -> str:
    """The library's last word on a failed request, with the first transient error it retried on
    (its last word after retries is only "due to timeout, max retries or shutdown")."""
    if not messages:
        return "the receiver did not accept the spans"
    transient = next((m for m in messages if m.startswith("Transient error")), None)
    if transient is not None and transient != messages[-1]:
        return f"{messages[-1]} (first: {transient})"
    return messages[-1]


class OtlpExporter:
    """Sends stored spans to an OTLP/HTTP receiver.

    Every request is made by a fresh `OTLPSpanExporter` given what is left of the `timeout_s`
    budget, so its retries (it backs off on connection errors, 429, 502, 503 and 504) never take
    longer than the budget over all the requests of one `export`. The OTEL_EXPORTER_OTLP_TRACES_*
    environment variables (headers, compression, certificates) apply as OpenTelemetry documents.
    Safe to share between threads.

    Args:
        endpoint: the receiver's base URL, e.g. "http://127.0.0.1:4318"; "/v1/traces" is appended
            unless the path already ends with it.
        timeout_s: the most one `export` may take, retries included.

    Raises:
        UserError: the `otlp` extra is not installed, or `endpoint` is not an http(s) URL.
        ValueError: `timeout_s` is not positive.
    """

    def __init__(self, endpoint: str, *, timeout_s: float = 10.0) -> None:
        try:
            for module in (
                "opentelemetry.sdk.trace",
                "opentelemetry.exporter.otlp.proto.http.trace_exporter",
            ):
                importlib.import_module(module)
        except ImportError as exc:
            raise UserError(
                f"exporting spans to {endpoint} needs OpenTelemetry ({exc}): pip install 'mlscope[otlp]'"
            ) from None
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r}: expected seconds > 0")
        self.endpoint = endpoint
        self.url = traces_url(endpoint)
        self.timeout_s = float(timeout_s)
        self._host = socket.gethostname()
        self._resources: dict[tuple[str, str], Resource] = {}
        self._lock = threading.Lock()
        self._in_flight: set[OTLPSpanExporter] = set()
        self._closed = False
        _install_capture()

    def export(self, spans: Sequence[Mapping[str, Any]]) -> bool:
        """Send spans (the store's dicts), grouped by the process that made them.

        Args:
            spans: span dicts of any number of traces, in any order.

        Returns:
            True when every request was accepted; False, after logging one warning naming the
            endpoint and the reason, when the receiver is down or refused or a span was malformed
            (the well-formed ones are still sent).
        """
        if self._closed:
            logger.warning("OTLP export to %s skipped: the exporter is shut down", self.url)
            return False
        deadline = time.monotonic() + self.timeout_s
        readable, malformed = self._convert(spans)
        sent = 0
        for start in range(0, len(readable), MAX_SPANS_PER_REQUEST):
            chunk = readable[start : start + MAX_SPANS_PER_REQUEST]
            remaining = deadline - time.monotonic()
            reason = self._send(chunk, remaining) if remaining > 0 else f"no time left of {self.timeout_s} s"
            if reason is not None:
                logger.warning(
                    "OTLP export to %s failed after %d of %d spans: %s%s",
                    self.url,
                    sent,
                    len(readable),
                    reason,
                    f"; {malformed[0]}" if malformed else "",
                )
                return False
            sent += len(chunk)
        if malformed:
            logger.warning(
                "OTLP export to %s left out %d malformed spans, e.g. %s",
                self.url,
                len(malformed),
                malformed[0],
            )
            return False
        return True

    def shutdown(self) -> None:
        """Stop: later exports are refused, and one in progress stops waiting to retry."""
        with self._lock:
            self._closed = True
            exporters, self._in_flight = list(self._in_flight), set()
        for exporter in exporters:
            exporter.shutdown()

    def _send(self, chunk: Sequence[ReadableSpan], timeout_s: float) -> str | None:
        """Send one request; returns None when it was accepted, else why not."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult

        with _CAPTURE.capturing() as messages:
            try:
                exporter = OTLPSpanExporter(endpoint=self.url, timeout=timeout_s)
            except Exception as exc:  # a bad OTEL_EXPORTER_OTLP_* variable, e.g. a missing certificate
                return f"{type(exc).__name__}: {exc}"
            with self._lock:
                if self._closed:
                    return "the exporter was shut down"
                self._in_flight.add(exporter)
            try:
                result = exporter.export(chunk)
            except Exception as exc:  # the library catches its own errors; this is the last resort
                return f"{type(exc).__name__}: {exc}"
            finally:
                with self._lock:
                    ours = exporter in self._in_flight
                    self._in_flight.discard(exporter)
                if ours:  # else shutdown() has closed it already, and a second close warns
                    exporter.shutdown()
        return None if result is SpanExportResult.SUCCESS else _failure_reason(messages)

    def _convert(self, spans: Sequence[Mapping[str, Any]]) -> tuple[list[ReadableSpan], list[str]]:
        """The spans as ReadableSpans, grouped by resource, and a note per span that was malformed."""
        readable: list[ReadableSpan] = []
        malformed: list[str] = []
        for span in sorted(spans, key=self._resource_key):
            try:
                readable.append(self._readable(span))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                malformed.append(f"span {span.get('span_id')!r} ({span.get('name')!r}): {exc!r}")
        return readable, malformed

    def _resource_key(self, span: Mapping[str, Any]) -> tuple[str, str]:
        attributes = span.get("attributes") or {}
        # A span may name the machine it was made on; else it was made on this one.
        return service_name(span), str(attributes.get("host.name") or self._host)

    def _resource(self, key: tuple[str, str]) -> Resource:
        from opentelemetry.sdk.resources import Resource

        if key not in self._resources:
            name, host = key
            self._resources[key] = Resource.create(
                {"service.name": name, "service.version": __version__, "host.name": host}
            )
        return self._resources[key]

    def _readable(self, span: Mapping[str, Any]) -> ReadableSpan:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        trace_id = int(span["trace_id"], 16)
        sampled = TraceFlags(TraceFlags.SAMPLED)
        context = SpanContext(trace_id, int(span["span_id"], 16), is_remote=False, trace_flags=sampled)
        parent_id = span.get("parent_id")
        parent = (
            SpanContext(trace_id, int(parent_id, 16), is_remote=False, trace_flags=sampled)
            if parent_id
            else None
        )
        if not (context.is_valid and (parent is None or parent.is_valid)):
            raise ValueError("trace or span id is zero or too long")
        attributes = dict(span.get("attributes") or {})
        error = attributes.get("error")
        attributes["mlscope.level"] = span.get("level")
        start_ns = int(span["start_ns"])
        return ReadableSpan(
            name=str(span["name"]),
            context=context,
            parent=parent,
            resource=self._resource(self._resource_key(span)),
            attributes=otel_attributes(attributes),
            kind=SpanKind[span_kind(span)],
            status=Status(StatusCode.ERROR, str(error)) if error else Status(StatusCode.UNSET),
            start_time=start_ns,
            end_time=max(int(span["end_ns"]), start_ns),
            instrumentation_scope=InstrumentationScope("mlscope", __version__),
        )
