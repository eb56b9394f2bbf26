"""MeasureSettings: how long to warm up and measure, when to stop, and how to judge the result.

Owns the settings of the measurement package and their validation; nothing here runs a predictor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from mlscope.contract.bounds import Bound
from mlscope.contract.errors import UserError, check_known_keys

__all__ = ["MEASURE_BOUNDS", "MeasureSettings"]

# Every setting's range, checked on construction and stated in the HTTP API's OpenAPI document.
MEASURE_BOUNDS: dict[str, Bound] = {
    "warmup_count": Bound(integer=True, low=0),
    "warmup_seconds": Bound(low=0),
    "warmup_settle": Bound(low=0, high=1, high_open=True),
    "min_count": Bound(integer=True, low=1),
    "min_seconds": Bound(low=0),
    "max_seconds": Bound(low=0),  # and ≥ min_seconds
    "stability": Bound(low=0, low_open=True, high=1, high_open=True),
    "check_every_seconds": Bound(low=0, low_open=True),
    # Fewer resamples than this leave the percentile interval resting on a handful of points.
    "bootstrap_resamples": Bound(integer=True, low=10),
    "confidence": Bound(low=0, low_open=True, high=1, high_open=True),
    "seed": Bound(integer=True, low=0),
    "trim": Bound(low=0, high=0.5, high_open=True),
    "concurrency": Bound(integer=True, low=1),
    "cv_limit": Bound(low=0, low_open=True),
    "contention_limit": Bound(low=0, low_open=True, high=1),
    "max_model_spans": Bound(integer=True, low=1),
    "trace_warmup": Bound(integer=True, low=0),
    "trace_iterations": Bound(integer=True, low=1),
    "hardware_seconds": Bound(low=0, low_open=True),
    "hardware_interval_s": Bound(low=0.01),
}


@dataclass(frozen=True)
class MeasureSettings:
    """Settings of one measurement, validated on construction.

    Warm-up:
        warmup_count: 10. Untimed iterations to run before measuring.
        warmup_seconds: 0.5. Longest warm-up that waits for the latency to settle: warm-up ends once
            warmup_count is met and either warmup_seconds has passed or the latency has settled
            (warmup_settle), or after max_seconds.
        warmup_settle: 0.02. The latency has settled when the medians of the last three windows
            of warmup_count iterations (at least 5) lie within this fraction of each other. A fast
            model is warm in tens of iterations; waiting out warmup_seconds as well costs every
            point half a second (docs/measuring.md, "When the warm-up ends", compares the two).
            0: never settled early, the warm-up lasts warmup_seconds.

    Stopping rule of the timed loop:
        min_count: 30. Minimum number of timed iterations.
        min_seconds: 2.0. Minimum duration of the timed loop.
        max_seconds: 60.0. The timed loop ends here whatever else holds (and so does a warm-up
            that has not finished by then).
        stability: 0.02. Once both minimums are met, stop as soon as the distribution-free
            `confidence` interval of the median (order statistics at ranks n/2 ± z·√n/2) has a
            half-width of at most this fraction of the median.
        check_every_seconds: 0.25. How often the stopping rule is evaluated; also as soon as both
            minimums are met and each time the count has doubled since the last check (a short
            measurement of a fast model stops when stable, not at the next interval); never inside
            a timed region.

    Statistics:
        bootstrap_resamples: 2000. Resamples of the bootstrap confidence interval of the median.
        confidence: 0.95. Confidence level of every interval.
        seed: 0. Seed of the bootstrap, so a summary is reproducible.
        trim: 0.2. Fraction cut from each tail for the trimmed mean.

    Load:
        concurrency: 1. Offline scenario only: threads issuing batches at once.

    Validity:
        cv_limit: 0.25. Coefficient of variation above which the result carries a warning.
        contention_limit: 0.25. Share of the machine's CPU time other processes may use during
            the run before the result is declared invalid.

    Tracing (used only when the request's trace_level asks for it):
        max_model_spans: 100000. MODEL spans kept per measurement (one per timed inference); a
            longer run keeps every k-th inference and says so on its "predict" span.
        trace_warmup: 2. Untraced inferences before each profiled pass (FRAMEWORK, LIBRARY).
        trace_iterations: 5. Traced inferences in each profiled pass.
        hardware_seconds: 2.0. Duration of the HARDWARE pass (inferences back to back while the
            CPU, and GPU, metrics are sampled).
        hardware_interval_s: 0.1. Sampling interval of the HARDWARE pass.
    """

    warmup_count: int = 10
    warmup_seconds: float = 0.5
    warmup_settle: float = 0.02
    min_count: int = 30
    min_seconds: float = 2.0
    max_seconds: float = 60.0
    stability: float = 0.02
    check_every_seconds: float = 0.25
    bootstrap_resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0
    trim: float = 0.2
    concurrency: int = 1
    cv_limit: float = 0.25
    contention_limit: float = 0.25
    max_model_spans: int = 100_000
    trace_warmup: int = 2
    trace_iterations: int = 5
    hardware_seconds: float = 2.0
    hardware_interval_s: float = 0.1

    def __post_init__(self) -> None:
        for name, bound in MEASURE_BOUNDS.items():
            _require(self, name, bound)
        # The one rule that relates two settings (the document of the HTTP API cannot say it).
        if self.max_seconds < self.min_seconds:
            raise UserError(
                f"measure setting max_seconds={self.max_seconds!r} is invalid: expected a number ≥ "
                f"min_seconds ({self.min_seconds})",
                field="max_seconds",
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MeasureSettings:
        """Build settings from a mapping, defaults for what it leaves out.

        Args:
            data: field names to values, e.g. parsed from a request or a manifest.

        Returns:
            The validated settings.

        Raises:
            UserError: a key is not a field (all unknown keys are named), or a value is invalid.
        """
        check_known_keys(data, [f.name for f in fields(cls)], "measure")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """Returns:
        Every field by name, JSON-serialisable; `from_dict(to_dict())` gives equal settings.
        """
        return asdict(self)


def _require(settings: MeasureSettings, name: str, bound: Bound) -> None:
    value = getattr(settings, name)
    # bool is an int subclass, but `min_count=True` is always a mistake (Bound refuses it).
    if not bound.accepts(value):
        raise UserError(
            f"measure setting {name}={value!r} is invalid: expected {bound.expected()}", field=name
        )
    if not bound.integer:
        # Frozen, so set through object; an int is coerced so to_dict() is stable across inputs.
        object.__setattr__(settings, name, float(value))


if set(MEASURE_BOUNDS) != {f.name for f in fields(MeasureSettings)}:  # pragma: no cover
    raise RuntimeError("MEASURE_BOUNDS and MeasureSettings name different settings")
