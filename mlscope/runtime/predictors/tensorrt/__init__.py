"""TensorRT: the predictor (`predictor`), which builds an engine from the ONNX graph ONNX Runtime runs
(the manifest's own file, or the graph `onnxruntime.export` makes of a PyTorch source) and runs it on
an NVIDIA GPU. docs/gpu.md#tensorrt.

Imports no framework: this registration is read wherever frameworks are listed.
"""

from __future__ import annotations

from mlscope.runtime.frameworks import FrameworkSpec

FRAMEWORK = FrameworkSpec(
    name="tensorrt",
    display="TensorRT",
    import_name="tensorrt",
    # PyPI's `tensorrt` pulls the build for one CUDA major (`tensorrt-cu12`, `tensorrt-cu13`).
    distributions=("tensorrt", "tensorrt-cu13", "tensorrt-cu12"),
    predictor="mlscope.runtime.predictors.tensorrt.predictor:TensorRtPredictor",
    # ONNX graphs, and PyTorch sources exported to ONNX on first use (that needs torch too).
    sources=frozenset({"onnx", "torchvision", "timm", "transformers", "python"}),
    install_hint="pip install tensorrt, on a machine with an NVIDIA GPU (its wheels carry CUDA libraries)",
    order=30,
    # ONNX Runtime's: a container has no torch to export with, and sees only the files mounted into it.
    host_prefetch="mlscope.runtime.predictors.onnxruntime.export:prefetch_on_host",
    system_distributions=("tensorrt", "onnx"),
    # An NVIDIA GPU or nothing: refused, naming the GPU, on a machine without one.
    needs_gpu=True,
    # Run when named (-f tensorrt): a model's run without -f measures what it measured before.
    by_default=False,
)
