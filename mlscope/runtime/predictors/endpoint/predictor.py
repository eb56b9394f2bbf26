"""The endpoint framework's predictor: nothing to load, one engine, the HTTP client."""

from __future__ import annotations

from typing import Any, ClassVar

from mlscope.contract.generation import GenerationSettings
from mlscope.runtime.generate.endpoint import EndpointEngine
from mlscope.runtime.generate.preflight import endpoint_url, served_model
from mlscope.runtime.generate.records import GenerateEngine
from mlscope.runtime.predictors.base import GenerateOnlyPredictor

__all__ = ["EndpointPredictor"]


class EndpointPredictor(GenerateOnlyPredictor):
    NAME: ClassVar[str] = "endpoint"
    ONLY_GENERATE: ClassVar[str] = "an endpoint runs only the generate scenario (--scenario generate)"

    @classmethod
    def framework_version(cls) -> str:
        import httpx

        return f"httpx {httpx.__version__}"

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        return {}

    def generation_engine(self, settings: GenerationSettings) -> GenerateEngine:
        engine = EndpointEngine(
            endpoint_url(settings, self.manifest),
            served_model(settings, self.manifest),
            api=settings.api,
            timeout_s=settings.request_timeout_s,
            ignore_eos=settings.ignore_eos,
        )
        engine.check_reachable()
        return engine
