"""The ONNX Runtime predictor: session options (threads, graph optimisation level), execution
providers by device, and I/O binding on GPUs so inputs are on the device before timing starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnxruntime as ort

from mlscope.workers.predictors.base import Predictor, PredictorError
from mlscope.workers.predictors.export import exported_graph
from mlscope.workers.predictors.files import local_file

__all__ = ["OnnxRuntimePredictor"]

_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


class OnnxRuntimePredictor(Predictor):
    NAME: ClassVar[str] = "onnxruntime"

    _graph: Path | None = None
    _session: ort.InferenceSession | None = None

    @classmethod
    def framework_version(cls) -> str:
        return str(ort.__version__)

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        return {"available_providers": ort.get_available_providers(), "build_device": ort.get_device()}

    def _providers(self) -> list[str]:
        if self.options.execution_providers:
            wanted = list(self.options.execution_providers)
        elif self.device.startswith("cuda"):
            wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        else:
            wanted = ["CPUExecutionProvider"]
        missing = [p for p in wanted if p not in ort.get_available_providers()]
        if missing:
            have = ", ".join(ort.get_available_providers())
            raise PredictorError(
                f"execution providers {', '.join(missing)} are not in this build; it has: {have}"
            )
        return wanted

    def fetch(self) -> None:
        source = self.manifest.source
        if source.kind == "onnx":
            self._graph = local_file(source.target, source.options.get("sha256"))
        else:
            self._graph = exported_graph(self.manifest, self.cache_dir, seed=self.options.seed)

    def load(self) -> None:
        if self._graph is None:
            self.fetch()
        options = ort.SessionOptions()
        options.graph_optimization_level = _LEVELS[self.options.graph_optimization_level]
        if self.options.threads:
            options.intra_op_num_threads = self.options.threads
        if self.options.inter_op_threads:
            options.inter_op_num_threads = self.options.inter_op_threads
        providers = self._providers()
        provider_options: list[dict[str, Any]] = [{} for _ in providers]
        if self.device.startswith("cuda"):
            device_id = int(self.device.partition(":")[2] or 0)
            provider_options[providers.index("CUDAExecutionProvider")] = {"device_id": device_id}
        self._session = ort.InferenceSession(
            str(self._graph), sess_options=options, providers=providers, provider_options=provider_options
        )

    def prepare(self, arrays: dict[str, np.ndarray]) -> Any:
        if not self.device.startswith("cuda"):
            return {name: np.ascontiguousarray(array) for name, array in arrays.items()}
        assert self._session is not None, "load() first"
        device_id = int(self.device.partition(":")[2] or 0)
        binding = self._session.io_binding()
        for name, array in arrays.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cuda", device_id))
        for output in self._session.get_outputs():
            binding.bind_output(output.name, "cuda", device_id)
        return binding

    def predict(self, batch: Any) -> Any:
        session = self._session
        assert session is not None, "load() first"
        if isinstance(batch, dict):
            return session.run(None, batch)
        session.run_with_iobinding(batch)
        batch.synchronize_outputs()
        return batch

    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        assert self._session is not None
        names = [output.name for output in self._session.get_outputs()]
        values = outputs if isinstance(outputs, list) else outputs.copy_outputs_to_cpu()
        return dict(zip(names, values, strict=True))

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        if self._session is not None:
            facts["providers"] = self._session.get_providers()
            options = self._session.get_session_options()
            facts["threads"] = options.intra_op_num_threads or "default"
            facts["graph_optimization_level"] = self.options.graph_optimization_level
        if self._graph is not None:
            facts["graph"] = self._graph.name
        return facts

    def close(self) -> None:
        self._session = None
