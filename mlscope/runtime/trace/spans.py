"""Spans as plain dicts, one clock for every process on a machine, and parent links rebuilt by
interval containment.

A span here has exactly the shape the store keeps (`Store.save_spans`): {"trace_id", "span_id",
"parent_id", "name", "level", "start_ns", "end_ns", "attributes"}, times in nanoseconds since the
Unix epoch (OpenTelemetry's convention). The worker turns them into OpenTelemetry spans for OTLP.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from mlscope.contract.names import LEVEL_RANK, TRACE_LEVELS, level_enabled

__all__ = [
    "LEVEL_RANK",
    "Clock",
    "TraceContext",
    "Tracer",
    "level_enabled",
    "make_span",
    "nest_by_containment",
    "new_span_id",
    "new_trace_id",
]


_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


def new_trace_id() -> str:
    """A random 128-bit trace id as 32 lower-case hex digits (never all zero, W3C's invalid id)."""
    while True:
        value = secrets.token_hex(16)
        if value.strip("0"):
            return value


def new_span_id() -> str:
    """A random 64-bit span id as 16 lower-case hex digits (never all zero)."""
    while True:
        value = secrets.token_hex(8)
        if value.strip("0"):
            return value


@dataclass(frozen=True)
class TraceContext:
    """Where a process's spans hang in the trace: the trace id and the id of their parent span.

    Travels between processes as a W3C `traceparent` header value (`00-<trace>-<parent>-<flags>`).
    """

    trace_id: str
    span_id: str
    sampled: bool = True

    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"

    @classmethod
    def parse(cls, header: str | None) -> TraceContext | None:
        """The context in a `traceparent` value, or None when it is absent or malformed (W3C says a
        receiver then starts a new trace rather than fail)."""
        if not header:
            return None
        match = _TRACEPARENT.fullmatch(header.strip())
        if match is None:
            return None
        version, trace_id, span_id, flags, rest = match.groups()
        if version == "ff" or (version == "00" and rest) or not trace_id.strip("0") or not span_id.strip("0"):
            return None
        return cls(trace_id, span_id, sampled=bool(int(flags, 16) & 1))

    @classmethod
    def new(cls) -> TraceContext:
        return cls(new_trace_id(), new_span_id())


class Clock:
    """Epoch nanoseconds read through the monotonic performance counter.

    Anchored to the wall clock once, so spans from the api, the worker and the predictor process on
    one machine line up; advanced by `perf_counter_ns`, so durations within a process are exact and
    never jump when NTP adjusts the wall clock.
    """

    def __init__(self) -> None:
        self.offset_ns = time.time_ns() - time.perf_counter_ns()

    def now(self) -> int:
        return time.perf_counter_ns() + self.offset_ns

    def from_perf(self, perf_ns: int) -> int:
        """The epoch time of a `time.perf_counter_ns()` reading."""
        return perf_ns + self.offset_ns


class Tracer:
    """Records the spans of one process at or above the requested level.

    `span()` nests: a span's parent is the innermost open span, else the context's span (none: the
    span is the root of a new trace). A span
    deeper than the requested level records nothing and costs one dict lookup.

    Attributes:
        level: the requested trace level.
        context: the trace and parent span this process's spans belong to; None starts a new trace.
        spans: the recorded spans, in the order they ended.
    """

    def __init__(self, level: str, context: TraceContext | None = None, clock: Clock | None = None) -> None:
        if level not in LEVEL_RANK:
            raise ValueError(f"trace level {level!r} is not one of {', '.join(TRACE_LEVELS)}")
        self.level = level
        self.rank = LEVEL_RANK[level]
        self.context = context
        self._trace_id = context.trace_id if context is not None else new_trace_id()
        self.clock = clock if clock is not None else Clock()
        self.spans: list[dict[str, Any]] = []
        self._stack: list[str] = []

    @property
    def trace_id(self) -> str:
        return self._trace_id

    @property
    def current_id(self) -> str:
        """The id of the innermost open span, else the context's span: where work started now hangs.

        Raises:
            RuntimeError: no span is open in a new trace (there is nothing to hang under yet).
        """
        parent = self._parent_id()
        if parent is None:
            raise RuntimeError("no span is open: open one before handing its context on")
        return parent

    def _parent_id(self) -> str | None:
        if self._stack:
            return self._stack[-1]
        return self.context.span_id if self.context is not None else None

    def enabled(self, level: str) -> bool:
        return self.rank > 0 and LEVEL_RANK[level] <= self.rank

    @contextmanager
    def span(
        self,
        name: str,
        level: str = "APPLICATION",
        *,
        parent_id: str | None = None,
        span_id: str | None = None,
        **attributes: Any,
    ) -> Iterator[dict[str, Any] | None]:
        """Record the enclosed work as a span; yields its attributes (add to them while it runs), or
        None when `level` is not traced. The span is kept also when the work raises, with
        attributes["error"] naming the exception.

        Args:
            parent_id: its parent; default: the innermost open span (else the context's).
            span_id: its id, when the caller needs it before the span ends (a profiled pass's
                inference, which the layers inside it name); default: a new one.
        """
        with self._record(name, level, parent_id, span_id, None, attributes) as recorded:
            yield recorded

    @contextmanager
    def span_since(
        self, start_ns: int, name: str, level: str = "APPLICATION", **attributes: Any
    ) -> Iterator[dict[str, Any] | None]:
        """`span`, for work that began before the span could be opened (at `start_ns`, epoch ns: a
        framework imported ahead of its job)."""
        with self._record(name, level, None, None, start_ns, attributes) as recorded:
            yield recorded

    @contextmanager
    def _record(
        self,
        name: str,
        level: str,
        parent_id: str | None,
        span_id: str | None,
        start_ns: int | None,
        attributes: dict[str, Any],
    ) -> Iterator[dict[str, Any] | None]:
        if not self.enabled(level):
            yield None
            return
        span_id = span_id or new_span_id()
        parent_id = parent_id if parent_id is not None else self._parent_id()
        self._stack.append(span_id)
        start = start_ns if start_ns is not None else self.clock.now()
        try:
            yield attributes
        except BaseException as exc:
            attributes["error"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            end = self.clock.now()
            self._stack.pop()
            self.spans.append(self._make(span_id, parent_id, name, level, start, end, attributes))

    def add(
        self,
        name: str,
        level: str,
        start_ns: int,
        end_ns: int,
        *,
        parent_id: str | None = None,
        attributes: dict[str, Any] | None = None,
        span_id: str | None = None,
    ) -> str | None:
        """Record a span whose times are known (epoch ns); returns its id, or None when `level` is not
        traced. Its parent is `parent_id`, else the innermost open span."""
        if not self.enabled(level):
            return None
        span_id = span_id or new_span_id()
        parent = parent_id if parent_id is not None else self._parent_id()
        self.spans.append(self._make(span_id, parent, name, level, start_ns, end_ns, attributes or {}))
        return span_id

    def drain(self) -> list[dict[str, Any]]:
        """The spans recorded so far (ended ones only), forgotten here: they are being kept elsewhere."""
        spans, self.spans = self.spans, []
        return spans

    def extend(self, spans: Sequence[dict[str, Any]]) -> None:
        """Keep spans made elsewhere (a profiler's converter), those of a traced level only."""
        self.spans.extend(span for span in spans if self.enabled(span["level"]))

    def _make(
        self,
        span_id: str,
        parent_id: str | None,
        name: str,
        level: str,
        start: int,
        end: int,
        attributes: dict[str, Any],
    ) -> dict[str, Any]:
        return make_span(self._trace_id, span_id, parent_id, name, level, start, end, attributes)


def make_span(
    trace_id: str,
    span_id: str,
    parent_id: str | None,
    name: str,
    level: str,
    start_ns: int,
    end_ns: int,
    attributes: dict[str, Any],
) -> dict[str, Any]:
    """A span dict in the store's shape; an end before the start (clock granularity) is clamped."""
    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_id": parent_id,
        "name": name,
        "level": level,
        "start_ns": int(start_ns),
        "end_ns": int(max(end_ns, start_ns)),
        "attributes": attributes,
    }


def nest_by_containment(spans: list[dict[str, Any]], *, key: str | None = None) -> None:
    """Set each span's parent_id to the innermost other span of the list whose interval contains
    it, in place; a span contained by none keeps its parent_id.

    Spans are nested within groups of equal `attributes[key]` (e.g. the thread a profiler saw them
    on) when `key` is given: work on another thread overlaps in time without being part of it.
    A span contains another when it starts no later and ends no earlier; of two spans with the same
    interval, the one listed first (or, from a profiler, the outer one it reported first) is the
    parent.
    """
    groups: dict[Any, list[tuple[int, dict[str, Any]]]] = {}
    for order, span in enumerate(spans):
        group = span["attributes"].get(key) if key is not None else None
        groups.setdefault(group, []).append((order, span))
    for members in groups.values():
        members.sort(key=lambda item: (item[1]["start_ns"], -item[1]["end_ns"], item[0]))
        open_spans: list[dict[str, Any]] = []
        for _, span in members:
            while open_spans and open_spans[-1]["end_ns"] < span["start_ns"]:
                open_spans.pop()
            # Well-nested input finds its parent on top; a profiler's partial overlaps look deeper.
            for candidate in reversed(open_spans):
                if candidate["end_ns"] >= span["end_ns"]:
                    span["parent_id"] = candidate["span_id"]
                    break
            open_spans.append(span)
