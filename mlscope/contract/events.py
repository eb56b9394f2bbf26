"""The events an evaluation tells of while it runs, typed: each a plain JSON dict tagged by its "event"
key, one per line on the predictor's pipe (docs/design.md, "Events").

The predictor (runtime.execute) emits `phase`, `progress`, `probe` and `measurement` as it goes, and
ends with one `result` or `error`, which its runner takes as the outcome rather than passing it on.
The pipeline adds `created` (the evaluation's id, once recorded) and a `phase` of its own ("parity");
an evaluation on this machine (workers.local) is framed by `start` and `end`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Literal, TypedDict, Union

from mlscope.contract.result import Energy, LatencyMs, PredictorResult, ValidityVerdict

# As in contract.result: the predictor runtime imports this module on Python 3.9 too.
if sys.version_info >= (3, 11):
    from typing import NotRequired

__all__ = [
    "CreatedEvent",
    "Emit",
    "EndEvent",
    "ErrorEvent",
    "EvaluationEvent",
    "FinalEvent",
    "MeasurementEvent",
    "PhaseEvent",
    "PredictorEvent",
    "ProbeEvent",
    "ProgressEvent",
    "ResultEvent",
    "RunEvent",
    "StartEvent",
]


class PhaseEvent(TypedDict):
    """The job entered a phase (contract.names' phases: import, fetch, load, first_inference, measure,
    accuracy, outputs, trace, report, ...); a failure names the phase it happened in. A `measure`
    phase names its point (`scenario`, `batch_size`, and `qps` where the scenario has a target rate),
    others what they work on."""

    event: Literal["phase"]
    phase: str
    scenario: NotRequired[str]
    batch_size: NotRequired[int]
    qps: NotRequired[float]
    dataset: NotRequired[str]
    count: NotRequired[int]
    level: NotRequired[str]
    bricks: NotRequired[int]
    against: NotRequired[str]


class ProgressEvent(TypedDict):
    """How far the point being measured has come: `fraction` of it, 0 to 1."""

    event: Literal["progress"]
    scenario: str
    batch_size: int
    fraction: float


class ProbeEvent(TypedDict):
    """One step of a load search (docs/load.md): a rate tried, what it achieved and whether it
    `passed`. A latency search's probe reports its percentile; a goodput search's (generate) its
    goodput and token latencies."""

    event: Literal["probe"]
    scenario: str
    batch_size: int
    target_qps: float
    achieved_qps: float | None
    completed_qps: float | None
    passed: bool
    reason: str | None
    scheduled_qps: NotRequired[float]
    queries: NotRequired[int]
    duration_s: NotRequired[float]
    p50_ms: NotRequired[float | None]
    p90_ms: NotRequired[float | None]
    p99_ms: NotRequired[float | None]
    percentile_ms: NotRequired[float | None]
    certified: NotRequired[bool]
    goodput: NotRequired[float | None]
    ttft_p50_ms: NotRequired[float | None]
    tpot_p50_ms: NotRequired[float | None]
    e2e_p50_ms: NotRequired[float | None]
    failed: NotRequired[int | None]


class MeasurementEvent(TypedDict):
    """A point measured: its figures as the result will hold them (without the raw latencies)."""

    event: Literal["measurement"]
    scenario: str
    batch_size: int
    latency_ms: LatencyMs
    throughput: float | None
    validity: ValidityVerdict
    load: dict[str, Any] | None
    energy: NotRequired[Energy | None]
    generation: NotRequired[dict[str, Any]]


class ResultEvent(TypedDict):
    """The job's end when it succeeded: its result."""

    event: Literal["result"]
    result: PredictorResult


class ErrorEvent(TypedDict):
    """The job's end when it failed: the error's `type`, `message` and `phase`, the traceback as
    `detail` (empty for the user's mistakes), and the spans traced before it failed."""

    event: Literal["error"]
    type: str
    message: str
    phase: str
    detail: str
    spans: list[dict[str, Any]]


class CreatedEvent(TypedDict):
    """The pipeline recorded the evaluation under `id` (before its predictor starts)."""

    event: Literal["created"]
    id: str


class StartEvent(TypedDict):
    """An evaluation on this machine is about to be recorded and run."""

    event: Literal["start"]


class EndEvent(TypedDict):
    """An evaluation on this machine ended, stored under `id` with `status`."""

    event: Literal["end"]
    id: str
    status: str


# The unions are made with Union, not `|`: these lines run when the module is imported, and `|` of two
# classes is an error on Python 3.9, where the predictor runtime also runs.
# What a predictor emits while it runs; its runner passes each on as it comes.
PredictorEvent = Union[PhaseEvent, ProgressEvent, ProbeEvent, MeasurementEvent]  # noqa: UP007
# How a predictor's job ends: the last event, kept by its runner as the outcome.
FinalEvent = Union[ResultEvent, ErrorEvent]  # noqa: UP007
# What the pipeline tells its caller of an evaluation: the predictor's events and its own.
RunEvent = Union[PredictorEvent, CreatedEvent]  # noqa: UP007
# What an evaluation on this machine tells its watcher (workers.local, the CLI, the Python API).
EvaluationEvent = Union[RunEvent, StartEvent, EndEvent]  # noqa: UP007

# Receives a predictor's events as they happen.
Emit = Callable[[PredictorEvent], None]
