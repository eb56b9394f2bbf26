"""The LiteRT predictor (docs/litert.md): the `.tflite` flatbuffer `convert` made of the manifest's
Keras model (float, or int8 with `--option quantize=int8`), run by `ai_edge_litert`'s interpreter on
the CPU with its default XNNPACK delegate.

An interpreter runs one inference at a time and holds its tensors' shapes, so each calling thread
gets its own (the offline scenario predicts from several), resized when a batch of another size
comes. The flatbuffer keeps the batch axis dynamic, so one file serves every batch size.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from mlscope.runtime.predictors.base import Predictor, PredictorError
from mlscope.runtime.predictors.litert.convert import converted_model, facts_of

__all__ = ["LiteRtPredictor"]


# Why neither profiled pass records anything (docs/litert.md, "No per-operator trace").
_NO_PROFILER = (
    "ai-edge-litert's Python interpreter takes no profiler and gives no per-op times (docs/litert.md)"
)


class LiteRtPredictor(Predictor):
    NAME: ClassVar[str] = "litert"
    NO_PROFILER: ClassVar[Mapping[str, str]] = {"FRAMEWORK": _NO_PROFILER, "LIBRARY": _NO_PROFILER}

    _model: bytes | None = None
    _facts: dict[str, Any] | None = None
    _local: threading.local | None = None
    _graph_name: str | None = None

    @classmethod
    def framework_version(cls) -> str:
        return importlib.metadata.version("ai-edge-litert")

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        return {"delegate": "XNNPACK (the interpreter's default on the CPU)"}

    @property
    def threads(self) -> int:
        """The interpreter's threads: the request's, else one per core (as the other frameworks)."""
        return self.options.threads or os.cpu_count() or 1

    def fetch(self) -> None:
        try:
            path = converted_model(self.manifest, self.options, self.cache_dir)
        except Exception as exc:  # admission converts first; here only a cache that went away fails
            raise PredictorError(str(exc)) from None
        self._model = path.read_bytes()
        self._facts = facts_of(path)
        self._graph_name = path.name

    def load(self) -> None:
        if self.device != "cpu":
            raise PredictorError(
                f"device {self.device}: mlscope runs LiteRT on the CPU only (its XNNPACK delegate); "
                "use --device cpu"
            )
        if self._model is None:
            self.fetch()
        self._local = threading.local()
        self._interpreter()  # the file loads here, in the load phase

    def _interpreter(self) -> Any:
        """This thread's interpreter, made on its first use."""
        local = self._local
        assert local is not None and self._model is not None, "load() first"
        interpreter = getattr(local, "interpreter", None)
        if interpreter is None:
            interpreter = local.interpreter = Interpreter(model_content=self._model, num_threads=self.threads)
            interpreter.allocate_tensors()
            local.shapes = None
        return interpreter

    def prepare(self, arrays: dict[str, np.ndarray]) -> Any:
        return [np.ascontiguousarray(arrays[spec.name]) for spec in self.manifest.inputs]

    def predict(self, batch: Any) -> Any:
        interpreter = self._interpreter()
        local = self._local
        assert local is not None
        inputs = interpreter.get_input_details()
        shapes = [array.shape for array in batch]
        if local.shapes != shapes:  # another batch size: once per size and thread, in warm-up
            for detail, shape in zip(inputs, shapes, strict=True):
                interpreter.resize_tensor_input(detail["index"], list(shape))
            interpreter.allocate_tensors()
            local.shapes = shapes
        for detail, array in zip(inputs, batch, strict=True):
            interpreter.set_tensor(detail["index"], array)
        interpreter.invoke()
        # get_tensor copies: the outputs stay valid after the next inference.
        return [interpreter.get_tensor(detail["index"]) for detail in interpreter.get_output_details()]

    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        names = [spec.name for spec in self.manifest.outputs]
        if len(names) != len(outputs):
            raise PredictorError(
                f"{self.manifest.name}: the LiteRT model has {len(outputs)} outputs, the manifest "
                f"names {len(names)}"
            )
        return {name: np.asarray(output) for name, output in zip(names, outputs, strict=True)}

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        facts["threads"] = self.threads
        facts["quantize"] = self.options.quantize or "none"
        if self._graph_name is not None:
            facts["graph"] = self._graph_name
        if self._facts:
            facts["conversion"] = dict(self._facts)
        return facts

    def close(self) -> None:
        self._local = None
        self._model = None
