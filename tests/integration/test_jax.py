"""JAX end to end: `mlscope run -f jax` in a child process on torchvision's ResNet-18 and on the
catalogue's MobileNetV3-Small, their outputs PyTorch's (the same weights, copied into the Flax
definition), the jit compile timed as the cold start's compile; the Flax ViT, MobileNetV3 and BERT and
the tiny Llama decoder giving PyTorch's outputs in process; XLA's profiler events as layer spans; a
model JAX has no definition of refused in one line; and JAX listed among the frameworks."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import yaml
from torchvision.models import mobilenet_v3_large, mobilenet_v3_small
from torchvision.models.vision_transformer import VisionTransformer

from mlscope.registry.models import ModelRegistry
from mlscope.runtime.measure.parity import compare_outputs
from mlscope.runtime.predictors.inputs import synthetic_batches
from mlscope.runtime.predictors.jax.from_torch import from_torch
from mlscope.runtime.predictors.jax.predictor import JaxPredictor
from mlscope.runtime.predictors.jax.profile import profiled_layers
from mlscope.runtime.predictors.pytorch.models import build_module
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


def test_the_catalogues_mobilenet_v3_small_runs_on_jax_with_pytorchs_outputs(
    mlscope_env: dict[str, str],
) -> None:
    # Given the catalogue's torchvision:mobilenet_v3_small, which the catalogue offers JAX
    # When it runs on JAX at batch 1, checked against the same entry on PyTorch
    done = mlscope(
        mlscope_env, "run", "torchvision:mobilenet_v3_small", "-f", "jax", "-b", "1", "--check-parity",
        "--parity-against", "pytorch", "--json", *FAST,
    )  # fmt: skip
    # Then it succeeded as the Flax MobileNetV3 with torchvision's parameters, and its outputs are PyTorch's
    (result,) = printed_results(done.stdout)
    assert result["status"] == "succeeded", done.stderr
    assert result["framework"]["definition"] == "flax.nnx MobileNetV3"
    shipped = ModelRegistry.load().get("mobilenet_v3_small", "jax")
    assert result["framework"]["parameters"] == shipped.attributes["parameters"]
    parity = result["parity"]
    assert parity["against"] == "pytorch" and parity["verdict"] == "same", parity


def _parity(reference: np.ndarray, candidate: np.ndarray, rtol: float | None = None) -> dict:
    return compare_outputs({"out": reference}, {"out": candidate}, against="pytorch", rtol=rtol)


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


@pytest.mark.parametrize("builder", [mobilenet_v3_small, mobilenet_v3_large], ids=["small", "large"])
def test_the_flax_mobilenet_v3_gives_torchvisions_outputs(builder: Any) -> None:
    # Given torchvision's MobileNetV3 (10 classes) with its batch norms' statistics those of the batch
    # and every other weight random: torchvision starts biases at zero, batch norms at the identity and
    # the classifier small, which leaves logits that hardly depend on the image and would hide a wrong
    # operator
    torch.manual_seed(0)
    module = builder(num_classes=10)
    images = np.random.default_rng(0).standard_normal((4, 3, 64, 64)).astype(np.float32)
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, torch.nn.BatchNorm2d):
                layer.momentum = 1.0
        module.train()(torch.from_numpy(images))
        module.eval()
        for name, parameter in module.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(std=0.1)
            elif parameter.ndim == 1:  # batch norm scales
                parameter.uniform_(0.5, 1.5)
            elif parameter.ndim == 2:  # the classifier's linear layers
                parameter.normal_(std=parameter.shape[1] ** -0.5)
    # When its weights are copied into the Flax MobileNetV3 and both run on the same images
    flax_net = from_torch(module)
    with torch.no_grad():
        expected = module(torch.from_numpy(images)).numpy()
    got = np.asarray(jax.jit(lambda x: flax_net(x))(jnp.asarray(images)))
    # Then it is the Flax MobileNetV3 and the logits are the same
    assert type(flax_net).__name__ == "MobileNetV3"
    assert _parity(expected, got)["verdict"] == "same"
    # And they depend on the image: two images' logits differ by far more than the tolerance
    assert np.abs(expected[0] - expected[1]).max() > 0.1 * np.abs(expected).max()


def test_the_flax_bert_gives_transformers_last_hidden_state() -> None:
    # Given JAX's bert_base manifest shrunk (2 layers, width 64), built as the PyTorch predictor builds
    # it, with every weight random (transformers starts biases at zero and LayerNorms at the identity)
    manifest = ModelRegistry.load().get("bert_base", "jax")
    small = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128}
    source = dataclasses.replace(manifest.source, options={**manifest.source.options, "config": small})
    module = build_module(dataclasses.replace(manifest, source=source))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if "LayerNorm.weight" in name:
                parameter.uniform_(0.5, 1.5)
            elif parameter.ndim == 2 and "embeddings" not in name:
                parameter.normal_(std=parameter.shape[1] ** -0.5)
            else:
                parameter.normal_(std=0.2)
    ids = np.random.default_rng(0).integers(0, 30522, size=(2, 16))
    # When its weights are copied into the Flax BERT and both run on the same token ids
    flax_bert = from_torch(module)
    with torch.no_grad():
        expected = module(torch.from_numpy(ids)).numpy()
    got = np.asarray(jax.jit(lambda x: flax_bert(x))(jnp.asarray(ids, dtype=jnp.int32)))
    # Then it is the Flax BERT and the last hidden state is the same, of the shrunk width, even at a
    # tolerance 100 times tighter than parity's default: GELU's tanh approximation instead of the exact
    # erf one stays inside the default
    assert type(flax_bert).__name__ == "Bert" and got.shape == (2, 16, 64)
    assert _parity(expected, got, rtol=1e-5)["verdict"] == "same"


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
