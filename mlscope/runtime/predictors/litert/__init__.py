"""LiteRT (ai-edge-litert, formerly TensorFlow Lite): the predictor (`predictor`), which runs a
`.tflite` flatbuffer with LiteRT's interpreter, and the converter (`convert`), which makes that
flatbuffer from a Keras model with TensorFlow's TFLiteConverter, float or int8 post-training
quantised, once per manifest and option, in a child process. docs/litert.md.

Imports no framework: this registration is read wherever frameworks are listed.
"""

from __future__ import annotations

from mlscope.runtime.frameworks import FrameworkSpec

FRAMEWORK = FrameworkSpec(
    name="litert",
    display="LiteRT",
    import_name="ai_edge_litert",
    distributions=("ai-edge-litert",),
    predictor="mlscope.runtime.predictors.litert.predictor:LiteRtPredictor",
    # Keras models: a keras.applications architecture (TensorFlow's manifests), or a Python factory
    # returning a Keras model (mlscope's digits CNN); converting them needs TensorFlow too.
    sources=frozenset({"keras_applications", "python"}),
    # Its image holds LiteRT alone (the .tflite is converted on the host at admission): small.
    image_by_default=True,
    install_hint="pip install 'mlscope[litert]' (conversion also needs mlscope[tensorflow])",
    order=35,
    system_distributions=("ai-edge-litert", "tensorflow-cpu", "tensorflow"),
    # `--option quantize=int8`: full-integer post-training quantisation, calibrated on the manifest's
    # dataset.
    options=frozenset({"quantize"}),
    # Converted before the job runs, so a model LiteRT's converter refuses is refused in one line.
    admit="mlscope.runtime.predictors.litert.convert:admit",
    # Run when named (-f litert): a model's run without -f measures what it measured before.
    by_default=False,
)
