"""The PyTorch predictor: eval mode, inference mode, placement on the requested device, CUDA-event
timing with synchronisation on GPUs, and torch.compile (`options.compile`, inductor) compiled ahead
of each batch size's measurement."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from mlscope.runtime.predictors.base import Predictor, PredictorError
from mlscope.runtime.predictors.pytorch.models import build_module
from mlscope.runtime.predictors.pytorch.profile import layer_pass, operator_pass
from mlscope.runtime.predictors.pytorch.variants import (
    check_compiler,
    compiled_frames,
    fxgraph_cache_hit,
    input_dtype,
    variant_module,
)
from mlscope.runtime.trace.profiled import ProfiledPass

if TYPE_CHECKING:
    from mlscope.contract.generation import GenerationSettings
    from mlscope.runtime.generate.records import GenerateEngine
    from mlscope.runtime.model_store import MappedModel, WeightsToStore

__all__ = ["CudaEventTimer", "PyTorchPredictor"]


def _numpy(value: torch.Tensor) -> np.ndarray:
    value = value.detach().cpu()
    # numpy has no bfloat16: a reduced-precision output is compared as float32.
    return (value.float() if value.dtype == torch.bfloat16 else value).numpy()


class CudaEventTimer:
    """Times one inference on the GPU's own clock: an event before, an event after, then waits.

    Each thread gets its own pair of events (the offline scenario may time from several threads).
    """

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._local = threading.local()

    def time(self, predict: Callable[[Any], Any], batch: Any) -> int:
        local = self._local
        if not hasattr(local, "start"):
            local.start = torch.cuda.Event(enable_timing=True)
            local.end = torch.cuda.Event(enable_timing=True)
            local.stream = torch.cuda.current_stream(self._device)
        local.start.record(local.stream)
        predict(batch)
        local.end.record(local.stream)
        local.end.synchronize()
        return int(local.start.elapsed_time(local.end) * 1_000_000)


class PyTorchPredictor(Predictor):
    NAME: ClassVar[str] = "pytorch"

    _model: torch.nn.Module | None = None
    # The module as built (the model store's weights), and the dtype float inputs are cast to.
    _loaded: torch.nn.Module | None = None
    _dtype: torch.dtype | None = None
    _device: torch.device | None = None
    _mapped: MappedModel | None = None

    @classmethod
    def framework_version(cls) -> str:
        return str(torch.__version__)

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        return {
            "cuda": torch.version.cuda,
            "cudnn": cudnn,
            "mkldnn": torch.backends.mkldnn.is_available(),
            "openmp": torch.backends.openmp.is_available(),
            "parallel": torch.__config__.parallel_info().splitlines()[0:3],
        }

    def load(self) -> None:
        self._device = self._open_device()
        self._use(build_module(self.manifest, seed=self.options.seed).to(self._device))

    def _use(self, module: torch.nn.Module) -> None:
        """Run `module` (as built, on the device) as the options ask: cast, quantised or compiled
        (variants.py); kept as built too, for the model store."""
        assert self._device is not None
        self._loaded = module
        self._model = variant_module(module, self.options, self._device)
        self._dtype = input_dtype(self.options)

    def compile(self, batch: tuple[torch.Tensor, ...]) -> bool:
        """One call of the compiled module on `batch`: dynamo traces it and inductor compiles a graph
        for its shapes (a later batch size compiles again, usually once, with a dynamic batch axis)."""
        if self.options.compile_mode is None:
            return False
        assert self._device is not None, "load() first"
        check_compiler(self._device)
        self.predict(batch)
        return True

    def compilations(self) -> int | None:
        return None if self.options.compile_mode is None else compiled_frames()

    def compile_cached(self) -> bool | None:
        return None if self.options.compile_mode is None else fxgraph_cache_hit()

    def warm_variant(self) -> str:
        return ""  # the module's weights are the manifest's and the seed's alone

    def weights_to_store(self) -> WeightsToStore:
        from mlscope.runtime.model_store import WeightsToStore
        from mlscope.runtime.predictors.pytorch.warm import module_tensors

        assert self._loaded is not None, "load() first"
        tensors, size = module_tensors(self._loaded)
        return WeightsToStore(tensors, size)

    def load_mapped(self, mapped: MappedModel) -> None:
        """The module built on the meta device, the store's tensors attached. On the CPU they are
        used in place; on a GPU they are copied to the device from the mapping (no disk read, no
        host copy; CUDA IPC between predictor processes is not implemented, and this path has not
        run on a GPU here)."""
        from mlscope.runtime.predictors.pytorch.warm import attach_mapped

        self._device = self._open_device()
        skeleton = build_module(self.manifest, seed=self.options.seed, skeleton=True)
        model = attach_mapped(skeleton, mapped)
        self._mapped = mapped
        self._use(model if self._device.type == "cpu" else model.to(self._device))

    def generation_engine(self, settings: GenerationSettings) -> GenerateEngine:
        """The manifest's transformers decoder or encoder-decoder as an in-process token generator
        (see `generate.InProcessEngine`); its weights come from a model directory built once under
        the cache (`model_directory.materialise`), the one a server would serve."""
        from mlscope.runtime.predictors.pytorch.generate import open_engine

        self._device = self._open_device()
        return open_engine(self.manifest, self._device, self.cache_dir, self.options.seed, self.describe)

    def _open_device(self) -> torch.device:
        """The requested device, checked, with the thread options applied."""
        device = torch.device(self.device)
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise PredictorError(f"device {self.device}: this PyTorch sees no CUDA device")
            if (device.index or 0) >= torch.cuda.device_count():
                raise PredictorError(f"device {self.device}: only {torch.cuda.device_count()} CUDA devices")
            # The caching allocator's statistics exist only once CUDA is initialised: before the
            # process's first CUDA call, resetting them fails ("Invalid device argument").
            torch.cuda.init()
            # The allocator's peak then covers this model alone (an inline runner's earlier jobs
            # share the process).
            torch.cuda.reset_peak_memory_stats(device)
        if self.options.threads:
            torch.set_num_threads(self.options.threads)
        if self.options.inter_op_threads:
            try:
                torch.set_num_interop_threads(self.options.inter_op_threads)
            except RuntimeError as exc:  # only settable before the first parallel work
                raise PredictorError(f"inter_op_threads: {exc}") from exc
        return device

    def prepare(self, arrays: dict[str, np.ndarray]) -> tuple[torch.Tensor, ...]:
        tensors = (torch.from_numpy(arrays[spec.name]).to(self._device) for spec in self.manifest.inputs)
        dtype = self._dtype
        return tuple(t.to(dtype) if dtype is not None and t.is_floating_point() else t for t in tensors)

    def predict(self, batch: tuple[torch.Tensor, ...]) -> Any:
        model = self._model
        assert model is not None, "load() first"
        with torch.inference_mode():
            outputs = model(*batch)
        if self._device is not None and self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        return outputs

    def trace_pass(self, profiled: ProfiledPass, batch: Any) -> bool:
        """FRAMEWORK: leaf-module hooks; LIBRARY: torch.profiler, with Python stacks at FULL."""
        model, device = self._model, self._device
        assert model is not None and device is not None, "load() first"

        def run() -> Any:
            return self.predict(batch)

        if profiled.level == "FRAMEWORK":
            if self.options.compile_mode is not None:
                # Leaf-module hooks would break the compiled graph apart: a compiled model's layers
                # are not the ones it runs. Its kernels show at LIBRARY level.
                return False
            layer_pass(model, run, profiled, device=device)
            return True
        if profiled.level == "LIBRARY":
            operator_pass(model, run, profiled, device=device, with_stack=profiled.tracer.level == "FULL")
            return True
        return False

    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        """The outputs by the manifest's names: a tensor, a tuple or list of tensors (in order), a
        mapping (torchvision's segmentation models return {"out": ...}; taken by name), or a list of
        one mapping per image (torchvision's detection models: each image has its own number of
        detections, so each name's arrays are concatenated in image order)."""
        names = [spec.name for spec in self.manifest.outputs]
        if isinstance(outputs, Mapping):
            return {name: _numpy(outputs[name]) for name in names if name in outputs}
        if isinstance(outputs, list) and outputs and all(isinstance(item, Mapping) for item in outputs):
            return {
                name: np.concatenate([_numpy(item[name]) for item in outputs])
                for name in names
                if name in outputs[0]
            }
        values = outputs if isinstance(outputs, tuple | list) else (outputs,)
        return {name: _numpy(value) for name, value in zip(names, values, strict=False)}

    def timer(self) -> CudaEventTimer | None:
        if self._device is not None and self._device.type == "cuda":
            return CudaEventTimer(self._device)
        return None

    def device_memory_peak_bytes(self) -> int | None:
        if self._device is None or self._device.type != "cuda":
            return None
        return int(torch.cuda.max_memory_allocated(self._device))

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        if self.options.compile_mode is not None:
            facts["compile"] = self.options.compile_mode
        if self._dtype is not None or self.options.quantize == "int8":
            facts["precision"] = self.options.precision or "fp32"
            facts["quantize"] = self.options.quantize or "none"
        facts["threads"] = torch.get_num_threads()
        facts["inter_op_threads"] = torch.get_num_interop_threads()
        if self._device is not None and self._device.type == "cuda":
            facts["device_name"] = torch.cuda.get_device_name(self._device)
        return facts

    def close(self) -> None:
        self._model = None
        self._loaded = None
        if self._mapped is not None:
            self._mapped.close()
            self._mapped = None
        if self._device is not None and self._device.type == "cuda":
            torch.cuda.empty_cache()
