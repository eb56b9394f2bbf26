"""A toy framework's registration: what mlscope reads to list it, importing no predictor."""

from mlscope.runtime.frameworks import FrameworkSpec

FRAMEWORK = FrameworkSpec(
    name="toyfw",
    display="Toy framework",
    import_name="mlscope_toy_framework",
    distributions=("mlscope-toy-framework",),
    predictor="mlscope_toy_framework.predictor:ToyPredictor",
    sources=frozenset({"python"}),
    install_hint="pip install mlscope-toy-framework",
)
