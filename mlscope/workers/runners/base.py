"""The runner interface: where a job's predictor runs, and how its end is reported."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, cast

from mlscope.contract.events import Emit, ErrorEvent, FinalEvent, ResultEvent
from mlscope.contract.job import Job
from mlscope.contract.result import ErrorInfo, PredictorResult
from mlscope.contract.settings import Settings
from mlscope.runtime.frameworks import FrameworkSpec, installed_version

__all__ = ["RunLimits", "RunOutcome", "Runner", "ended_by", "final_outcome"]


class RunLimits(NamedTuple):
    """What bounds one job: its time limit, the predictor's memory, and the event that cancels it
    (`Runner.run`'s arguments, as each runner's `_run` receives them)."""

    timeout_s: float
    memory_limit_mb: int | None = None
    cancel: threading.Event | None = None


@dataclass(frozen=True)
class RunOutcome:
    """How a job ended: a result, or an error {type, message, phase} (exactly one is set).

    `log` holds the last lines the predictor wrote to stderr, for a failed job's diagnosis;
    `spans`, what a failed job traced before it failed (a result carries its own under "trace").
    """

    result: PredictorResult | None = None
    error: ErrorInfo | None = None
    log: str = ""
    spans: list[dict[str, Any]] = field(default_factory=list)


def final_outcome(final: FinalEvent | None, log: str) -> RunOutcome | None:
    """The outcome the predictor's final event reports (its result, or its error with the traceback
    as the log and the spans it traced); None when there is none: it died before it could say."""
    kind = final.get("event") if final is not None else None
    if kind == "result":
        return RunOutcome(result=cast(ResultEvent, final)["result"], log=log)
    if kind == "error":
        error = cast(ErrorEvent, final)
        return RunOutcome(
            error={"type": error["type"], "message": error["message"], "phase": error["phase"]},
            log=error.get("detail") or log,
            spans=error.get("spans") or [],
        )
    return None


def ended_by(ended: dict[str, str], phase: str, log: str) -> RunOutcome:
    """The outcome of a job its runner ended (`ended`: the error's type and message) in `phase`."""
    return RunOutcome(error={"type": ended["type"], "message": ended["message"], "phase": phase}, log=log)


class Runner(ABC):
    """Runs jobs somewhere: this process, a child process, a container."""

    NAME: ClassVar[str]

    @classmethod
    def from_settings(cls, settings: Settings | None) -> Runner:
        """The runner as the settings configure it (cache directory, images...); default: no settings."""
        return cls()

    def framework_version(self, spec: FrameworkSpec) -> str | None:
        """The version of the framework this runner would run a job with, or None when it cannot run
        it. Default: the one installed in this Python."""
        return installed_version(spec)

    def where(self, spec: FrameworkSpec) -> str:
        """Where this runner looks for the framework, for messages ("here", "in image X")."""
        return "here"

    def run(
        self,
        job: Job,
        emit: Emit,
        *,
        timeout_s: float,
        memory_limit_mb: int | None = None,
        cancel: threading.Event | None = None,
    ) -> RunOutcome:
        """Run a job to its end and never raise for the job's own failures.

        Args:
            job: what to run.
            emit: receives the job's events (phase, progress, measurement) as they happen.
            timeout_s: the whole job's time limit; past it the job is ended.
            memory_limit_mb: resident memory allowed to the predictor, where the runner can enforce it.
            cancel: when set, the job is ended as soon as the runner can (error type "Cancelled");
                a runner that cannot stop a job midway notices it between events.

        Returns:
            The outcome: a result, or an error naming its type, message and phase.
        """
        return self._run(job, emit, RunLimits(timeout_s, memory_limit_mb, cancel))

    @abstractmethod
    def _run(self, job: Job, emit: Emit, limits: RunLimits) -> RunOutcome:
        """This runner's way of running a job to its end within `limits` (see `run`)."""
