"""Caffe2 through PyTorch 1.10: the predictor (`predictor`), which converts torchvision models to
Caffe2 nets and profiles them with Caffe2's own per-operator timing.

Imports no framework: this registration is read wherever frameworks are listed (and it runs on the
Python 3.9 of the Caffe2 environment and image).
"""

from __future__ import annotations

from mlscope.runtime.frameworks import FrameworkSpec

FRAMEWORK = FrameworkSpec(
    name="caffe2",
    display="Caffe2 (through PyTorch)",
    import_name="caffe2",
    distributions=("torch",),
    predictor="mlscope.runtime.predictors.caffe2.predictor:Caffe2Predictor",
    # Caffe2 runs torchvision graphs exported to ONNX and converted to Caffe2 nets, on the CPU.
    sources=frozenset({"torchvision"}),
    # torch 1.10.2 is the last wheel with the Caffe2 extension, and it needs Python 3.9 (docs/caffe2.md).
    install_hint="`mlscope env create caffe2` (a Python 3.9 environment with torch 1.10.2, for "
    "--runner process), or `mlscope image build caffe2` for --runner docker",
    order=50,
    # The nets are converted inside the container on first use: the host has no Caffe2 to do it.
    image_by_default=False,
)
