"""The generate scenario: requests of a prompt and a forced output length, each timed token by token,
against a generation engine (a model generating in the predictor's process, or an OpenAI-compatible
endpoint). It runs the whole job itself (`Scenario.RUNS_JOB`): the engine replaces the predictor's
loaded model, and its requests replace `predict` on prepared batches. The engines, the request
driver and the `generation` section's reduction live in `mlscope.runtime.generate`, imported only
when a generate job runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure.loop import LoopResult
from mlscope.runtime.measure.scenario_base import JobRun, Outcome, RunContext, Scenario, WholeJob
from mlscope.runtime.measure.stats import LatencySummary

if TYPE_CHECKING:
    from mlscope.runtime.frameworks import FrameworkSpec

__all__ = ["Generate"]


class Generate(Scenario):
    """Generation requests, back to back, at a fixed concurrency or as Poisson arrivals; throughput is
    output tokens per second, the latency a request's end to end (docs/generate.md)."""

    NAME: ClassVar[str] = "generate"
    RUNS_JOB: ClassVar[bool] = True
    NEEDS: ClassVar[str] = "one that generates tokens in process, or --endpoint URL"

    def runs_on(self, framework: FrameworkSpec) -> bool:
        return framework.generates

    def phase_detail(self, load: LoadSettings) -> dict[str, Any]:
        return {"qps": load.qps} if load.qps is not None else {}

    def run_job(self, whole: WholeJob) -> JobRun:
        # Imported here: a job of the other scenarios (a Caffe2 environment's, too) never needs it.
        from mlscope.runtime.generate.job import run_generate_job

        return run_generate_job(
            whole.predictor, whole.job, whole.settings, whole.enter, whole.emit, whole.tracer
        )

    def _outcome(self, run: RunContext) -> Outcome:
        raise NotImplementedError(
            "the generate scenario sends requests to an engine (run_job), not batches to predict"
        )

    def _throughput(self, loop: LoopResult, summary: LatencySummary, batch_size: int) -> float:
        raise NotImplementedError(
            "the generate scenario's throughput is its engine's output tokens per second"
        )
