"""The TensorFlow predictor: a `tf.keras.applications` architecture with random weights on the
requested device, called through one `tf.function`, with TF's thread pools, build facts, and the
FRAMEWORK and LIBRARY trace passes from TF's profiler (see `profile`)."""

from __future__ import annotations

import os

# Before TensorFlow is imported, in the one process that runs it: its C++ INFO and WARNING lines
# (CPU feature notices, ...) are noise on the predictor's stderr; errors still show. An operator's
# own setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import re
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from mlscope.runtime.predictors.base import Predictor, PredictorError
from mlscope.runtime.predictors.tensorflow.profile import PROFILE_LEVELS, capture_xspace, xspace_to_spans
from mlscope.runtime.trace.profiled import ProfiledPass

__all__ = ["TensorFlowPredictor", "parameter_ops"]

_GPU_DEVICE = re.compile(r"(?:cuda|gpu)(?::(?P<index>\d+))?")
_DEFAULT_CLASSES = 1000


def parameter_ops(function: Any) -> set[str]:
    """Node names of the ops in a concrete function's graph that do not depend on its inputs:
    weight reads and what is computed from weights alone (BatchNormalization's rsqrt(variance + ε)·γ).

    Args:
        function: a `ConcreteFunction`; its captured variables are inputs of type resource.

    Returns:
        The names of every op not reached from a non-resource input through data edges.
    """
    reached: set[str] = set()
    pending = [tensor.op for tensor in function.inputs if tensor.dtype != tf.resource]
    while pending:
        op = pending.pop()
        if op.name in reached:
            continue
        reached.add(op.name)
        pending.extend(consumer for output in op.outputs for consumer in output.consumers())
    return {op.name for op in function.graph.get_operations()} - reached


def _shapes(tensors: Any) -> list[list[int | None]] | None:
    """Shapes of a Keras layer's symbolic inputs or outputs (None for the batch axis)."""
    values = tensors if isinstance(tensors, list | tuple) else [tensors]
    try:
        return [[None if dim is None else int(dim) for dim in value.shape] for value in values]
    except (AttributeError, TypeError):
        return None


class TensorFlowPredictor(Predictor):
    NAME: ClassVar[str] = "tensorflow"

    _model: Any = None
    _function: Any = None
    _device_name: str = "/CPU:0"

    @classmethod
    def framework_version(cls) -> str:
        return str(tf.__version__)

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        build = dict(tf.sysconfig.get_build_info())
        onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
        return {
            "cuda_build": bool(build.get("is_cuda_build")),
            "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"),
            "rocm_build": bool(build.get("is_rocm_build")),
            "tensorrt_build": bool(build.get("is_tensorrt_build")),
            # oneDNN's custom ops are on by default in x86 Linux builds since TF 2.9; the env turns them off.
            "onednn_opts": onednn not in ("0", "false", "False"),
            "TF_ENABLE_ONEDNN_OPTS": onednn,
            "keras": str(tf.keras.__version__),
        }

    def _resolve_device(self) -> str:
        """The TF device name of `self.device` ("cpu", "cuda", "cuda:N", "gpu:N").

        Raises:
            PredictorError: an unknown device, or a GPU TensorFlow does not see.
        """
        if self.device == "cpu":
            return "/CPU:0"
        match = _GPU_DEVICE.fullmatch(self.device)
        if match is None:
            raise PredictorError(f"device {self.device!r}: TensorFlow runs on cpu or cuda[:N]")
        index = int(match["index"] or 0)
        gpus = tf.config.list_physical_devices("GPU")
        if index >= len(gpus):
            cuda = "a CUDA build" if tf.test.is_built_with_cuda() else "a build without CUDA"
            raise PredictorError(f"device {self.device}: this TensorFlow ({cuda}) sees {len(gpus)} GPUs")
        return f"/GPU:{index}"

    def _configure_threads(self) -> None:
        try:
            if self.options.threads:
                tf.config.threading.set_intra_op_parallelism_threads(self.options.threads)
            if self.options.inter_op_threads:
                tf.config.threading.set_inter_op_parallelism_threads(self.options.inter_op_threads)
        except RuntimeError as exc:  # only settable before TF's runtime starts
            raise PredictorError(f"threads: {exc}") from exc

    def load(self) -> None:
        source = self.manifest.source
        if source.kind != "keras_applications":
            raise PredictorError(f"TensorFlow runs keras_applications sources, not {source.kind!r}")
        builder = getattr(tf.keras.applications, source.target, None)
        if not callable(builder):
            raise PredictorError(f"tf.keras.applications has no architecture {source.target!r}")
        self._configure_threads()
        self._device_name = self._resolve_device()
        tf.keras.utils.set_random_seed(self.options.seed)
        (spec,) = self.manifest.inputs
        classes = int(self.manifest.attributes.get("classes", _DEFAULT_CLASSES))
        with tf.device(self._device_name):
            # Logits, like the other frameworks' graphs: softmax is the manifest's postprocessing.
            self._model = builder(
                weights=None, input_shape=tuple(spec.shape), classes=classes, classifier_activation=None
            )
        # No XLA (jit_compile=False): the graph runs on TF's own kernels (oneDNN on the CPU).
        self._function = tf.function(self._call, reduce_retracing=True, jit_compile=False)

    def _call(self, *inputs: Any) -> Any:
        # The device scope applies while tracing, so calling the function costs no scope entry.
        with tf.device(self._device_name):
            return self._model(inputs[0] if len(inputs) == 1 else list(inputs), training=False)

    def _on_gpu(self) -> bool:
        return self._device_name.startswith("/GPU")

    def prepare(self, arrays: dict[str, np.ndarray]) -> tuple[Any, ...]:
        with tf.device(self._device_name):
            return tuple(
                tf.identity(tf.convert_to_tensor(arrays[spec.name])) for spec in self.manifest.inputs
            )

    def predict(self, batch: Sequence[Any]) -> Any:
        function = self._function
        assert function is not None, "load() first"
        outputs = function(*batch)
        if self._on_gpu():
            # The call returns once its GPU work is queued; the timing must cover the work.
            tf.test.experimental.sync_devices()
        return outputs

    def trace_pass(self, profiled: ProfiledPass, batch: Any) -> bool:
        """Profile the pass's warm-up and traced inferences with TF's profiler: FRAMEWORK, one span per
        Keras layer per inference, grouped from the ops in the layer's name scope; LIBRARY, one span
        per TF op executed and, on a GPU, the driver calls and kernels.

        Layers are not timed by calling them one by one: eagerly run layers are not what the
        measured `tf.function` runs (no grappler rewrites, no oneDNN fusions, per-op dispatch), so
        their times would be another program's. The layer spans come from the same graph the
        measured pass runs, with the profiler's per-op overhead (a few µs per op).

        Args: as `Predictor.trace_pass`.

        Returns:
            True for FRAMEWORK and LIBRARY, False (nothing run) for any other level.
        """
        if profiled.level not in PROFILE_LEVELS:
            return False
        assert self._function is not None and self._model is not None, "load() first"
        concrete = self._function.get_concrete_function(*batch)
        xspace, readings = capture_xspace(lambda: self.predict(batch), profiled)
        profiled.tracer.extend(
            xspace_to_spans(
                xspace,
                trace_id=profiled.tracer.trace_id,
                parent_id=profiled.parent_id,
                level=profiled.level,
                batch_size=profiled.batch_size,
                inference_starts_ns=readings,
                layers=self._layer_facts(),
                parameter_ops=parameter_ops(concrete),
            )
        )
        return True

    def _layer_facts(self) -> dict[str, dict[str, Any]]:
        """Class and symbolic shapes of each layer of the model, by layer name."""
        facts: dict[str, dict[str, Any]] = {}
        for layer in self._model.layers:
            facts[layer.name] = {"layer_type": type(layer).__name__}
            for key, attribute in (("input_shapes", "input"), ("output_shapes", "output")):
                try:
                    facts[layer.name][key] = _shapes(getattr(layer, attribute))
                except (AttributeError, ValueError):  # a layer called more than once has no single one
                    facts[layer.name][key] = None
        return facts

    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        names = [spec.name for spec in self.manifest.outputs]
        if isinstance(outputs, dict):
            return {name: np.asarray(value) for name, value in outputs.items()}
        values = outputs if isinstance(outputs, list | tuple) else [outputs]
        return {name: np.asarray(value) for name, value in zip(names, values, strict=False)}

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        facts["device_name"] = self._device_name
        facts["threads"] = tf.config.threading.get_intra_op_parallelism_threads() or "default"
        facts["inter_op_threads"] = tf.config.threading.get_inter_op_parallelism_threads() or "default"
        facts["jit_compile"] = False
        if self._model is not None:
            facts["model"] = self._model.name
            facts["parameters"] = int(self._model.count_params())
        if self._on_gpu():
            details = tf.config.experimental.get_device_details(
                tf.config.list_physical_devices("GPU")[int(self._device_name.rpartition(":")[2])]
            )
            facts["device_details"] = {key: str(value) for key, value in details.items()}
        return facts

    def close(self) -> None:
        self._function = None
        self._model = None
        tf.keras.backend.clear_session()
