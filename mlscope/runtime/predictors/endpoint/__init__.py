"""The endpoint framework: a model behind an OpenAI-compatible HTTP endpoint (vLLM, SGLang, TGI,
`transformers serve`, a hosted API), measured from this side with the generate scenario only.

Imports no HTTP client: this registration is read wherever frameworks are listed.
"""

from __future__ import annotations

from mlscope.runtime.frameworks import FrameworkSpec

FRAMEWORK = FrameworkSpec(
    name="endpoint",
    display="OpenAI-compatible endpoint",
    import_name="httpx",
    distributions=("httpx",),
    predictor="mlscope.runtime.predictors.endpoint.predictor:EndpointPredictor",
    sources=frozenset({"served"}),
    install_hint="pip install 'mlscope[endpoint]'",
    order=90,
    image_by_default=False,
    generates=True,
)
