"""Predictor options: the framework knobs a request may set, defined once — the dataclass the
predictor runtime reads and the schema a request is validated with are derived from the same fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from marshmallow import RAISE, Schema, validate
from marshmallow import fields as schema_fields

__all__ = [
    "COMPILE_MODES",
    "FRAMEWORK_OPTIONS",
    "FRAMEWORK_OPTION_DEFAULTS",
    "GENERATE_OPTIONS",
    "GGUF_TYPES",
    "GRAPH_OPTIMIZATION_LEVELS",
    "MAX_INPUT_POOL",
    "PERFORMANCE_HINTS",
    "PRECISIONS",
    "QUANTIZATIONS",
    "REQUEST_OPTIONS",
    "PredictorOptions",
    "PredictorOptionsSchema",
    "is_default_option",
    "variant_options",
]

GRAPH_OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")
# torch.compile's modes (inductor), and `none`: the module as loaded (eager).
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune")
# The floating-point type the weights, inputs and arithmetic use: fp32 (as loaded; `f32` is
# OpenVINO's name for it), bf16, fp16; a framework refuses one it or the CPU cannot compute in.
PRECISIONS = ("fp32", "f32", "bf16", "fp16")
# Post-training quantisation: `int8` is dynamic on PyTorch and ONNX Runtime (weights int8 ahead,
# activations quantised per batch), full-integer on LiteRT (activation ranges calibrated ahead).
QUANTIZATIONS = ("none", "int8")
# OpenVINO's performance hints (docs/openvino.md): one inference at a time as fast as it goes, or as
# many inferences per second as parallel streams give.
PERFORMANCE_HINTS = ("LATENCY", "THROUGHPUT")
# The tensor types llama.cpp's GGUF file is written in (docs/llamacpp.md): f32 (as loaded), f16, and
# llama.cpp's block quantisations q8_0 and q4_0. Its own option, not `precision` or `quantize`: one
# value names the whole file's format, and the block formats are not PyTorch's int8.
GGUF_TYPES = ("f32", "f16", "q8_0", "q4_0")
# Options only some frameworks take, each with the values that mean the framework as mlscope loads it
# without the option: each framework names the ones it takes (FrameworkSpec.options), and a request
# setting one on another framework is refused, naming the option. A request that sets one to its
# default (or to None) measures the same workload as one that does not set it. The other options are
# shared: a framework ignores those that mean nothing to it.
FRAMEWORK_OPTION_DEFAULTS: dict[str, tuple[str, ...]] = {
    "compile": ("none",),
    "gguf_type": ("f32",),
    "performance_hint": ("LATENCY",),
    "precision": ("fp32", "f32"),
    "quantize": ("none",),
}
FRAMEWORK_OPTIONS = frozenset(FRAMEWORK_OPTION_DEFAULTS)
# Framework options the generate scenario honours: the framework's own generation loop runs the
# model in the form the option names (llama.cpp's GGUF type); any other is refused with generate.
GENERATE_OPTIONS = frozenset({"gguf_type"})


def is_default_option(name: str, value: Any) -> bool:
    """Whether framework option `name` set to `value` leaves the framework as loaded (None, or one of
    the option's defaults: `compile=none`, `performance_hint=LATENCY`, `precision=fp32`, ...)."""
    return value is None or value in FRAMEWORK_OPTION_DEFAULTS.get(name, ())


def variant_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The framework-specific options `options` sets to other than the model as loaded (a compile mode,
    a reduced precision, a quantisation, a throughput hint): what makes a run a variant of its
    framework's plain one."""
    return {
        name: options[name]
        for name in sorted(FRAMEWORK_OPTIONS)
        if not is_default_option(name, options.get(name))
    }


# The most distinct input batches a request may ask to cycle through (and so the most samples a
# multi_stream query may hold).
MAX_INPUT_POOL = 64


@dataclass(frozen=True)
class PredictorOptions:
    """Framework knobs a request may set; a framework ignores those that mean nothing to it.

    Attributes:
        threads: intra-op threads (None: the framework's default, usually one per core).
        inter_op_threads: inter-op threads (None: the framework's default).
        graph_optimization_level: ONNX Runtime's `disable|basic|extended|all` (default all).
        execution_providers: ONNX Runtime providers, in priority order (default: by device).
        input_pool: how many distinct input batches are cycled through while measuring, so a
            cache never serves the same input twice in a row.
        brick: measure the model as a brick (`mlscope bricks`): a one-node graph timed by the brick
            method (`mlscope.runtime.bricks`: the core's private caches flushed before every run,
            inputs and outputs bound), not the scenario loop; single_stream at one batch size only,
            on a framework that measures bricks (ONNX Runtime). A farm measures a system's bricks
            together, in one predictor job (the batch body's `bricks`).
        compile: PyTorch's torch.compile mode (COMPILE_MODES; None or `none`: eager). The model is
            compiled for each batch size before that size is measured: the first one's compile time
            is the cold start's `compile_ms`, each later one's its measurement's `compile_ms`, and
            graphs compiled while a point was measured are its `recompiles`.
        precision: PyTorch's and OpenVINO's arithmetic (PRECISIONS; None: fp32). PyTorch casts the
            weights and float inputs; OpenVINO sets its inference precision, f32 even where it would
            itself pick bf16, so that its outputs compare with the others'. ONNX Runtime takes fp32
            alone (its refusal of the others says why).
        quantize: PyTorch: `int8`, dynamic quantisation of the Linear layers; ONNX Runtime: `int8`,
            dynamic quantisation of the graph's Conv, MatMul and Gemm nodes; LiteRT: `int8`, full-integer
            post-training quantisation calibrated on the manifest's dataset (None: `none`).
        performance_hint: OpenVINO's PERFORMANCE_HINT (PERFORMANCE_HINTS; None: LATENCY).
        gguf_type: llama.cpp's GGUF tensor type (GGUF_TYPES; None: f32).
        seed: seeds random weights and inputs, so two runs build the same model. Not a request
            option: every evaluation of a model builds the same weights, which is what makes two
            runs (and two frameworks) comparable.
    """

    threads: int | None = None
    inter_op_threads: int | None = None
    graph_optimization_level: str = "all"
    execution_providers: tuple[str, ...] = ()
    input_pool: int = 4
    brick: bool = False
    compile: str | None = None
    precision: str | None = None
    quantize: str | None = None
    performance_hint: str | None = None
    gguf_type: str | None = None
    seed: int = 0

    @property
    def compile_mode(self) -> str | None:
        """torch.compile's mode; None for the module as loaded (eager)."""
        return None if self.compile in (None, "none") else self.compile

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PredictorOptions:
        values = dict(data)
        if "execution_providers" in values:
            values["execution_providers"] = tuple(values["execution_providers"])
        return cls(**values)


class PredictorOptionsSchema(Schema):
    """A request's `options`: each field of PredictorOptions a request may set, with its range."""

    class Meta:
        unknown = RAISE

    threads = schema_fields.Integer(validate=validate.Range(min=1, max=1024), allow_none=True)
    inter_op_threads = schema_fields.Integer(validate=validate.Range(min=1, max=1024), allow_none=True)
    graph_optimization_level = schema_fields.String(validate=validate.OneOf(GRAPH_OPTIMIZATION_LEVELS))
    execution_providers = schema_fields.List(schema_fields.String(validate=validate.Length(min=1)))
    input_pool = schema_fields.Integer(validate=validate.Range(min=1, max=MAX_INPUT_POOL))
    brick = schema_fields.Boolean()
    compile = schema_fields.String(validate=validate.OneOf(COMPILE_MODES), allow_none=True)
    precision = schema_fields.String(validate=validate.OneOf(PRECISIONS), allow_none=True)
    quantize = schema_fields.String(validate=validate.OneOf(QUANTIZATIONS), allow_none=True)
    performance_hint = schema_fields.String(validate=validate.OneOf(PERFORMANCE_HINTS), allow_none=True)
    gguf_type = schema_fields.String(validate=validate.OneOf(GGUF_TYPES), allow_none=True)


# The options a request may set: every field of PredictorOptions but the seed. Checked at import, so
# the dataclass and the schema cannot drift apart again.
REQUEST_OPTIONS: tuple[str, ...] = tuple(f.name for f in fields(PredictorOptions) if f.name != "seed")
if set(REQUEST_OPTIONS) != set(PredictorOptionsSchema._declared_fields):  # pragma: no cover
    raise RuntimeError("PredictorOptionsSchema and PredictorOptions name different options")
