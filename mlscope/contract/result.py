"""The result an evaluation reports, typed: what the predictor returns, its measurements and sections,
and the stored result the CLI, the Python API and the HTTP API read (docs/design.md, "Result shape"
and "Result sections"). The types are `TypedDict`s, so a result stays the plain JSON dict it travels
as, while mypy checks every key read and written along the way. Then what a result as a whole says
about itself beyond its figures: the verdicts a parity section may hold, the validity reason a
"different" parity gives, and whether a succeeded result may be taken as valid at all. One rule, read
by the store's comparison rows, the CLI's tables, the Python API and the HTTP API alike.

The types are read by mypy; at run time they are plain dicts. A type's `__required_keys__` is not to
be trusted (its annotations are strings here): `typing.get_type_hints(..., include_extras=True)` tells
which keys are `NotRequired`. A section's keys beyond those named here are kept as they come (the
store keeps unknown keys); the types name what code reads.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

# The predictor runtime imports these types on Python 3.9 too (Caffe2's environment): annotations stay
# unevaluated there (the __future__ import), and NotRequired, new in 3.11, is needed only where they
# are read (a type checker, `typing.get_type_hints`).
if sys.version_info >= (3, 11):
    from typing import NotRequired

__all__ = [
    "PARITY_VERDICTS",
    "Accuracy",
    "ColdStart",
    "Cost",
    "Energy",
    "ErrorInfo",
    "EvaluationResult",
    "FrameworkInfo",
    "LatencyMs",
    "Memory",
    "ModelInfo",
    "Parity",
    "PredictorResult",
    "ResultMeasurement",
    "SpooledResult",
    "Trace",
    "ValidityVerdict",
    "parity_failure",
    "result_validity",
]


class LatencyMs(TypedDict):
    """A measurement's `latency_ms`: every duration in milliseconds; `median_ci` is [low, high]."""

    count: int
    mean: float
    median: float
    p90: float
    p95: float
    p99: float
    p999: float
    min: float
    max: float
    stdev: float
    iqr: float
    cv: float
    trimmed_mean: float
    median_ci: list[float]


class ValidityVerdict(TypedDict):
    """A measurement's (or a whole result's) verdict: invalidating reasons first, then warnings."""

    valid: bool
    reasons: list[str]


class Energy(TypedDict, total=False):
    """A measurement's `energy`: the figures of a readable counter, or only `unavailable` (why none
    was readable; never estimated)."""

    joules_per_inference: float | None
    joules: float
    samples: int
    source: str
    unavailable: str


class Cost(TypedDict, total=False):
    """A measurement's `cost` at the machine's price (docs/cost.md)."""

    per_1k_inferences: float | None
    per_1m_tokens: float | None
    price_per_hour: float
    ci: list[float] | None


class ResultMeasurement(TypedDict):
    """One scenario at one batch size. The predictor's has its raw latencies, run facts and settings
    too; the store keeps every key but `latencies_ns` (read back with include_raw), and sections
    appear only when measured: `load` (server, multi_stream, generate), `generation` (generate),
    `energy`, and `cost` (added by the worker where the machine has a price). A compiled model's
    (`options.compile`) has `recompiles`, the graphs compiled while the point was measured, and past
    the first batch size `compile_ms`, its compile for this size before measuring."""

    scenario: str
    batch_size: int
    latency_ms: LatencyMs
    throughput: float | None
    validity: ValidityVerdict
    latencies_ns: NotRequired[list[int]]
    latencies_sampled: NotRequired[dict[str, int]]
    duration_s: NotRequired[float]
    stop_reason: NotRequired[str]
    warmup_count: NotRequired[int]
    environment: NotRequired[dict[str, Any]]
    settings: NotRequired[dict[str, Any]]
    load: NotRequired[dict[str, Any]]
    generation: NotRequired[dict[str, Any]]
    energy: NotRequired[Energy]
    cost: NotRequired[Cost]
    compile_ms: NotRequired[float]
    recompiles: NotRequired[int]


class ColdStart(TypedDict, total=False):
    """The result's `cold_start`, in milliseconds; `import_ms`, `load_ms` and `first_inference_ms` are
    in every stored result (a value may be null), the rest where measured (docs/warm-start.md for
    `warm_*`; `compile_ms` for a compiled model, with `compile_cached` when its compiler's cache
    supplied a graph compiled before)."""

    import_ms: float | None
    load_ms: float | None
    first_inference_ms: float | None
    fetch_ms: float
    compile_ms: float
    compile_cached: bool
    first_token_ms: float
    first_inference_error: str | None
    warm_process: bool
    warm_load_ms: float
    warm_first_inference_ms: float
    warm_source: Literal["store", "published"]
    warm_shared_mb: float
    warm_read_mb: float
    warm_publish_ms: float
    warm_unavailable: str


class Accuracy(TypedDict, total=False):
    """The result's `accuracy` on a labelled dataset (docs/accuracy.md)."""

    dataset: str
    dataset_sha256: str | None
    count: int
    task: str
    limit: int | None
    output: str
    top1: float
    top5: float
    ci: dict[str, Any]


class Parity(TypedDict, total=False):
    """The result's `parity`: its outputs compared with a reference framework's (docs/accuracy.md);
    `verdict` is one of PARITY_VERDICTS, and "unavailable" comes with the reference's `error`."""

    against: str
    count: int
    verdict: str
    max_abs: float
    mean_abs: float
    max_rel: float
    cosine: float
    top1_agreement: float | None
    tolerance: dict[str, float]
    outputs: dict[str, Any]
    error: str


class Memory(TypedDict, total=False):
    """The result's `memory`: the predictor process's peaks in MB (docs/cost.md)."""

    peak_rss_mb: float
    peak_device_mb: float | None
    rss_scope: str


class ErrorInfo(TypedDict):
    """Why an evaluation failed: its error `type`, a `message`, and the `phase` it failed in."""

    type: str
    message: str
    phase: str


class Trace(TypedDict):
    """The spans the predictor traced, which travel with its result to the store."""

    trace_id: str
    spans: list[dict[str, Any]]


class PredictorResult(TypedDict):
    """What the predictor's job returns (runtime.execute): the machine, the framework as loaded, its
    cold start and measurements, the sections it measured, and its spans. `outputs` (the raw outputs a
    parity check asked for) is taken off by the worker, which adds `parity`; a brick job's result
    holds each brick's own end under `bricks`, by evaluation id."""

    system: dict[str, Any]
    framework: dict[str, Any]
    cold_start: ColdStart
    measurements: list[ResultMeasurement]
    trace: Trace
    memory: NotRequired[Memory]
    accuracy: NotRequired[Accuracy]
    outputs: NotRequired[dict[str, Any]]
    parity: NotRequired[Parity]
    bricks: NotRequired[dict[str, Any]]


class ModelInfo(TypedDict):
    """The stored result's `model`."""

    name: str
    version: str | None
    manifest_sha256: str | None


class FrameworkInfo(TypedDict):
    """The stored result's `framework`: its name and the version it ran with; the build facts the
    predictor reported follow as further keys."""

    name: str
    version: str | None


class EvaluationResult(TypedDict):
    """A stored evaluation in the public result shape (docs/design.md), as `Store.get_evaluation`,
    `mlscope run --json`, `mlscope.evaluate` and `GET /api/v1/evaluations/{id}` give it: `accuracy`,
    `parity` and `memory` only when measured; the request and manifest it ran with as snapshots."""

    id: str
    status: str
    model: ModelInfo
    display_name: str
    framework: FrameworkInfo
    system: dict[str, Any] | None
    runner: str
    device: str
    trace_level: str
    trace_id: str | None
    queue: str | None
    attempts: int
    cold_start: ColdStart | None
    measurements: list[ResultMeasurement]
    error: ErrorInfo | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    request: dict[str, Any]
    manifest: dict[str, Any]
    accuracy: NotRequired[Accuracy]
    parity: NotRequired[Parity]
    memory: NotRequired[Memory]


class SpooledResult(TypedDict):
    """What a worker's pipeline returns instead of the stored result when the store was away and the
    evaluation's end was kept in its spool, to be written later (workers.spool)."""

    id: str
    status: str
    spooled: Literal[True]


# A parity section's verdict: its outputs agree with the reference framework's within the tolerance,
# or they do not; "unavailable" when the reference could not run (its error is kept), which claims
# nothing either way.
PARITY_VERDICTS = ("same", "different", "unavailable")


def parity_failure(parity: Mapping[str, Any] | None) -> str | None:
    """The validity reason a parity section gives, "parity different from <against>"; None when it
    passed or there is none."""
    if not parity or parity.get("verdict") != "different":
        return None
    return f"parity different from {parity.get('against') or 'the reference'}"


def result_validity(result: Mapping[str, Any]) -> ValidityVerdict:
    """Whether a succeeded result as a whole may be taken as valid, in the shape of a measurement's
    validity: {"valid": bool, "reasons": [...]}. It is not when every measurement is invalid or its
    parity was "different"; some measurements invalid leave it valid with a reason, as a measurement's
    warnings do. A result that did not succeed is not valid, with no reason: its status and error say
    why.
    """
    if result.get("status") != "succeeded":
        return {"valid": False, "reasons": []}
    valid, reasons = True, list[str]()
    measurements = result.get("measurements") or []
    invalid = sum(1 for m in measurements if (m.get("validity") or {}).get("valid") is not True)
    if not measurements:
        valid = False
        reasons.append("no measurements")
    elif invalid == len(measurements):
        valid = False
        reasons.append("every measurement invalid" if invalid > 1 else "its measurement is invalid")
    elif invalid:
        reasons.append(f"{invalid} of {len(measurements)} measurements invalid")
    failure = parity_failure(result.get("parity"))
    if failure is not None:
        valid = False
        reasons.append(failure)
    return {"valid": valid, "reasons": reasons}
