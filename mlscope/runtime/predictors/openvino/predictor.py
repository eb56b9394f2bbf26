"""The OpenVINO predictor (docs/openvino.md): the ONNX graph ONNX Runtime runs, read by
`Core.read_model` and compiled for the CPU with the request's performance hint, inference precision
and threads; one inference request per calling thread (the offline scenario predicts from several);
and the FRAMEWORK and LIBRARY trace passes from OpenVINO's performance counters.

The graph is ONNX Runtime's own (`onnxruntime.export.onnx_graph`: a user's .onnx file as it is, a
PyTorch source exported by the same exporter with the same seeded weights), so a parity check against
ONNX Runtime compares two runtimes on one graph.
"""

from __future__ import annotations

import importlib.metadata
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import openvino as ov

from mlscope.contract.options import FRAMEWORK_OPTION_DEFAULTS
from mlscope.runtime.predictors.base import Predictor, PredictorError
from mlscope.runtime.predictors.onnxruntime.export import onnx_graph
from mlscope.runtime.predictors.openvino.profile import (
    PROFILE_LEVELS,
    ProfiledRun,
    ov_profile_to_spans,
    profiled_nodes,
)
from mlscope.runtime.trace.profiled import ProfiledPass

__all__ = ["OpenVinoPredictor", "precision_refusal"]

# The one OpenVINO device mlscope runs on.
_DEVICE = "CPU"


# A request's precision (contract.options.PRECISIONS) as OpenVINO's INFERENCE_PRECISION_HINT names it.
_ELEMENT_TYPES = {"fp32": "f32", "f32": "f32", "bf16": "bf16", "fp16": "f16"}


def precision_refusal(precision: str, capabilities: Sequence[str]) -> str | None:
    """Why OpenVINO's `precision` (f32, bf16, f16) cannot run on a CPU whose OPTIMIZATION_CAPABILITIES
    are `capabilities` (["FP32", "BF16", "INT8", ...]), in one line naming the option; None when it can."""
    needs = {
        "bf16": ("BF16", "bfloat16 instructions (AMX or AVX-512 BF16)"),
        "f16": ("FP16", "float16 arithmetic"),
    }
    if precision in needs and needs[precision][0] not in capabilities:
        return (
            f"options.precision: {precision} needs a CPU with {needs[precision][1]}; this one offers "
            f"{', '.join(capabilities) or 'none'} to OpenVINO: use precision=fp32"
        )
    return None


def _text(value: Any) -> str:
    """An OpenVINO property value as text: an element type by its short name ("f32", "bf16"), an
    enum member by its name ("LATENCY")."""
    if hasattr(value, "get_type_name"):
        return str(value.get_type_name())
    name = getattr(value, "name", None)
    return str(name) if isinstance(name, str) else str(value)


class OpenVinoPredictor(Predictor):
    NAME: ClassVar[str] = "openvino"

    _graph: Path | None = None
    _model: ov.Model | None = None
    _compiled: ov.CompiledModel | None = None
    _local: threading.local | None = None
    _output_names: list[str] | None = None

    @classmethod
    def framework_version(cls) -> str:
        try:
            return importlib.metadata.version("openvino")
        except importlib.metadata.PackageNotFoundError:
            return str(ov.__version__)

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        core = ov.Core()
        return {
            "build": ov.get_version(),
            "available_devices": list(core.available_devices),
            "cpu": str(core.get_property(_DEVICE, "FULL_DEVICE_NAME")),
            "optimization_capabilities": list(core.get_property(_DEVICE, "OPTIMIZATION_CAPABILITIES")),
        }

    @property
    def performance_hint(self) -> str:
        """The hint compiled with: the request's, else LATENCY."""
        return self.options.performance_hint or FRAMEWORK_OPTION_DEFAULTS["performance_hint"][0]

    @property
    def precision(self) -> str:
        """The inference precision compiled with: the request's, else f32 (OpenVINO's own default is
        bf16 on a CPU that has it, which would not compare with the other frameworks' f32)."""
        return _ELEMENT_TYPES[self.options.precision or "fp32"]

    def fetch(self) -> None:
        self._graph = onnx_graph(self.manifest, self.cache_dir, seed=self.options.seed)

    def load(self) -> None:
        if self.device != "cpu":
            raise PredictorError(
                f"device {self.device}: mlscope runs OpenVINO on the CPU only (its CPU plugin); "
                "use --device cpu"
            )
        if self._graph is None:
            self.fetch()
        core = ov.Core()
        capabilities = [str(item) for item in core.get_property(_DEVICE, "OPTIMIZATION_CAPABILITIES")]
        refusal = precision_refusal(self.precision, capabilities)
        if refusal is not None:
            raise PredictorError(refusal)
        self._model = core.read_model(str(self._graph))
        self._compiled = core.compile_model(self._model, _DEVICE, self._config())
        self._local = threading.local()
        wanted = {spec.name for spec in self.manifest.outputs}
        self._output_names = [
            next((name for name in sorted(port.get_names()) if name in wanted), port.get_any_name())
            for port in self._compiled.outputs
        ]

    def _config(self) -> dict[str, Any]:
        """The compile configuration: hint, precision and (when asked) threads."""
        config: dict[str, Any] = {
            "PERFORMANCE_HINT": self.performance_hint,
            "INFERENCE_PRECISION_HINT": self.precision,
        }
        if self.options.threads:
            config["INFERENCE_NUM_THREADS"] = self.options.threads
        return config

    def _request(self) -> ov.InferRequest:
        """This thread's inference request (one request runs one inference at a time)."""
        local = self._local
        assert local is not None and self._compiled is not None, "load() first"
        request = getattr(local, "request", None)
        if request is None:
            request = local.request = self._compiled.create_infer_request()
        return request

    def prepare(self, arrays: dict[str, np.ndarray]) -> Any:
        return {name: np.ascontiguousarray(array) for name, array in arrays.items()}

    def predict(self, batch: Any) -> Any:
        # The inputs are shared (no copy on the timed path); the outputs are copied out of the
        # request, so they stay valid after its next inference.
        return self._request().infer(batch, share_inputs=True)

    def trace_pass(self, profiled: ProfiledPass, batch: Any) -> bool:
        """Profile the pass's traced inferences with OpenVINO's performance counters and record them as
        spans (`profile.ov_profile_to_spans`): FRAMEWORK, one layer span per node executed; LIBRARY,
        one operator span per node, named by its type. On the CPU both levels see the same nodes: the
        counters record nothing below a node.

        The counters come from a second compiled model with the same configuration plus
        `PERF_COUNT`, so the measured one is never profiled.

        Returns:
            True for FRAMEWORK and LIBRARY, False (nothing run) for any other level.
        """
        if profiled.level not in PROFILE_LEVELS:
            return False
        assert self._model is not None, "load() first"
        core = ov.Core()
        compiled = core.compile_model(self._model, _DEVICE, {**self._config(), "PERF_COUNT": True})
        request = compiled.create_infer_request()
        profiled.warm_up(lambda: request.infer(batch, share_inputs=True))
        clock = profiled.tracer.clock
        runs = []
        for _ in range(profiled.iterations):
            start = clock.now()
            request.infer(batch, share_inputs=True)
            end = clock.now()
            runs.append(ProfiledRun(start, end, profiled_nodes(request.get_profiling_info())))
        profiled.tracer.extend(
            ov_profile_to_spans(
                runs,
                trace_id=profiled.tracer.trace_id,
                parent_id=profiled.parent_id,
                batch_size=profiled.batch_size,
                level=profiled.level,
            )
        )
        return True

    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        assert self._output_names is not None, "load() first"
        return {name: np.asarray(outputs[index]) for index, name in enumerate(self._output_names)}

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        compiled = self._compiled
        if compiled is not None:
            facts["performance_hint"] = _text(compiled.get_property("PERFORMANCE_HINT"))
            facts["precision"] = _text(compiled.get_property("INFERENCE_PRECISION_HINT"))
            facts["streams"] = int(compiled.get_property("NUM_STREAMS"))
            facts["threads"] = int(compiled.get_property("INFERENCE_NUM_THREADS"))
            facts["optimal_infer_requests"] = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        if self._graph is not None:
            facts["graph"] = self._graph.name
        return facts

    def close(self) -> None:
        self._local = None
        self._compiled = None
        self._model = None
