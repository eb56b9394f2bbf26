"""JAX end to end: `mlscope run -f jax` in a child process on torchvision's ResNet-18, its outputs
PyTorch's (the same weights, copied into the Flax definition), its jit compile timed as the cold
start's compile; the Flax ViT and the tiny Llama decoder giving PyTorch's outputs in process; XLA's
profiler events as layer spans; a model JAX has no definition of refused in one line; and JAX
listed among the frameworks."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import yaml
from torchvision.models.vision_transformer import VisionTransformer

from mlscope.registry.models import ModelRegistry
from mlscope.runtime.measure.parity import compare_outputs
from mlscope.runtime.predictors.inputs import synthetic_batches
from mlscope.runtime.predictors.jax.models import from_torch
from mlscope.runtime.predictors.jax.predictor import JaxPredictor
from mlscope.runtime.predictors.jax.profile import profiled_layers
from mlscope.runtime.predictors.pytorch.predictor import PyTorchPredictor
from mlscope.runtime.trace.profiled import ProfiledPass
from mlscope.runtime.trace.spans import Tracer
from mlscope.store import open_store
from tests.integration.test_run_cli import FAST, mlscope, printed_results, stored

pytestmark = pytest.mark.slow


def test_resnet18_runs_on_jax_with_pytorchs_outputs_its_jit_compile_timed_and_xlas_layers_traced(
    mlscope_env: dict[str, str],
) -> None:
    # Given torchvision's ResNet-18, whose JAX manifest builds it in PyTorch and copies its weights
    # When it runs on JAX at batch 1, checked against PyTorch on the same inputs, traced at FRAMEWORK level
    done = mlscope(
        mlscope_env, "run", "resnet18", "-f", "jax", "-b", "1", "--check-parity", "--parity-against",
        "pytorch", "--trace-level", "FRAMEWORK", "--measure", "trace_iterations=2", "--measure",
        "trace_warmup=1", "--json", *FAST,
    )  # fmt: skip
    # Then it succeeded on the installed JAX, as the Flax ResNet with ResNet-18's parameters
    (result,) = printed_results(done.stdout)
    assert result["status"] == "succeeded", done.stderr
    facts = result["framework"]
    assert facts["name"] == "jax" and facts["version"] == jax.__version__
    assert facts["definition"] == "flax.nnx ResNet"
    assert facts["parameters"] == result["manifest"]["attributes"]["parameters"]
    # And XLA's compile for batch 1 is the cold start's compile, not a cached one, and nothing
    # compiled while the point was measured
    assert result["cold_start"]["compile_ms"] > 0 and result["cold_start"]["compile_cached"] is False
    assert result["measurements"][0]["recompiles"] == 0
    # And its outputs are PyTorch's
    parity = result["parity"]
    assert parity["against"] == "pytorch" and parity["verdict"] == "same", parity
    # And each of the 2 traced inferences holds XLA's instructions of the jitted forward, inside it
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as store:
        spans = store.get_spans(result["id"], limit=100_000)
    inferences = {
        s["span_id"]: s for s in spans if s["name"] == "inference" and s["attributes"]["pass"] == "FRAMEWORK"
    }
    layers = [s for s in spans if s["level"] == "FRAMEWORK"]
    assert len(inferences) == 2 and {s["parent_id"] for s in layers} == set(inferences)
    for span in layers:
        assert span["attributes"]["hlo_module"] == "jit_forward" and span["attributes"]["kind"] == "layer"
        inference = inferences[span["parent_id"]]
        assert inference["start_ns"] <= span["start_ns"] <= span["end_ns"] <= inference["end_ns"]


def _parity(reference: np.ndarray, candidate: np.ndarray) -> dict:
    return compare_outputs({"out": reference}, {"out": candidate}, against="pytorch")


def test_the_flax_vit_gives_torchvisions_outputs() -> None:
    # Given a small torchvision ViT (2 blocks, width 32) with random weights everywhere (torchvision
    # starts its head and class token at zero, which would hide a wrong copy)
    torch.manual_seed(0)
    module = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=10
    ).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(std=0.2)
    images = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    # When its weights are copied into the Flax ViT and both run on the same images
    flax_vit = from_torch(module)
    with torch.no_grad():
        expected = module(torch.from_numpy(images)).numpy()
    got = np.asarray(jax.jit(lambda x: flax_vit(x))(jnp.asarray(images)))
    # Then the logits are the same, and not all alike
    assert _parity(expected, got)["verdict"] == "same"
    assert np.ptp(expected) > 0.1


def test_the_tiny_llama_decoder_on_jax_gives_pytorchs_last_hidden_state(tmp_path: Path) -> None:
    # Given JAX's llama_tiny manifest, the catalogue's hf:llama (its configuration, its output)
    models = ModelRegistry.load()
    on_jax, on_pytorch = models.get("llama_tiny", "jax"), models.get("hf:llama", "pytorch")
    assert on_jax.source.options == on_pytorch.source.options
    (batch,) = synthetic_batches(on_jax, 2, 1, seed=0)
    # When each framework's predictor runs it on the same token ids
    outputs = {}
    for predictor in (
        JaxPredictor(on_jax, cache_dir=tmp_path),
        PyTorchPredictor(on_pytorch, cache_dir=tmp_path),
    ):
        predictor.load()
        prepared = predictor.prepare(batch)
        predictor.compile(prepared)
        outputs[predictor.NAME] = predictor.outputs_to_numpy(predictor.predict(prepared))["last_hidden_state"]
        predictor.close()
    # Then JAX's last hidden state is PyTorch's
    assert outputs["jax"].shape == (2, 128, 512)
    assert _parity(outputs["pytorch"], outputs["jax"])["verdict"] == "same"


def test_xlas_events_become_layer_spans_inside_their_inferences() -> None:
    # Given a jitted function of two matrix products, compiled and run once
    step = jax.jit(lambda x: jnp.tanh(x @ x) @ x)
    x = jnp.ones((64, 64))
    step(x).block_until_ready()
    tracer = Tracer("FRAMEWORK")
    with tracer.span("profile") as _:
        profiled = ProfiledPass("FRAMEWORK", tracer, tracer.current_id, batch_size=1, iterations=3, warmup=0)
        # When three calls run under the profiler
        spans = profiled_layers(lambda: step(x).block_until_ready(), profiled)
    inferences = {s["span_id"]: s for s in spans if s["name"] == "inference"}
    layers = [s for s in spans if s["level"] == "FRAMEWORK"]
    # Then each call is an inference holding XLA's instructions of the jitted program, inside it
    assert len(inferences) == 3 and layers
    assert {s["parent_id"] for s in layers} == set(inferences)
    for span in layers:
        inference = inferences[span["parent_id"]]
        assert inference["start_ns"] <= span["start_ns"] <= span["end_ns"] <= inference["end_ns"]
        assert span["attributes"]["hlo_module"].startswith("jit_") and span["attributes"]["kind"] == "layer"
    assert sum(s["end_ns"] - s["start_ns"] for s in layers) > 0


def test_a_model_jax_has_no_definition_of_is_refused_in_one_line(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given a manifest for JAX of a timm model (JAX has Flax definitions of a few architectures only)
    manifest = yaml.safe_load((Path(__file__).parents[2] / "mlscope/manifests/jax/resnet18.yaml").read_text())
    manifest.update(name="timm_resnet18", source={"timm": "resnet18"})
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "timm_resnet18.yaml").write_text(yaml.safe_dump(manifest))
    env = {
        **mlscope_env,
        "MLSCOPE_MANIFESTS": os.pathsep.join([mlscope_env["MLSCOPE_MANIFESTS"], str(folder)]),
    }
    # When it is run on JAX
    done = mlscope(env, "run", "timm_resnet18", "-f", "jax", *FAST)
    # Then it is refused in one line naming what JAX runs, and nothing is stored
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "JAX has no Flax definition of timm resnet18" in line and "torchvision resnet18" in line, line
    assert "transformers llama" in line, line
    assert stored(env) == []


def test_jax_is_listed_among_the_frameworks(mlscope_env: dict[str, str]) -> None:
    # When the frameworks are listed
    done = mlscope(mlscope_env, "frameworks", "--json")
    # Then JAX is there, installed and available, with the PyTorch sources it takes weights from
    assert done.returncode == 0, done.stderr
    (row,) = [row for row in printed_results(done.stdout) if row["name"] == "jax"]
    assert (row["installed"], row["available"], row["display"]) == (jax.__version__, True, "JAX"), row
    assert row["sources"] == ["torchvision", "transformers"], row
