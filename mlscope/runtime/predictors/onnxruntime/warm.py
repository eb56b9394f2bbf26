"""ONNX Runtime's side of a warm start.

Published: the graph as ONNX Runtime optimised it for this session's level and providers, saved by a
session with `optimized_model_filepath` (fusions such as batch-norm into convolution make new
weights, which are the ones worth sharing), with its initialisers of 1 KB or more in an external
data file beside it, and with the weights its kernels pre-pack (MLAS's GEMM packs a MatMul's or a
Gemm's constant B) saved to that file too, pre-packed
(`session.save_external_prepacked_constant_initializers`). Both files go into the store's entry
as they are.

Warm: a session opened on the entry's graph by path, with graph optimisation disabled (the graph is
already optimised). ONNX Runtime maps the external data file from the store (no read, no copy) and,
for each kernel that pre-packs a weight, uses the pre-packed copy it finds in that mapping instead
of keeping the one it computes: every process shares the file's pages, pre-packed weights included.
The kernels are the cold session's, with the same pre-packed weights. What the warm session still
does in each process is ONNX Runtime's own: it plans the graph's memory, and it pre-packs each
weight once more (the pre-packed copy in the file is looked up by a hash of the one it computes),
then drops what it computed.

Measured against the earlier form (the initialisers handed over as OrtValues over the store's
mapping with `add_external_initializers`): ONNX Runtime 1.31 copied every one of those into memory of
its own, and kept a pre-packed copy per process as well, so nothing was shared; see
docs/warm-start.md.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnxruntime as ort

from mlscope.runtime.model_store import MappedModel, WeightsToStore
from mlscope.runtime.predictors.base import PredictorError

__all__ = ["DATA_FILE", "GRAPH_FILE", "STORED_FORM", "graph_path", "optimised_files"]

GRAPH_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"  # the graph's external data: initialisers and pre-packed weights
# Part of the entry's key: an entry of an earlier stored form is never opened as this one.
STORED_FORM = "ort-files-prepacked"
# Initialisers smaller than this stay in the graph (ONNX Runtime's own default threshold).
_MIN_EXTERNAL_BYTES = 1024


def optimised_files(
    open_session: Callable[[ort.SessionOptions], Any], options: ort.SessionOptions
) -> WeightsToStore:
    """The optimised graph and its external data, pre-packed weights included, in a directory the
    store takes.

    Args:
        open_session: opens a session on the predictor's graph with the given options and the
            predictor's providers.
        options: the predictor's session options (level, threads).

    Raises:
        PredictorError: ONNX Runtime saved no graph.
    """
    folder = Path(tempfile.mkdtemp(prefix="mlscope-ort-optimised-"))
    try:
        options.optimized_model_filepath = str(folder / GRAPH_FILE)
        # Weights beside the graph, not in it (a graph's protobuf cannot pass 2 GB), where ONNX
        # Runtime maps them from; the pre-packed ones with them.
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", DATA_FILE)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", str(_MIN_EXTERNAL_BYTES)
        )
        options.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
        open_session(options)
        if not (folder / GRAPH_FILE).is_file():
            raise PredictorError("ONNX Runtime saved no optimised graph for the model store")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return WeightsToStore([], 0, files=folder)


def graph_path(mapped: MappedModel) -> Path:
    """The entry's optimised graph, for a session opened by path (its external data beside it)."""
    return mapped.file(GRAPH_FILE)
