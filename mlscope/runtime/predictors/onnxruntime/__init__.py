"""ONNX Runtime: the predictor (`predictor`), the ONNX export of PyTorch sources (`export`, which also
makes the graph on the host for a container), its int8 quantisation (`quantize`) and the converter of
ORT's session profile (`profile`).

Imports no framework: this registration is read wherever frameworks are listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlscope.runtime.frameworks import FrameworkSpec


def option_refusal(options: Mapping[str, Any], device: str) -> str | None:
    """Why ONNX Runtime cannot run the request's precision, in one line naming the option; None when
    it can. mlscope gives it fp32 graphs and converts none to another float type: on the CPU
    execution provider a bf16 graph finds no kernels (MatMul, Gemm, Add, Relu have none) and an fp16
    one runs each node in fp32 between inserted casts, so neither would measure what its name says
    (docs/frameworks.md#precision-and-quantisation)."""
    precision = options.get("precision")
    if precision in (None, "fp32", "f32"):
        return None
    why = {
        "bf16": "its CPU execution provider has no bf16 kernels for MatMul, Gemm, Add or Relu",
        "fp16": "its CPU execution provider runs an fp16 graph's nodes in fp32 between inserted casts",
    }.get(str(precision), "mlscope converts its graphs to no other float type")
    return (
        f"options.precision: ONNX Runtime runs mlscope's fp32 graphs in fp32 only ({precision}: {why}); "
        f"use precision=fp32 or quantize=int8 here, or PyTorch or OpenVINO for {precision}"
    )


FRAMEWORK = FrameworkSpec(
    name="onnxruntime",
    display="ONNX Runtime",
    import_name="onnxruntime",
    distributions=("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"),
    predictor="mlscope.runtime.predictors.onnxruntime.predictor:OnnxRuntimePredictor",
    # Graphs from PyTorch sources are exported to ONNX on first use (that needs torch too).
    sources=frozenset({"onnx", "torchvision", "timm", "transformers", "python"}),
    install_hint="pip install 'mlscope[onnxruntime]'",
    order=20,
    image_by_default=True,
    # A container has no torch to export with, and sees only the files mounted into it.
    host_prefetch="mlscope.runtime.predictors.onnxruntime.export:prefetch_on_host",
    system_distributions=("onnxruntime", "onnxruntime-gpu", "onnx"),
    # One-node graphs measured together by the brick method (`mlscope bricks` on a farm).
    bricks="mlscope.runtime.bricks:brick_job",
    # `--option quantize=int8` (dynamic int8, `quantize`); `precision` is fp32 alone (`option_refusal`).
    options=frozenset({"precision", "quantize"}),
    option_refusal="mlscope.runtime.predictors.onnxruntime:option_refusal",
)
