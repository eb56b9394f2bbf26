"""ONNX Runtime: the predictor (`predictor`), the ONNX export of PyTorch sources (`export`, which also
makes the graph on the host for a container) and the converter of ORT's session profile (`profile`).

Imports no framework: this registration is read wherever frameworks are listed.
"""

from mlscope.runtime.frameworks import FrameworkSpec

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
)
