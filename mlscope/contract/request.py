"""The evaluation request: what a client may ask for, validated at the boundary.

Every way in (the CLI today, HTTP and the queue with the farm) loads a request through
`parse_request`, so a bad value gets the same message whichever door it came through.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, post_load, validate, validates_schema

from mlscope.contract.errors import UserError
from mlscope.contract.generation import ENDPOINT_FRAMEWORK, GenerationSettings
from mlscope.contract.interactive import INTERACTIVE_CAPS, INTERACTIVE_PERCENTILE, interactive_caps
from mlscope.contract.load import LoadSettings
from mlscope.contract.names import RUNNERS, TRACE_LEVELS, runner_names, scenario_names
from mlscope.contract.options import PredictorOptionsSchema
from mlscope.contract.queues import TARGET_PATTERN, parse_target
from mlscope.contract.steps import DTYPES

__all__ = ["DEVICE_PATTERN", "MAX_TIMEOUT_S", "RUNNERS", "TRACE_LEVELS", "EvaluationRequest", "parse_request"]

DEVICE_PATTERN = re.compile(r"^(cpu|cuda(:\d+)?)$")
MAX_BATCH_SIZE = 65536
# The longest time limit a request may set (a week); the broker's redelivery backstop follows it.
MAX_TIMEOUT_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class EvaluationRequest:
    """One model on one framework, measured at each batch size in each scenario.

    Attributes:
        model: a manifest name (`mlscope models` lists them).
        framework: a registered framework name.
        batch_sizes: batch sizes to measure, each ≥ 1.
        scenarios: measurement scenarios: `single_stream` (back-to-back latency), `offline`
            (throughput), `server` (Poisson arrivals at `load.qps`), `multi_stream` (a query of
            `load.samples_per_query` samples every `load.interval_ms`).
        device: `cpu`, `cuda` or `cuda:N`.
        runner: `process` (a child process: a crash or hang ends only the evaluation), `docker` (the
            framework's predictor image, no network) or `inline`.
        trace_level: how deep to trace: NO_TRACE, APPLICATION (phases), MODEL (each inference),
            FRAMEWORK (layers, a profiled pass), LIBRARY (operators and kernels, another pass),
            HARDWARE (CPU/GPU metrics sampled in a pass of their own), FULL (all of it, with
            operators' call stacks). Deeper levels never touch the latency figures.
        measure: overrides of the measurement settings (see MeasureSettings).
        options: predictor options: threads, inter_op_threads, graph_optimization_level,
            execution_providers, input_pool.
        timeout_s: the whole evaluation's time limit in seconds.
        memory_limit_mb: the predictor process's resident-memory limit, or None.
        target: where a farm runs it: a capability (`cpu.x86_64`, `gpu`) or one agent
            (`agent:<id>`); None means `cpu` for a CPU device and `gpu` otherwise. A local run
            (`mlscope run`) ignores it.
        model_options: what turns the model reference into its manifest (see
            `mlscope.registry.references.ModelOptions`): `input_shapes` ({input name or "": full
            shape, batch axis first}), `config` (a Hugging Face config's overrides), `weights` (a
            local checkpoint); empty for none.
        dataset: measure accuracy on this dataset too: a built-in name (`digits`, `sample_photos`),
            a local folder (ImageFolder layout or a labels file; never over HTTP) or an uploaded
            one (`sha256:<hex>`); None for a performance-only run on synthetic inputs.
        limit: evaluate only the dataset's first N samples (deterministic order); None for all.
        check_parity: also run the same inputs through `parity_against` and attach the output
            comparison (`parity`) to the result; a "different" verdict makes the result invalid.
        parity_against: the reference framework for `check_parity`; None picks the model's first
            other framework (PyTorch where it has one).
        tolerance: the parity check's relative tolerance; None for the outputs' dtype's default.
        load: the load settings of the server and multi_stream scenarios and of a latency search
            (`mlscope.contract.load.LoadSettings`): only the settings given, validated (numbers as
            floats); empty for the defaults.
        generation: the generate scenario's settings (`mlscope.contract.generation
            .GenerationSettings`: lengths, concurrency, slo, endpoint): only the settings given,
            validated; empty for the defaults.
    """

    model: str
    framework: str
    batch_sizes: tuple[int, ...] = (1,)
    scenarios: tuple[str, ...] = ("single_stream",)
    device: str = "cpu"
    runner: str = "process"
    trace_level: str = "NO_TRACE"
    measure: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 1800.0
    memory_limit_mb: int | None = None
    target: str | None = None
    model_options: dict[str, Any] = field(default_factory=dict)
    dataset: str | None = None
    limit: int | None = None
    check_parity: bool = False
    parity_against: str | None = None
    tolerance: float | None = None
    load: dict[str, Any] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)

    @property
    def effective_target(self) -> str:
        return self.target or ("cpu" if self.device == "cpu" else "gpu")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["batch_sizes"] = list(self.batch_sizes)
        data["scenarios"] = list(self.scenarios)
        return data


def _check_measure_value(value: object) -> None:
    if not isinstance(value, int | float | bool):
        raise ValidationError("must be a number or true/false")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError("must be a finite number")


class _Installed(validate.Validator):
    """One of a set of names read when first used rather than at import (marshmallow's `OneOf`
    takes them at import): mlscope's own and those installed plugins declare, so importing the
    contract reads no package metadata. Its message is `OneOf`'s, and the OpenAPI document lists
    `choices` as the enum."""

    def __init__(self, names: Callable[[], tuple[str, ...]]) -> None:
        self._names = names

    @property
    def choices(self) -> tuple[str, ...]:
        return self._names()

    def __call__(self, value: Any) -> Any:
        return validate.OneOf(self._names())(value)


def _check_target(value: str) -> None:
    try:
        parse_target(value)
    except UserError as exc:
        raise ValidationError(exc.message.partition(": ")[2] or exc.message) from None


class SettingsField(fields.Dict):
    """A request's settings section (`load`, `generation`): the settings its class's `from_dict`
    accepts, kept as given with their validated values (an integer qps becomes a float, an slo
    string its mapping); a bad one is an error under `<section>.<setting>`. Whether they suit the
    scenarios is the request schema's check."""

    def __init__(self, settings: Any, section: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings, self.section = settings, section

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        given: dict[str, Any] = super()._deserialize(value, attr, data, **kwargs)
        try:
            validated: dict[str, Any] = self.settings.from_dict(given).to_dict()
        except UserError as exc:
            if exc.field in (None, self.section):
                raise ValidationError(exc.message) from None
            raise ValidationError({exc.field.removeprefix(f"{self.section}."): [exc.message]}) from None
        return {name: validated[name] for name in given}


class ModelOptionsSchema(Schema):
    """`model_options`: the shapes, config and weights a model reference is resolved with."""

    class Meta:
        unknown = RAISE

    input_shapes = fields.Dict(
        keys=fields.String(validate=validate.Regexp(r"^\S*$", error="must be an input name without spaces")),
        values=fields.List(
            fields.Integer(strict=True, validate=validate.Range(min=1, error="must be ≥ 1")),
            validate=validate.Length(min=1, max=16, error="must list 1 to 16 dimensions"),
        ),
    )
    input_dtypes = fields.Dict(
        keys=fields.String(validate=validate.Regexp(r"^\S*$", error="must be an input name without spaces")),
        values=fields.String(validate=validate.OneOf(DTYPES, error="must be one of: {choices}")),
    )
    config = fields.Dict(keys=fields.String(validate=validate.Regexp(r"^[A-Za-z_][A-Za-z0-9_]*$")))
    weights = fields.String(validate=validate.Length(min=1, max=4096))


class ContractRequestSchema(Schema):
    """The evaluation request document as every door loads it (`parse_request`); the API's
    `EvaluationRequestSchema` (mlscope.api.schemas) documents it further for the OpenAPI document."""

    class Meta:
        unknown = RAISE

    model = fields.String(required=True, validate=validate.Length(min=1, max=1000))
    framework = fields.String(required=True, validate=validate.Length(min=1, max=100))
    batch_sizes = fields.List(
        fields.Integer(
            strict=True,
            validate=validate.Range(min=1, max=MAX_BATCH_SIZE, error="must be between {min} and {max}"),
        ),
        validate=validate.Length(min=1, max=64),
        load_default=lambda: [1],
    )
    scenarios = fields.List(
        fields.String(validate=_Installed(scenario_names)),
        validate=validate.Length(min=1),
        load_default=lambda: ["single_stream"],
    )
    device = fields.String(
        load_default="cpu",
        validate=validate.Regexp(DEVICE_PATTERN, error="must be cpu, cuda or cuda:N"),
    )
    runner = fields.String(load_default="process", validate=_Installed(runner_names))
    trace_level = fields.String(
        load_default="NO_TRACE",
        validate=validate.OneOf(TRACE_LEVELS, error="must be one of: {choices}"),
    )
    # Keys and ranges are checked by MeasureSettings where the evaluation runs: the contract stays
    # free of the measurement code, which lives in the predictor runtime.
    measure = fields.Dict(
        keys=fields.String(validate=validate.Regexp(r"^[a-z_]+$")),
        values=fields.Raw(validate=_check_measure_value),
        load_default=dict,
    )
    options = fields.Nested(PredictorOptionsSchema, load_default=dict)
    timeout_s = fields.Float(load_default=1800.0, validate=validate.Range(min=1, max=MAX_TIMEOUT_S))
    memory_limit_mb = fields.Integer(load_default=None, allow_none=True, validate=validate.Range(min=64))
    target = fields.String(
        load_default=None, allow_none=True, validate=_check_target, metadata={"pattern": TARGET_PATTERN}
    )
    model_options = fields.Nested(ModelOptionsSchema, load_default=dict)
    dataset = fields.String(load_default=None, allow_none=True, validate=validate.Length(min=1, max=4096))
    limit = fields.Integer(
        load_default=None,
        allow_none=True,
        strict=True,
        validate=validate.Range(min=1, error="must be ≥ {min}"),
    )
    check_parity = fields.Boolean(load_default=False)
    parity_against = fields.String(
        load_default=None, allow_none=True, validate=validate.Length(min=1, max=100)
    )
    tolerance = fields.Float(
        load_default=None,
        allow_none=True,
        validate=validate.Range(min=0, max=1, min_inclusive=False, error="must be in (0, 1]"),
    )
    # Named `load` in documents; not as an attribute, which would hide Schema.load from type checkers.
    load_settings = SettingsField(
        LoadSettings,
        "load",
        data_key="load",
        keys=fields.String(),
        load_default=dict,
        metadata={
            "description": "the load settings of the server and multi_stream scenarios (docs/load.md), "
            f"some of: {', '.join(f.name for f in dataclass_fields(LoadSettings))}; only those given are kept"
        },
    )

    generation = SettingsField(
        GenerationSettings,
        "generation",
        keys=fields.String(),
        load_default=dict,
        metadata={
            "description": "the generate scenario's settings (docs/generate.md), some of: "
            f"{', '.join(f.name for f in dataclass_fields(GenerationSettings))}; only those given are kept"
        },
    )

    @validates_schema(skip_on_field_errors=True)
    def _check_generation(self, data: dict[str, Any], **_: Any) -> None:
        scenarios = data.get("scenarios") or ["single_stream"]
        generation = data.get("generation") or {}
        if "generate" not in scenarios:
            if generation:
                message = "applies only to the generate scenario (--scenario generate)"
                raise ValidationError(message, "generation")
            if data.get("framework") == ENDPOINT_FRAMEWORK:
                # Checked here, or the admission would find no endpoint to measure.
                raise ValidationError(
                    "the endpoint framework measures a served model in the generate scenario: ask for "
                    "scenarios [generate] with generation.endpoint (--endpoint URL)",
                    "framework",
                )
            return
        if len(scenarios) > 1:
            raise ValidationError(
                "generate runs alone: it measures a generative model token by token, not one forward "
                "pass (ask for the other scenarios in another evaluation)",
                "scenarios",
            )
        if list(data.get("batch_sizes") or [1]) != [1]:
            raise ValidationError(
                "the generate scenario sends one sequence per request: leave batch_sizes at [1] and "
                "set generation.concurrency for requests in flight at once",
                "batch_sizes",
            )
        load = data.get("load_settings") or {}
        self._check_preset_and_sweep(data, generation, load)
        if load.get("find_max_qps") and not generation.get("slo") and not generation.get("preset"):
            raise ValidationError(
                "find_max_qps with the generate scenario needs an slo to search against "
                "(e.g. --slo ttft_ms=200,tpot_ms=50)",
                "generation.slo",
            )
        rated = load.get("qps") is not None or load.get("find_max_qps")
        if rated and generation.get("trace") is not None:
            raise ValidationError(
                "a trace replays its own arrival times: drop qps and find_max_qps "
                "(--trace-speed scales them)",
                "generation.trace",
            )
        if rated and (generation.get("turns") or 1) > 1:
            raise ValidationError(
                "conversations (turns > 1) run closed-loop, concurrency at once: drop qps and find_max_qps",
                "generation.turns",
            )
        if load.get("max_in_flight") is not None:
            raise ValidationError(
                "the generate scenario's requests in flight are generation.concurrency (--concurrency)",
                "load.max_in_flight",
            )
        if generation.get("endpoint") and data.get("framework") != ENDPOINT_FRAMEWORK:
            raise ValidationError(
                f"an evaluation of an endpoint runs on the {ENDPOINT_FRAMEWORK!r} framework, not on "
                f"{data.get('framework')!r} (mlscope run MODEL --endpoint URL sets it)",
                "framework",
            )
        if data.get("framework") == ENDPOINT_FRAMEWORK and not generation.get("endpoint"):
            message = "the endpoint framework needs generation.endpoint (--endpoint URL)"
            raise ValidationError(message, "framework")

    @staticmethod
    def _check_preset_and_sweep(
        data: dict[str, Any], generation: dict[str, Any], load: dict[str, Any]
    ) -> None:
        """A preset's caps are known (the model's in the table, or an slo given) and its
        percentile is its own; a sweep is the only source of the setting it varies."""
        uncapped = interactive_caps(data.get("model"), generation.get("endpoint_model")) is None
        if generation.get("preset") and not generation.get("slo") and uncapped:
            raise ValidationError(
                f"model {data.get('model')!r} has no MLPerf Interactive caps (the table has "
                f"{', '.join(INTERACTIVE_CAPS)}): give them, e.g. --slo ttft_ms=500,tpot_ms=30",
                "generation.slo",
            )
        percentile = load.get("percentile")
        if generation.get("preset") and percentile is not None and percentile != INTERACTIVE_PERCENTILE:
            raise ValidationError(
                f"the interactive preset certifies the {INTERACTIVE_PERCENTILE:g}th percentile, as MLPerf "
                "does: drop percentile",
                "load.percentile",
            )
        sweep = load.get("sweep")
        if sweep and sweep["setting"] in generation:
            raise ValidationError(
                f"generation.{sweep['setting']} is what the sweep varies: give it in the sweep alone "
                "(drop --concurrency)",
                "load.sweep",
            )
        if sweep and generation.get("trace") is not None:
            raise ValidationError(
                "a trace replays its own arrivals at one load: drop the sweep", "load.sweep"
            )
        if sweep and sweep["setting"] == "qps" and (generation.get("turns") or 1) > 1:
            raise ValidationError(
                "conversations (turns > 1) run closed-loop: sweep concurrency, not qps", "load.sweep"
            )

    @validates_schema(skip_on_field_errors=True)
    def _check_dataset_options(self, data: dict[str, Any], **_: Any) -> None:
        if data.get("limit") is not None and data.get("dataset") is None:
            raise ValidationError("needs a dataset to limit (dataset is not set)", "limit")
        for name in ("parity_against", "tolerance"):
            if data.get(name) is not None and not data.get("check_parity"):
                raise ValidationError("applies only with check_parity: true", name)
        try:
            LoadSettings.from_dict(data.get("load_settings")).check_scenarios(
                data.get("scenarios") or ["single_stream"]
            )
        except UserError as exc:
            raise ValidationError(exc.message, f"load.{exc.field}") from None

    @post_load
    def _build(self, data: dict[str, Any], **_: Any) -> EvaluationRequest:
        data["batch_sizes"] = tuple(dict.fromkeys(data["batch_sizes"]))
        data["scenarios"] = tuple(dict.fromkeys(data["scenarios"]))
        data["load"] = data.pop("load_settings")
        generation = data.get("generation") or {}
        if generation.get("preset"):
            # The preset's caps and percentile, written into the request so that it says what ran.
            if not generation.get("slo"):
                found = interactive_caps(data["model"], generation.get("endpoint_model"))
                assert found is not None  # _check_preset_and_sweep refused a model without caps
                generation["slo"] = found[1]
            data["load"] = {**data["load"], "percentile": INTERACTIVE_PERCENTILE}
        return EvaluationRequest(**data)


def _flatten(messages: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(messages, dict):
        out: list[tuple[str, str]] = []
        if prefix and set(messages) <= {"key", "value"}:  # a Dict field's entry: name the entry
            return [pair for value in messages.values() for pair in _flatten(value, prefix)]
        for key, value in messages.items():
            out += _flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        return [(prefix, " ".join(messages))]
    if isinstance(messages, list):
        return [pair for m in messages for pair in _flatten(m, prefix)]
    return [(prefix, str(messages))]


def parse_request(data: dict[str, Any]) -> EvaluationRequest:
    """Validate a request document.

    Raises:
        UserError: one line per offending field (`batch_sizes.0: must be between 1 and 65536`);
            `field` names the first.
    """
    try:
        request: EvaluationRequest = ContractRequestSchema().load(data)
    except ValidationError as exc:
        problems = _flatten(exc.messages)
        text = "; ".join(f"{name}: {message}" for name, message in problems)
        raise UserError(f"invalid request: {text}", field=problems[0][0] if problems else None) from None
    return request
