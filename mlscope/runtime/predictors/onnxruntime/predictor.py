"""The ONNX Runtime predictor: session options (threads, graph optimisation level), execution
providers by device, I/O binding on GPUs so inputs are on the device before timing starts, and
the FRAMEWORK and LIBRARY trace passes from ORT's session profiling; `options.quantize=int8` runs
the graph's dynamic int8 quantisation (`quantize`), and the precision is the graph's fp32
(docs/frameworks.md#precision-and-quantisation)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import onnxruntime as ort

from mlscope.runtime.predictors.base import Predictor, PredictorError
from mlscope.runtime.predictors.onnxruntime.export import onnx_graph
from mlscope.runtime.predictors.onnxruntime.profile import PROFILE_LEVELS, ort_profile_to_spans
from mlscope.runtime.trace.profiled import ProfiledPass

if TYPE_CHECKING:
    from mlscope.runtime.model_store import MappedModel, WeightsToStore

__all__ = ["OnnxRuntimePredictor"]

_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


@dataclass(frozen=True)
class _DeviceBatch:
    """A batch on a GPU: the binding `predict` runs, and the device inputs bound to it, which a
    profiling session (another session, so another binding) binds again."""

    binding: ort.IOBinding
    inputs: dict[str, ort.OrtValue]


class OnnxRuntimePredictor(Predictor):
    NAME: ClassVar[str] = "onnxruntime"

    _graph: Path | None = None
    # The graph as exported or given, when `_graph` is its int8 quantisation.
    _source_graph: Path | None = None
    _session: ort.InferenceSession | None = None
    # A warm session's store entry (referenced while the session lives) and its optimised graph.
    _warm: MappedModel | None = None
    _warm_graph: Path | None = None

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
        self._graph = onnx_graph(self.manifest, self.cache_dir, seed=self.options.seed)
        if self.options.quantize == "int8":
            from mlscope.runtime.predictors.onnxruntime.quantize import quantised_graph

            self._source_graph = self._graph
            self._graph = quantised_graph(self._graph, self.cache_dir)

    def load(self) -> None:
        if self._graph is None:
            self.fetch()
        self._session = self._open_session(self._session_options())

    def warm_variant(self) -> str:
        """The stored graph is optimised for a level and providers, and its form is this version's:
        all three are part of its key."""
        from mlscope.runtime.predictors.onnxruntime.warm import STORED_FORM

        variant = f"{self.options.graph_optimization_level}|{','.join(self._providers())}|{STORED_FORM}"
        return f"{variant}|int8" if self.options.quantize == "int8" else variant

    def weights_to_store(self) -> WeightsToStore:
        from mlscope.runtime.predictors.onnxruntime.warm import optimised_files

        return optimised_files(self._open_session, self._session_options())

    def load_mapped(self, mapped: MappedModel) -> None:
        """A session on the store's optimised graph, opened by path: ONNX Runtime maps its weights
        and pre-packed weights from the entry (see `warm`)."""
        from mlscope.runtime.predictors.onnxruntime.warm import graph_path

        self._warm = mapped
        self._warm_graph = graph_path(mapped)
        self._session = self._open_session(self._session_options())

    def _session_options(self) -> ort.SessionOptions:
        options = ort.SessionOptions()
        options.graph_optimization_level = _LEVELS[self.options.graph_optimization_level]
        if self._warm is not None:
            # The stored graph was optimised at this level when it was published.
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        if self.options.threads:
            options.intra_op_num_threads = self.options.threads
        if self.options.inter_op_threads:
            options.inter_op_num_threads = self.options.inter_op_threads
        return options

    def _device_id(self) -> int:
        return int(self.device.partition(":")[2] or 0)

    def _open_session(self, options: ort.SessionOptions) -> ort.InferenceSession:
        providers = self._providers()
        provider_options: list[dict[str, Any]] = [{} for _ in providers]
        if self.device.startswith("cuda"):
            provider_options[providers.index("CUDAExecutionProvider")] = {"device_id": self._device_id()}
        graph = str(self._warm_graph if self._warm_graph is not None else self._graph)
        return ort.InferenceSession(
            graph, sess_options=options, providers=providers, provider_options=provider_options
        )

    def _bind(self, session: ort.InferenceSession, inputs: dict[str, ort.OrtValue]) -> ort.IOBinding:
        binding = session.io_binding()
        for name, value in inputs.items():
            binding.bind_ortvalue_input(name, value)
        for output in session.get_outputs():
            binding.bind_output(output.name, "cuda", self._device_id())
        return binding

    def prepare(self, arrays: dict[str, np.ndarray]) -> Any:
        if not self.device.startswith("cuda"):
            return {name: np.ascontiguousarray(array) for name, array in arrays.items()}
        assert self._session is not None, "load() first"
        inputs = {
            name: ort.OrtValue.ortvalue_from_numpy(array, "cuda", self._device_id())
            for name, array in arrays.items()
        }
        return _DeviceBatch(self._bind(self._session, inputs), inputs)

    def predict(self, batch: Any) -> Any:
        session = self._session
        assert session is not None, "load() first"
        if isinstance(batch, dict):
            return session.run(None, batch)
        session.run_with_iobinding(batch.binding)
        batch.binding.synchronize_outputs()
        return batch.binding

    def trace_pass(self, profiled: ProfiledPass, batch: Any) -> bool:
        """Profile the pass's warm-up and traced inferences with ORT's session profiler and record the
        traced ones as spans: FRAMEWORK, one layer span per graph node executed; LIBRARY, one
        operator span per node and, on a GPU, the kernels each node launched.

        The profile comes from a second session on the same graph with the same options plus
        `enable_profiling`, so the measured session is never profiled. On the CPU both levels see
        the same node events, as layers in one pass and as operators in the other: ORT's profiler
        records nothing below a node there (MLAS and oneDNN calls are not events). On a GPU the
        CUDA provider adds its kernels and copies to the profile only in ORT builds compiled with
        ENABLE_CUDA_PROFILING (no session or provider option turns it on); without it the LIBRARY
        pass has operators only. Node spans on a GPU time the node's launch on the host: ORT does
        not wait for the device between nodes.

        Args: as `Predictor.trace_pass`.

        Returns:
            True for FRAMEWORK and LIBRARY, False (nothing run) for any other level.
        """
        if profiled.level not in PROFILE_LEVELS:
            return False
        assert self._session is not None, "load() first"
        tracer = profiled.tracer
        options = self._session_options()
        options.enable_profiling = True
        with tempfile.TemporaryDirectory(prefix="mlscope-ort-profile-") as folder:
            options.profile_file_prefix = str(Path(folder) / "profile")
            session = self._open_session(options)
            run = self._runner(session, batch)
            profiled.warm_up(run)
            starts: list[int] = []
            for _ in range(profiled.iterations):
                starts.append(tracer.clock.now())
                run()
            events = json.loads(Path(session.end_profiling()).read_text())
            profile_start_ns = session.get_profiling_start_time_ns()
            del run, session
        tracer.extend(
            ort_profile_to_spans(
                events,
                trace_id=tracer.trace_id,
                parent_id=profiled.parent_id,
                offset_ns=profile_start_ns,
                batch_size=profiled.batch_size,
                level=profiled.level,
                inference_starts_ns=starts,
                device=self.device if self.device.startswith("cuda") else None,
            )
        )
        return True

    def _runner(self, session: ort.InferenceSession, batch: Any) -> Any:
        """A no-argument callable running one inference of `batch` on `session`."""
        if isinstance(batch, dict):
            return lambda: session.run(None, batch)
        binding = self._bind(session, batch.inputs)

        def run_bound() -> None:
            session.run_with_iobinding(binding)
            binding.synchronize_outputs()

        return run_bound

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
        if self.options.precision is not None or self.options.quantize is not None:
            # The arithmetic asked for: the graph's fp32 (the only precision admitted here), int8
            # where the graph is quantised.
            facts["precision"] = "fp32"
            facts["quantize"] = self.options.quantize or "none"
            if self.options.quantize == "int8" and self._graph is not None:
                from mlscope.runtime.predictors.onnxruntime.quantize import recorded_nodes

                facts["quantized_nodes"] = recorded_nodes(self._graph)
        if self._warm is not None:  # the store's optimised graph, not the file
            facts["graph"] = f"{self._warm.key} (model store)"
        elif self._graph is not None:
            facts["graph"] = self._graph.name
        if self._source_graph is not None:
            facts["source_graph"] = self._source_graph.name
        return facts

    def close(self) -> None:
        self._session = None
        self._warm_graph = None
        if self._warm is not None:
            self._warm.close()
            self._warm = None
