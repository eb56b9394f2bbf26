"""Catalogue manifests build and run on the real frameworks: one entry per family of a small sample,
built by the PyTorch predictor's `build_module` and run once on a synthetic batch of 1, and five of
them exported to ONNX through the ONNX Runtime exporter and run in onnxruntime, giving what PyTorch
gives. (`benchmarks/catalogue.py` tries every entry; this keeps a cheap sample in the test suite.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mlscope.registry.catalogue import Catalogue
from mlscope.runtime.predictors.inputs import synthetic_batches
from mlscope.runtime.predictors.onnxruntime.export import exported_graph
from mlscope.runtime.predictors.pytorch.models import build_module

pytestmark = pytest.mark.slow

CATALOGUE = Catalogue.load()
SAMPLE = [
    "torchvision:resnet18",
    "torchvision:mobilenet_v3_small",
    "torchvision:squeezenet1_1",
    "torchvision:lraspp_mobilenet_v3_large",
    "hf:bert",
    "hf:gpt2",
    "hf:vit",
    "hf:t5",
    "timm:mobilenetv3_small_100",
    "timm:vit_tiny_patch16_224",
]
EXPORTED = [
    "torchvision:squeezenet1_1",
    "torchvision:mobilenet_v3_small",
    "hf:bert",
    "timm:mobilenetv3_small_100",
    "timm:vit_tiny_patch16_224",
]


def first_output(raw: object) -> torch.Tensor:
    """The first output tensor: segmentation models return a dict {"out": ...}."""
    if isinstance(raw, dict):
        return next(iter(raw.values()))
    assert isinstance(raw, torch.Tensor)
    return raw


def run_in_torch(ref: str, arrays: dict[str, np.ndarray]) -> torch.Tensor:
    manifest = CATALOGUE.manifest(ref, "pytorch")
    model = build_module(manifest, seed=0)
    inputs = tuple(torch.from_numpy(arrays[spec.name]) for spec in manifest.inputs)
    with torch.inference_mode():
        return first_output(model(*inputs))


@pytest.mark.parametrize("ref", SAMPLE)
def test_a_catalogue_entry_builds_and_runs_on_pytorch(ref: str) -> None:
    # Given the entry's PyTorch manifest and one synthetic sample of its inputs' shapes
    manifest = CATALOGUE.manifest(ref, "pytorch")
    (arrays,) = synthetic_batches(manifest, 1, 1)
    assert all(arrays[spec.name].shape == (1, *spec.shape) for spec in manifest.inputs)
    # When the model is built from its source and called once
    output = run_in_torch(ref, arrays)
    # Then it returns a finite batch of one
    assert output.shape[0] == 1 and bool(torch.isfinite(output).all())


@pytest.mark.parametrize("ref", EXPORTED)
def test_a_catalogue_entry_exports_to_onnx_and_runs_in_onnxruntime(ref: str, tmp_path: Path) -> None:
    import onnxruntime as ort

    # Given the entry's ONNX Runtime manifest, exported to ONNX by the exporter the predictor uses
    manifest = CATALOGUE.manifest(ref, "onnxruntime")
    graph = exported_graph(manifest, tmp_path)
    assert graph.is_file() and manifest.sha256 in graph.name
    # When onnxruntime runs it on the sample PyTorch runs too
    (arrays,) = synthetic_batches(manifest, 1, 1, seed=3)
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == [spec.name for spec in manifest.inputs]
    (ours, *_) = session.run(None, arrays)
    # Then it computes what PyTorch computes from the same source and seed
    expected = run_in_torch(ref, arrays).numpy()
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, rtol=1e-3, atol=1e-4)
