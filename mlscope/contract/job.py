"""What a predictor process is told to do, and what it says back.

A `Job` is plain JSON so it crosses any boundary: a function call (inline runner), a pipe (process
runner), later a container's stdin. Events are dicts with an "event" key, one per line on a pipe.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from mlscope.contract.errors import MlscopeError
from mlscope.contract.names import PHASES
from mlscope.contract.result import ErrorInfo

if TYPE_CHECKING:
    from mlscope.contract.request import EvaluationRequest

__all__ = ["PHASES", "Job", "JobFailed"]


@dataclass(frozen=True)
class Job:
    """One evaluation, ready to run: a manifest snapshot and everything the predictor needs.

    Attributes:
        evaluation_id: the stored evaluation this job produces a result for.
        manifest: the validated manifest document (a snapshot: the file may change meanwhile).
        origin: where the manifest came from (for messages).
        framework: registered framework name.
        device: `cpu` or `cuda[:N]`.
        batch_sizes: batch sizes, in order.
        scenarios: scenario names, in order.
        measure: MeasureSettings as a dict.
        options: PredictorOptions as a dict.
        cache_dir: where fetched and exported graphs are cached.
        trace_level: how deep to trace (contract.names.TRACE_LEVELS).
        traceparent: the W3C trace context the predictor's spans hang under (the caller's span);
            a new trace when empty.
        dataset: the materialised dataset to measure accuracy on (`mlscope.runtime.data.DatasetRef`
            as a dict: name, path, sha256, count, limit, task, classes); empty for none.
        outputs_for: how many samples' raw outputs to return (for an output-parity check), on the
            dataset's first samples or, without a dataset, on seeded synthetic inputs; 0 for none.
            With no scenarios the job only loads the model and returns those outputs.
        load: the request's load settings (the server and multi_stream scenarios, a latency
            search): `LoadSettings.from_dict(job.load)`; empty for the defaults.
        generation: the generate scenario's settings: `GenerationSettings.from_dict(job.generation)`;
            empty for the defaults.
        model_store: the machine's model store for a warm start, {"directory", "budget_mb"}
            (settings model_store_dir, model_store_mb); empty for none (no warm start measured).
        group: a brick group's other members (options.brick), measured in this job after its own
            brick and by the same settings, each {"evaluation_id", "manifest", "origin",
            "batch_size"}; set only by a brick group's job (mlscope.workers.brick_jobs), empty for
            any other. A brick job's result has `bricks`: each brick's end (its own too) by
            evaluation id. A job dict's "companions" (an older worker's name for it) is read as
            `group`.
    """

    evaluation_id: str
    manifest: dict[str, Any]
    origin: str
    framework: str
    device: str
    batch_sizes: tuple[int, ...]
    scenarios: tuple[str, ...]
    measure: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    cache_dir: str = ""
    trace_level: str = "NO_TRACE"
    traceparent: str = ""
    dataset: dict[str, Any] = field(default_factory=dict)
    outputs_for: int = 0
    load: dict[str, Any] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)
    model_store: dict[str, Any] = field(default_factory=dict)
    group: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_request(
        cls,
        request: EvaluationRequest,
        *,
        evaluation_id: str,
        manifest: dict[str, Any],
        origin: str,
        cache_dir: str,
        traceparent: str = "",
        dataset: dict[str, Any] | None = None,
        outputs_for: int = 0,
        model_store: dict[str, Any] | None = None,
    ) -> Job:
        """The job of an admitted request: every field the two share (framework, device, batch
        sizes, scenarios, measure, options, trace level, load) is the request's, taken by name."""
        shared = {f.name: getattr(request, f.name) for f in fields(cls) if hasattr(request, f.name)}
        shared["measure"], shared["options"] = dict(request.measure), dict(request.options)
        shared["load"] = dict(request.load)
        shared["generation"] = dict(request.generation)
        # The request names a dataset; the job carries it materialised (the worker's resolution).
        shared.pop("dataset", None)
        return cls(
            evaluation_id=evaluation_id,
            manifest=manifest,
            origin=origin,
            cache_dir=cache_dir,
            traceparent=traceparent,
            dataset=dict(dataset or {}),
            outputs_for=outputs_for,
            model_store=dict(model_store or {}),
            **shared,
        )

    def to_dict(self) -> dict[str, Any]:
        """The job as plain JSON; `group` only where it has members (a brick group's job), so any
        other job's document is the same to a predictor that does not know the field."""
        data = asdict(self)
        if not self.group:
            del data["group"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        values = dict(data)
        if "companions" in values:  # a brick group's members, as an older worker names them
            values["group"] = values.pop("companions")
        values["batch_sizes"] = tuple(values["batch_sizes"])
        values["scenarios"] = tuple(values["scenarios"])
        return cls(**values)


class JobFailed(MlscopeError):
    """An evaluation that ended in error: what kind, what was said, and in which phase.

    `spans` holds what was traced up to the failure (a failed evaluation's trace shows where it
    stopped).
    """

    def __init__(self, type_: str, message: str, phase: str, detail: str = "") -> None:
        super().__init__(f"{type_} in {phase}: {message}")
        self.type = type_
        self.message = message
        self.phase = phase
        self.detail = detail
        self.spans: list[dict[str, Any]] = []

    def to_error(self) -> ErrorInfo:
        return {"type": self.type, "message": self.message, "phase": self.phase}
