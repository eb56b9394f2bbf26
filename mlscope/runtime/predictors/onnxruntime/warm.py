"""ONNX Runtime's side of a warm start.

Published: the graph as ONNX Runtime optimised it for this session's level and providers (saved by a
session with `optimized_model_filepath`: fusions such as batch-norm into convolution make new
weights, which are the ones worth sharing), its initialisers of 1 KB or more taken out into the
store, and the graph kept beside them as a blob whose initialisers point outside it (the small ones,
shape constants among them, stay in it).

Warm: the stripped graph, with every initialiser an OrtValue over the store's mapping handed to the
session (`SessionOptions.add_external_initializers`: ONNX Runtime uses the buffer in place), and graph
optimisation disabled, since the graph is already optimised. Kernels that pre-pack their weights
(MLAS GEMM) still copy them into packed buffers, as in a cold session: pre-packing stays on so the
warm session runs the same kernels as the cold one; those copies are per process.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from mlscope.runtime.model_store import MappedModel, WeightsToStore

__all__ = ["GRAPH_BLOB", "mapped_initializers", "optimised_weights"]

GRAPH_BLOB = "graph.onnx"
# Initialisers smaller than this stay in the graph: shape inference reads constants such as an
# Unsqueeze's axes while the session is made, and cannot from an external initialiser.
_MIN_SHARED_BYTES = 1024
_OUTSIDE = "mlscope-model-store"  # an initialiser's external location: it is handed over, never read
_DATA_FIELDS = (
    "raw_data",
    "float_data",
    "int32_data",
    "int64_data",
    "double_data",
    "uint64_data",
    "string_data",
)


def optimised_weights(open_session: Any, options: ort.SessionOptions) -> WeightsToStore:
    """The optimised graph's initialisers and the graph without them.

    Args:
        open_session: opens a session on the predictor's graph with the given options and the
            predictor's providers.
        options: the predictor's session options (level, threads).
    """
    import onnx
    from onnx import numpy_helper

    with tempfile.TemporaryDirectory(prefix="mlscope-ort-optimised-") as folder:
        optimised = Path(folder) / "optimised.onnx"
        options.optimized_model_filepath = str(optimised)
        # Weights beside the graph, not in it: a graph's protobuf cannot pass 2 GB.
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights")
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "0"
        )
        open_session(options)
        model = onnx.load(str(optimised))
    tensors: list[tuple[str, str, tuple[int, ...], memoryview]] = []
    total = 0
    for initializer in model.graph.initializer:
        array = np.ascontiguousarray(numpy_helper.to_array(initializer))
        if array.dtype.kind in "OUS" or array.nbytes < _MIN_SHARED_BYTES:  # strings: no fixed-size bytes
            continue
        tensors.append(
            (
                initializer.name,
                array.dtype.str,
                tuple(array.shape),
                array.reshape(-1).view(np.uint8).data,
            )
        )
        total += array.nbytes
        for name in _DATA_FIELDS:
            initializer.ClearField(name)
        del initializer.external_data[:]
        initializer.data_location = onnx.TensorProto.EXTERNAL
        location = initializer.external_data.add()
        location.key, location.value = "location", _OUTSIDE
    return WeightsToStore(tensors, total, {GRAPH_BLOB: model.SerializeToString()})


def mapped_initializers(mapped: MappedModel) -> tuple[list[str], list[ort.OrtValue], list[np.ndarray]]:
    """An OrtValue over the mapping per stored initialiser (no copy), and the arrays under them,
    which must live as long as the session."""
    names, values, arrays = [], [], []
    for name, stored in mapped.tensors.items():
        array = np.frombuffer(mapped.view(name), dtype=np.dtype(stored.dtype)).reshape(stored.shape)
        names.append(name)
        arrays.append(array)
        values.append(ort.OrtValue.ortvalue_from_numpy(array))
    return names, values, arrays
