"""MeasureSettings: how long to warm up and measure, when to stop, and how to judge the result.

Owns the settings of the measurement package and their validation; nothing here runs a predictor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from mlscope.contract.errors import UserError, check_known_keys

__all__ = ["MeasureSettings"]


@dataclass(frozen=True)
class MeasureSettings:
    """Settings of one measurement, validated on construction.

    Warm-up:
        warmup_count: 10. Untimed iterations to run before measuring.
        warmup_seconds: 0.5. Minimum warm-up duration; warm-up ends once both warmup_count and
            warmup_seconds are met, or after max_seconds.

    Stopping rule of the timed loop:
        min_count: 30. Minimum number of timed iterations.
        min_seconds: 2.0. Minimum duration of the timed loop.
        max_seconds: 60.0. The timed loop ends here whatever else holds (and so does a warm-up
            that has not finished by then).
        stability: 0.02. Once both minimums are met, stop as soon as the distribution-free
            `confidence` interval of the median (order statistics at ranks n/2 ± z·√n/2) has a
            half-width of at most this fraction of the median.
        check_every_seconds: 0.25. How often the stopping rule is evaluated; never inside a
            timed region.

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
        _require_int(self, "warmup_count", 0)
        _require_float(self, "warmup_seconds", "a number ≥ 0", lambda v: v >= 0)
        _require_int(self, "min_count", 1)
        _require_float(self, "min_seconds", "a number ≥ 0", lambda v: v >= 0)
        _require_float(
            self,
            "max_seconds",
            f"a number ≥ min_seconds ({self.min_seconds})",
            lambda v: v >= self.min_seconds,
        )
        _require_float(self, "stability", "a number in (0, 1)", lambda v: 0 < v < 1)
        _require_float(self, "check_every_seconds", "a number > 0", lambda v: v > 0)
        # Fewer resamples than this leave the percentile interval resting on a handful of points.
        _require_int(self, "bootstrap_resamples", 10)
        _require_float(self, "confidence", "a number in (0, 1)", lambda v: 0 < v < 1)
        _require_int(self, "seed", 0)
        _require_float(self, "trim", "a number in [0, 0.5)", lambda v: 0 <= v < 0.5)
        _require_int(self, "concurrency", 1)
        _require_float(self, "cv_limit", "a number > 0", lambda v: v > 0)
        _require_float(self, "contention_limit", "a number in (0, 1]", lambda v: 0 < v <= 1)
        _require_int(self, "max_model_spans", 1)
        _require_int(self, "trace_warmup", 0)
        _require_int(self, "trace_iterations", 1)
        _require_float(self, "hardware_seconds", "a number > 0", lambda v: v > 0)
        _require_float(self, "hardware_interval_s", "a number ≥ 0.01", lambda v: v >= 0.01)

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


def _require_int(settings: MeasureSettings, name: str, minimum: int) -> None:
    value = getattr(settings, name)
    # bool is an int subclass, but `min_count=True` is always a mistake.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(
            f"measure setting {name}={value!r} is invalid: expected an integer ≥ {minimum}", field=name
        )


def _require_float(
    settings: MeasureSettings, name: str, expected: str, accept: Callable[[float], bool]
) -> None:
    value = getattr(settings, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or not accept(value):
        raise UserError(f"measure setting {name}={value!r} is invalid: expected {expected}", field=name)
    # Frozen, so set through object; an int is coerced so to_dict() is stable across inputs.
    object.__setattr__(settings, name, float(value))
