"""PyTorch: the predictor (`predictor`), the models it builds from manifests (`models`, which the ONNX
Runtime exporter builds too) and its profiled passes (`profile`).

Imports no framework: this registration is read wherever frameworks are listed.
"""

from __future__ import annotations

from mlscope.runtime.frameworks import FrameworkSpec

FRAMEWORK = FrameworkSpec(
    name="pytorch",
    display="PyTorch",
    import_name="torch",
    distributions=("torch",),
    predictor="mlscope.runtime.predictors.pytorch.predictor:PyTorchPredictor",
    sources=frozenset({"torchvision", "timm", "transformers", "python"}),
    install_hint="pip install 'mlscope[pytorch]'",
    order=10,
    # PyPI's torch wheel is the CUDA build (several GB): its image is built only when asked for by name.
    image_by_default=False,
    system_distributions=("torch", "torchvision", "timm", "transformers"),
    generates=True,
    # `mlscope bricks --device cuda`: its bricks are timed with CUDA events on a GPU.
    brick_devices="mlscope.runtime.predictors.pytorch.bricks:device_refusal",
    # torch.compile (inductor), reduced precision and dynamic int8 quantisation (`--option`).
    options=frozenset({"compile", "precision", "quantize"}),
)
