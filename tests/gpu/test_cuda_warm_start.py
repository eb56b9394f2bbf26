"""Warm starts onto the GPU (docs/warm-start.md): the model store's mapped weights copied to the
device (PyTorch's `load_mapped`), answering as the model loaded cold on the same GPU, and `mlscope run
--device cuda` with a model store measuring both starts, the second process from the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from mlscope.runtime.model_store import ModelStore, entry_key
from mlscope.runtime.predictors.inputs import synthetic_batch
from mlscope.runtime.predictors.pytorch.predictor import PyTorchPredictor
from tests.fixtures.gpu import WIDE_MLP, WIDE_MLP_WIDTH
from tests.fixtures.models import tiny_mlp
from tests.integration.test_run_cli import json_lines, mlscope
from tests.integration.test_warm_start import manifest

pytestmark = pytest.mark.slow

MIB = 2**20
QUICK = [
    "--min-seconds", "0.2", "--min-count", "5", "--max-seconds", "5", "--measure", "warmup_seconds=0.05",
    "--measure", "stability=0.99", "--measure", "contention_limit=1.0",
]  # fmt: skip


def test_a_model_warm_started_onto_the_gpu_answers_as_the_cold_one(
    cuda: torch.device, tmp_path: Path, record_property: Any
) -> None:
    # Given a model with tied weights, batch-norm statistics and a buffer outside its state dict,
    # loaded cold on the GPU, and its answer to a batch
    model = manifest("pytorch", "tied_net")
    cold = PyTorchPredictor(manifest=model, device=str(cuda), cache_dir=tmp_path / "cache")
    cold.fetch()
    cold.load()
    batch = synthetic_batch(model, 64, np.random.default_rng(1))
    expected = cold.outputs_to_numpy(cold.predict(cold.prepare(batch)))["y"]
    # When its weights are published to the store and another predictor maps them onto the GPU
    store = ModelStore(tmp_path / "models", 64 * MIB)
    key = entry_key("pytorch", model.sha256, 0, cold.warm_variant() or "", model.name)
    store.publish(key, cold.weights_to_store()).close()
    cold.close()
    warm = PyTorchPredictor(manifest=model, device=str(cuda), cache_dir=tmp_path / "cache")
    warm.fetch()
    mapped = store.open(key)
    assert mapped is not None
    warm.load_mapped(mapped)
    try:
        # Then every weight and buffer of the warm model is on the GPU
        module = warm._model
        assert module is not None
        tensors = [*module.parameters(), *module.buffers()]
        assert tensors and {t.device.type for t in tensors} == {"cuda"}
        # And it answers bitwise as the cold one: the same weights through the same kernels
        answer = warm.outputs_to_numpy(warm.predict(warm.prepare(batch)))["y"]
        np.testing.assert_array_equal(answer, expected)
    finally:
        warm.close()
    record_property("figure", f"{len(tensors)} tensors on {cuda}; outputs {answer.shape} bitwise equal")


def test_mlscope_run_on_cuda_warm_starts_a_second_process_from_the_store(
    gpu_env: dict[str, str], tmp_path: Path, record_property: Any
) -> None:
    # Given a machine with a model store
    env = {**gpu_env, "MLSCOPE_MODEL_STORE_MB": "256", "MLSCOPE_MODEL_STORE_DIR": str(tmp_path / "models")}
    # When the wide MLP is run on the GPU twice, each time in a predictor process of its own
    runs = [
        mlscope(env, "run", WIDE_MLP, "-f", "pytorch", "--device", "cuda", "-b", "8", "--json", *QUICK)
        for _ in range(2)
    ]
    assert all(done.returncode in (0, 3) for done in runs), [done.stderr[-2000:] for done in runs]
    first, second = (json_lines(done.stdout)[0] for done in runs)
    # Then both ran on the GPU and measured a warm start: the first published the weights, the
    # second mapped them from the store
    weights_mb = sum(p.numel() * p.element_size() for p in tiny_mlp(WIDE_MLP_WIDTH).parameters()) / MIB
    for result in (first, second):
        assert result["status"] == "succeeded" and result["device"] == "cuda", result.get("error")
        cold = result["cold_start"]
        assert cold["warm_load_ms"] > 0 and cold["warm_first_inference_ms"] > 0, cold
        assert cold["warm_shared_mb"] >= weights_mb * 0.999, (cold, weights_mb)
        assert result["memory"]["peak_device_mb"] >= weights_mb
    assert first["cold_start"]["warm_source"] == "published"
    assert second["cold_start"]["warm_source"] == "store"
    warm = second["cold_start"]
    record_property(
        "figure",
        f"cold load {warm['load_ms']:.1f} ms, warm load {warm['warm_load_ms']:.1f} ms, "
        f"{warm['warm_shared_mb']:.1f} MB shared",
    )
