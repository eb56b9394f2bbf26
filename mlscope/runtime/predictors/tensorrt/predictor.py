"""The TensorRT predictor (docs/gpu.md#tensorrt): an engine built by TensorRT's builder from the ONNX
graph ONNX Runtime runs (`onnxruntime.export.onnx_graph`, read by TensorRT's OnnxParser), with one
optimisation profile whose batch axis spans 1 to the largest batch asked for so far, run on an NVIDIA
GPU by one execution context per calling thread on PyTorch's CUDA tensors and stream, and timed by
CUDA events as the PyTorch predictor's GPU path is (`CudaEventTimer`).

The engine is built in `compile`, so its build time is the cold start's `compile_ms` (and a later
batch size beyond the profile builds again: that point's `compile_ms`). It computes in fp32: the
builder's TF32 flag, on by default on GPUs that have it, is cleared, so that its outputs compare
with ONNX Runtime's and PyTorch's on the same graph and weights.
"""

from __future__ import annotations

import importlib.metadata
import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import tensorrt as trt
import torch

from mlscope.runtime.predictors.base import Predictor, PredictorError
from mlscope.runtime.predictors.onnxruntime.export import onnx_graph
from mlscope.runtime.predictors.pytorch.predictor import CudaEventTimer

__all__ = ["TensorRtPredictor"]

# The profile's largest batch when the first one asked for is smaller: a later, larger batch size up
# to this runs on the same engine.
_PROFILE_BATCH = 64
# The builder's scratch memory on the GPU.
_WORKSPACE_BYTES = 1 << 30
# One logger for the process's builders and runtimes, warnings and errors only.
_LOGGER = trt.Logger(trt.Logger.WARNING)


class TensorRtPredictor(Predictor):
    NAME: ClassVar[str] = "tensorrt"

    _graph: Path | None = None
    _device: torch.device | None = None
    _engine: Any = None  # trt.ICudaEngine
    _runtime: Any = None  # trt.Runtime, kept while its engine lives
    _max_batch: int = 0
    _built: int = 0
    _local: threading.local | None = None
    _inputs: list[str] | None = None
    _outputs: list[str] | None = None

    @classmethod
    def framework_version(cls) -> str:
        for distribution in ("tensorrt", "tensorrt-cu13", "tensorrt-cu12"):
            try:
                return importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                continue
        return str(trt.__version__)

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        available = torch.cuda.is_available()
        return {
            "torch": str(torch.__version__),
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0) if available else None,
        }

    def fetch(self) -> None:
        self._graph = onnx_graph(self.manifest, self.cache_dir, seed=self.options.seed)

    def load(self) -> None:
        if not self.device.startswith("cuda"):
            raise PredictorError(
                f"device {self.device}: TensorRT runs on an NVIDIA GPU only; use --device cuda"
            )
        if not torch.cuda.is_available():
            raise PredictorError(
                "TensorRT needs an NVIDIA GPU, and PyTorch (whose CUDA tensors hold its inputs and "
                f"outputs) sees none here: torch {torch.__version__}, CUDA {torch.version.cuda}"
            )
        self._device = torch.device(self.device)
        torch.cuda.set_device(self._device)
        if self._graph is None:
            self.fetch()

    def _build(self, batch_size: int) -> None:
        """Build the engine with a batch axis from 1 to at least `batch_size` (its best shape)."""
        assert self._graph is not None, "fetch() first"
        builder = trt.Builder(_LOGGER)
        network = builder.create_network(0)  # explicit batch: TensorRT 10's only kind
        parser = trt.OnnxParser(network, _LOGGER)
        if not parser.parse_from_file(str(self._graph)):
            errors = "; ".join(str(parser.get_error(index)) for index in range(parser.num_errors))
            raise PredictorError(f"TensorRT's ONNX parser refused {self._graph.name}: {errors}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, _WORKSPACE_BYTES)
        if hasattr(trt.BuilderFlag, "TF32"):  # a flag of weakly typed builds (TensorRT 10)
            config.clear_flag(trt.BuilderFlag.TF32)
        top = max(batch_size, _PROFILE_BATCH)
        profile = builder.create_optimization_profile()
        dynamic = False
        for index in range(network.num_inputs):
            tensor = network.get_input(index)
            shape = tuple(tensor.shape)
            if any(size < 0 for size in shape[1:]):
                raise PredictorError(
                    f"input {tensor.name}: its shape {shape} has a dynamic axis besides the batch; "
                    "mlscope builds TensorRT engines with a dynamic batch axis only"
                )
            if shape and shape[0] < 0:
                dynamic = True
                rest = shape[1:]
                profile.set_shape(tensor.name, (1, *rest), (batch_size, *rest), (top, *rest))
        if dynamic:
            config.add_optimization_profile(profile)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise PredictorError(
                f"TensorRT could not build an engine of {self._graph.name} (see its log above)"
            )
        runtime = trt.Runtime(_LOGGER)
        engine = runtime.deserialize_cuda_engine(serialized)
        names = [engine.get_tensor_name(index) for index in range(engine.num_io_tensors)]
        self._inputs = [name for name in names if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT]
        self._outputs = [name for name in names if name not in self._inputs]
        self._engine, self._runtime = engine, runtime
        self._max_batch = top if dynamic else batch_size
        self._built += 1
        self._local = threading.local()  # contexts belong to the engine they were made from

    def compile(self, batch: Any) -> bool:
        """Build the engine for `batch`'s size, unless the one built covers it (then: False)."""
        size = _batch_size(batch)
        if self._engine is not None and size <= self._max_batch:
            return False
        self._build(size)
        return True

    def compilations(self) -> int | None:
        return self._built

    def compile_cached(self) -> bool | None:
        return False  # every engine is built here; none is read from a cache

    def prepare(self, arrays: dict[str, np.ndarray]) -> Any:
        assert self._device is not None, "load() first"
        return {
            name: torch.as_tensor(np.ascontiguousarray(array), device=self._device)
            for name, array in arrays.items()
        }

    def _context(self) -> Any:
        """This thread's execution context (one runs one inference at a time)."""
        local = self._local
        assert local is not None and self._engine is not None
        context = getattr(local, "context", None)
        if context is None:
            context = local.context = self._engine.create_execution_context()
            local.outputs = {}
        return context

    def predict(self, batch: Any) -> Any:
        self.compile(batch)  # a size beyond the profile (a dataset's last batch) builds again
        assert self._device is not None and self._inputs is not None and self._outputs is not None
        context = self._context()
        engine = self._engine
        for name in self._inputs:
            tensor = batch[name]
            wanted = _torch_dtype(engine.get_tensor_dtype(name))
            if tensor.dtype != wanted:
                tensor = batch[name] = tensor.to(wanted)
            context.set_input_shape(name, tuple(tensor.shape))
            context.set_tensor_address(name, tensor.data_ptr())
        # Output buffers are made once per input shape and thread; a result is copied out of them
        # before the next inference of that shape (`outputs_to_numpy`).
        key = tuple(tuple(batch[name].shape) for name in self._inputs)
        outputs = self._local.outputs.get(key) if self._local is not None else None
        if outputs is None:
            outputs = {
                name: torch.empty(
                    tuple(context.get_tensor_shape(name)),
                    dtype=_torch_dtype(engine.get_tensor_dtype(name)),
                    device=self._device,
                )
                for name in self._outputs
            }
            assert self._local is not None
            self._local.outputs[key] = outputs
        for name, tensor in outputs.items():
            context.set_tensor_address(name, tensor.data_ptr())
        stream = torch.cuda.current_stream(self._device)
        if not context.execute_async_v3(stream.cuda_stream):
            raise PredictorError("TensorRT's execution context failed to run the engine")
        stream.synchronize()
        return outputs

    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        return {
            name: (value.float() if value.dtype == torch.bfloat16 else value).cpu().numpy()
            for name, value in outputs.items()
        }

    def timer(self) -> CudaEventTimer | None:
        return CudaEventTimer(self._device) if self._device is not None else None

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        if self._engine is not None:
            facts["engine"] = {
                "engines_built": self._built,
                "max_batch": self._max_batch,
                # `_v2` since TensorRT 10.1; the first name is gone from 11
                "device_memory_bytes": int(
                    getattr(self._engine, "device_memory_size_v2", None) or self._engine.device_memory_size
                ),
                "tf32": False,
            }
            facts["precision"] = "fp32"
        if self._graph is not None:
            facts["graph"] = self._graph.name
        return facts

    def close(self) -> None:
        self._local = None
        self._engine = None
        self._runtime = None


def _batch_size(batch: Any) -> int:
    """A prepared batch's size: its first input's leading axis."""
    return int(next(iter(batch.values())).shape[0])


def _torch_dtype(dtype: Any) -> torch.dtype:
    """A TensorRT data type as PyTorch's (through numpy's)."""
    if dtype == trt.DataType.BF16:
        return torch.bfloat16
    return torch.from_numpy(np.empty(0, dtype=trt.nptype(dtype))).dtype
