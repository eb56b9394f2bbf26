"""TensorFlow: the predictor (`predictor`) and TF's profiler as spans (`profile`, reading the XSpace
through `xspace`).

Imports no framework: this registration is read wherever frameworks are listed.
"""

from __future__ import annotations

from mlscope.runtime.frameworks import FrameworkSpec

FRAMEWORK = FrameworkSpec(
    name="tensorflow",
    display="TensorFlow",
    import_name="tensorflow",
    distributions=("tensorflow-cpu", "tensorflow", "tensorflow-intel"),
    predictor="mlscope.runtime.predictors.tensorflow.predictor:TensorFlowPredictor",
    sources=frozenset({"keras_applications"}),
    install_hint="pip install 'mlscope[tensorflow]', or `mlscope image build tensorflow` for --runner docker",
    order=30,
    image_by_default=True,
)
