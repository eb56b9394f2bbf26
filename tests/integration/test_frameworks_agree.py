"""The same manifest on PyTorch and on ONNX Runtime is the same network: the exported graph
carries the very weights the PyTorch predictor builds (one seed), so on the same input both give
the same outputs. A comparison across frameworks means nothing without this."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlscope.registry.models import ModelRegistry
from mlscope.runtime.frameworks import load_predictor_class
from mlscope.runtime.predictors import PredictorOptions
from mlscope.runtime.predictors.inputs import synthetic_batches
from mlscope.runtime.predictors.onnxruntime.export import exported_graph

pytestmark = pytest.mark.slow


def outputs(model: str, framework: str, cache: Path, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    manifest = ModelRegistry.load().get(model, framework)
    predictor = load_predictor_class(framework)(
        manifest=manifest, options=PredictorOptions(), cache_dir=cache
    )
    predictor.fetch()
    predictor.load()
    try:
        return predictor.outputs_to_numpy(predictor.predict(predictor.prepare(batch)))
    finally:
        predictor.close()


@pytest.mark.parametrize(
    ("model", "output", "batch_size"), [("resnet18", "logits", 2), ("bert_base", "last_hidden_state", 1)]
)
def test_pytorch_and_onnxruntime_compute_the_same_function(
    shared_cache: Path, model: str, output: str, batch_size: int
) -> None:
    # Given one input batch made from the manifest
    manifest = ModelRegistry.load().get(model, "pytorch")
    (batch,) = synthetic_batches(manifest, batch_size, 1, seed=7)
    # When both frameworks run it
    torch_out = outputs(model, "pytorch", shared_cache, batch)[output]
    ort_out = outputs(model, "onnxruntime", shared_cache, batch)[output]
    # Then the outputs have the batch's shape and agree to float32 tolerance
    assert torch_out.shape[0] == batch_size and torch_out.shape == ort_out.shape
    assert np.isfinite(torch_out).all()
    np.testing.assert_allclose(ort_out, torch_out, rtol=1e-3, atol=1e-4)


def test_the_exported_graph_is_cached_by_manifest_hash(shared_cache: Path) -> None:
    # Given a graph exported once
    manifest = ModelRegistry.load().get("resnet18", "onnxruntime")
    first = exported_graph(manifest, shared_cache)
    stamp = first.stat().st_mtime_ns
    # When it is asked for again
    again = exported_graph(manifest, shared_cache)
    # Then the same file is served, not re-exported, and its name carries the manifest's hash
    assert again == first and again.stat().st_mtime_ns == stamp
    assert manifest.sha256 in again.name
    # And another seed (other random weights) is another graph
    assert exported_graph(manifest, shared_cache, seed=1) != first
