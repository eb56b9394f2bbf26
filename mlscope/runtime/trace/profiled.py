"""One profiled pass, as the runtime asks a predictor for it and the predictor hands it on to its
profiler's pass functions, and what every framework's profiled pass shares.

Runs in predictor processes of every framework, the Caffe2 environment's Python 3.9 too.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mlscope.runtime.trace.spans import Tracer

__all__ = ["ProfiledPass", "SpanConverter", "clock_offset", "pass_attributes"]


class SpanConverter(Protocol):
    """A framework's pure converter from its profiler's output to spans in the store's shape."""

    def __call__(
        self, profile: Any, /, *, trace_id: str, parent_id: str, offset_ns: int, batch_size: int
    ) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class ProfiledPass:
    """A profiled pass over one prepared batch: which level, where its spans go, how many inferences.

    Each of the `iterations` traced inferences (after `warmup` untraced ones) is a MODEL span
    "inference" under `parent_id`, with the level's spans inside it.

    Attributes:
        level: "FRAMEWORK" (layers) or "LIBRARY" (operators, and kernels on a GPU).
        tracer: where the spans go; its clock is the one every span is on.
        parent_id: the span of the pass, the inferences' parent.
        batch_size: samples per inference, an attribute of every span.
        iterations: traced inferences.
        warmup: untraced inferences first.
    """

    level: str
    tracer: Tracer
    parent_id: str
    batch_size: int
    iterations: int
    warmup: int

    @property
    def attributes(self) -> dict[str, Any]:
        """What the pass's span and every span in it carry: {"pass": level, "batch_size"}."""
        return pass_attributes(self.level, self.batch_size)

    def warm_up(self, run: Callable[[], Any]) -> None:
        """Run the `warmup` untraced inferences."""
        for _ in range(self.warmup):
            run()

    def record(self, convert: SpanConverter, profile: Any, *, offset_ns: int) -> None:
        """Keep in the tracer the spans `convert` makes of this pass's profile, under the pass's
        span, with every profiler time moved by `offset_ns` onto the tracer's clock."""
        self.tracer.extend(
            convert(
                profile,
                trace_id=self.tracer.trace_id,
                parent_id=self.parent_id,
                offset_ns=offset_ns,
                batch_size=self.batch_size,
            )
        )


def pass_attributes(level: str, batch_size: int) -> dict[str, Any]:
    """{"pass": level, "batch_size": batch_size}: what every span of a pass carries."""
    return {"pass": level, "batch_size": batch_size}


def clock_offset(readings: Mapping[int, int], starts: Mapping[int, int]) -> int:
    """What puts a profiler's times on the tracer's clock: the median of (tracer's reading before
    inference i - the profiler's start of inference i) over the inferences both saw; 0 when none
    (the profiler's clock is then taken as it is).

    The median, not the mean: one inference delayed between the reading and the profiler's start (a
    page fault, a context switch) must not move every span.

    Args:
        readings: the tracer's clock before each traced inference, by iteration.
        starts: the profiler's start of each traced inference (epoch ns), by iteration.
    """
    offsets = [reading - starts[i] for i, reading in readings.items() if i in starts]
    return round(statistics.median(offsets)) if offsets else 0
