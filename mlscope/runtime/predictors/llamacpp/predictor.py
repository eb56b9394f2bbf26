"""The llama.cpp predictor: the generate scenario only, on a GGUF file written from the manifest's
catalogue decoder (`gguf_file`), in the tensor type `options.gguf_type` names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from mlscope.runtime.predictors.base import GenerateOnlyPredictor, PredictorError

if TYPE_CHECKING:
    from mlscope.contract.generation import GenerationSettings
    from mlscope.runtime.generate.records import GenerateEngine

__all__ = ["LlamaCppPredictor"]


class LlamaCppPredictor(GenerateOnlyPredictor):
    NAME: ClassVar[str] = "llamacpp"
    ONLY_GENERATE: ClassVar[str] = (
        "llama.cpp runs only the generate scenario here (--scenario generate): its GGUF file is a decoder "
        "that generates tokens, not the catalogue's graph of hidden states"
    )

    @classmethod
    def framework_version(cls) -> str:
        import llama_cpp

        return str(llama_cpp.__version__)

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        import llama_cpp

        info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip()
        # gguf writes the file where the request is admitted; a predictor image has none (None then:
        # the engine's facts name the version that wrote the file).
        return {"gguf": _version("gguf"), "system_info": info}

    def generation_engine(self, settings: GenerationSettings) -> GenerateEngine:
        """The manifest's decoder as the GGUF file admission wrote under the cache, in llama.cpp.

        Raises:
            PredictorError: a device other than the CPU, a model the GGUF writer does not lay out,
                a file not written and no writer here, or a file llama.cpp cannot load.
        """
        from mlscope.runtime.predictors.llamacpp.engine import LlamaCppEngine, default_threads, open_llama
        from mlscope.runtime.predictors.llamacpp.gguf_file import find_gguf
        from mlscope.runtime.predictors.llamacpp.serve import LlamaCppServer

        if self.device != "cpu":
            raise PredictorError(f"device {self.device}: this llama.cpp build runs on the CPU only")
        prepared = find_gguf(self.manifest, self.cache_dir, self.options.seed, self.options.gguf_type)
        threads = self.options.threads or default_threads()
        llama = open_llama(prepared.path, n_ctx=prepared.context, threads=threads)

        def serve() -> LlamaCppServer:
            return LlamaCppServer(prepared.path, n_ctx=prepared.context, threads=threads)

        return LlamaCppEngine(
            llama, prepared, self.options.gguf_type or "f32", threads, self.describe, serve=serve
        )


def _version(distribution: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
