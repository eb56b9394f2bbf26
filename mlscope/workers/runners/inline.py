"""The inline runner: the predictor runs in the caller's process.

Cheapest and simplest to debug, but a framework crash takes the caller with it, the time limit
can only be checked between phases' events, and the framework stays imported afterwards (so a
second evaluation's import_ms is not a cold import: the result says `warm_process`).
"""

from __future__ import annotations

import time
from typing import ClassVar

from mlscope.contract.errors import MlscopeError
from mlscope.contract.events import Emit, PredictorEvent
from mlscope.contract.job import Job, JobFailed
from mlscope.runtime.execute import execute
from mlscope.workers.runners.base import RunLimits, Runner, RunOutcome

__all__ = ["InlineRunner"]


class _Deadline(MlscopeError):
    pass


class InlineRunner(Runner):
    NAME: ClassVar[str] = "inline"

    def _run(self, job: Job, emit: Emit, limits: RunLimits) -> RunOutcome:
        timeout_s, _, cancel = limits
        deadline = time.monotonic() + timeout_s
        phase = "import"

        def guarded(event: PredictorEvent) -> None:
            nonlocal phase
            if event["event"] == "phase":
                phase = event["phase"]
            if time.monotonic() > deadline or (cancel is not None and cancel.is_set()):
                raise _Deadline()
            emit(event)

        try:
            return RunOutcome(result=execute(job, guarded))
        except JobFailed as failure:
            if isinstance(failure.__cause__, _Deadline) and cancel is not None and cancel.is_set():
                return RunOutcome(
                    error={"type": "Cancelled", "message": "the evaluation was cancelled", "phase": phase},
                    spans=failure.spans,
                )
            if isinstance(failure.__cause__, _Deadline):
                return RunOutcome(
                    error={"type": "Timeout", "message": f"exceeded {timeout_s:g} s", "phase": phase},
                    spans=failure.spans,
                )
            return RunOutcome(error=failure.to_error(), log=failure.detail, spans=failure.spans)
