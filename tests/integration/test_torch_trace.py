"""PyTorch's profiled passes on a real ResNet-18 (CPU, batch 1): the FRAMEWORK pass gives one span
per leaf-module call, the LIBRARY pass gives the aten operators from torch.profiler, each inside
the inference it ran in and knowing its layer, on the tracer's clock.

What the passes should see is counted independently: the same manifest built again, run once
under a global module hook (not the passes' per-module hooks), lists every leaf-module call.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from mlscope.registry.models import ModelRegistry
from mlscope.runtime.frameworks import load_predictor_class
from mlscope.runtime.predictors import PredictorOptions
from mlscope.runtime.predictors.base import Predictor
from mlscope.runtime.predictors.inputs import synthetic_batches
from mlscope.runtime.predictors.pytorch.models import build_module
from mlscope.runtime.predictors.pytorch.profile import layer_pass
from mlscope.runtime.trace.profiled import ProfiledPass
from mlscope.runtime.trace.spans import Tracer, new_span_id

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def resnet(shared_cache: Path) -> Iterator[tuple[Predictor, dict[str, np.ndarray]]]:
    """A loaded ResNet-18 PyTorch predictor and one input batch of size 1."""
    manifest = ModelRegistry.load().get("resnet18", "pytorch")
    predictor = load_predictor_class("pytorch")(
        manifest=manifest, options=PredictorOptions(), cache_dir=shared_cache
    )
    predictor.fetch()
    predictor.load()
    (arrays,) = synthetic_batches(manifest, 1, 1, seed=3)
    try:
        yield predictor, arrays
    finally:
        predictor.close()


def leaf_calls(predictor: Predictor, arrays: dict[str, np.ndarray]) -> list[tuple[str, str]]:
    """(module path, class name) of every leaf-module call of one inference, in order, seen by a
    global forward hook on a second copy of the model."""
    model = build_module(predictor.manifest)
    paths = {id(module): path for path, module in model.named_modules()}
    calls: list[tuple[str, str]] = []

    def record(module: torch.nn.Module, args: Any, output: Any) -> None:
        if id(module) in paths and not list(module.children()):
            calls.append((paths[id(module)], type(module).__name__))

    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        with torch.inference_mode():
            model(*(torch.from_numpy(arrays[spec.name]) for spec in predictor.manifest.inputs))
    finally:
        handle.remove()
    return calls


def run_pass(
    predictor: Predictor, arrays: dict[str, np.ndarray], level: str, tracer_level: str, iterations: int
) -> tuple[Tracer, str, int, int]:
    """One pass; returns the tracer, the pass span's id, and the tracer's clock before and after."""
    tracer = Tracer(tracer_level)
    pass_id = new_span_id()
    before = tracer.clock.now()
    supported = predictor.trace_pass(
        ProfiledPass(level, tracer=tracer, parent_id=pass_id, batch_size=1, iterations=iterations, warmup=1),
        predictor.prepare(arrays),
    )
    assert supported
    return tracer, pass_id, before, tracer.clock.now()


def inferences_of(tracer: Tracer, pass_id: str, pass_name: str) -> list[dict[str, Any]]:
    spans = [span for span in tracer.spans if span["name"] == "inference"]
    for span in spans:
        assert span["level"] == "MODEL" and span["parent_id"] == pass_id
        assert span["attributes"]["pass"] == pass_name and span["attributes"]["batch_size"] == 1
    return sorted(spans, key=lambda span: span["attributes"]["iteration"])


def test_the_framework_pass_has_a_span_per_leaf_module_call(
    resnet: tuple[Predictor, dict[str, np.ndarray]],
) -> None:
    # Given ResNet-18 and the leaf-module calls of one inference, counted independently
    predictor, arrays = resnet
    expected = leaf_calls(predictor, arrays)
    # When the FRAMEWORK pass traces two inferences
    tracer, pass_id, before, after = run_pass(predictor, arrays, "FRAMEWORK", "FRAMEWORK", iterations=2)
    inferences = inferences_of(tracer, pass_id, "FRAMEWORK")
    # Then each inference, within the pass's time, holds one layer span per leaf call, in order
    assert [span["attributes"]["iteration"] for span in inferences] == [0, 1]
    layers = [span for span in tracer.spans if span["level"] == "FRAMEWORK"]
    assert len(layers) == 2 * len(expected)
    for inference in inferences:
        assert before <= inference["start_ns"] <= inference["end_ns"] <= after
        inside = sorted(
            (span for span in layers if span["parent_id"] == inference["span_id"]),
            key=lambda span: span["attributes"]["layer_index"],
        )
        assert [(s["attributes"]["layer"], s["attributes"]["layer_type"]) for s in inside] == expected
        assert [s["attributes"]["layer_index"] for s in inside] == list(range(len(expected)))
        for span in inside:
            assert span["name"] == span["attributes"]["layer"] and span["attributes"]["kind"] == "layer"
            assert inference["start_ns"] <= span["start_ns"] <= span["end_ns"] <= inference["end_ns"]
        assert inside[0]["attributes"]["input_shapes"] == [
            list(arrays[predictor.manifest.inputs[0].name].shape)
        ]
        assert inside[-1]["attributes"]["layer_type"] == "Linear"
        assert inside[-1]["attributes"]["output_shapes"] == [[1, 1000]]
    assert {"Conv2d", "BatchNorm2d", "ReLU", "Linear"} <= {s["attributes"]["layer_type"] for s in layers}
    # And the hooks are gone: another inference records nothing more
    count = len(tracer.spans)
    predictor.predict(predictor.prepare(arrays))
    assert len(tracer.spans) == count


def test_the_library_pass_has_the_aten_operators_inside_their_inference(
    resnet: tuple[Predictor, dict[str, np.ndarray]],
) -> None:
    # Given ResNet-18, its module paths and its convolution calls, counted independently
    predictor, arrays = resnet
    calls = leaf_calls(predictor, arrays)
    module_types = dict(calls)
    # When the LIBRARY pass profiles two inferences
    tracer, pass_id, before, after = run_pass(predictor, arrays, "LIBRARY", "LIBRARY", iterations=2)
    inferences = {span["span_id"]: span for span in inferences_of(tracer, pass_id, "LIBRARY")}
    by_id = {span["span_id"]: span for span in tracer.spans}
    # Then the inferences, moved onto the tracer's clock, lie within the pass
    assert len(inferences) == 2
    for inference in inferences.values():
        assert before <= inference["start_ns"] <= inference["end_ns"] <= after
    operators = [span for span in tracer.spans if span["attributes"].get("kind") == "operator"]
    assert all(span["level"] == "LIBRARY" and "layer_type" not in span["attributes"] for span in operators)
    # And every aten::conv2d chains up to an inference of this pass and ran within it
    conv2d = [span for span in operators if span["name"] == "aten::conv2d"]
    convolution_calls = sum(1 for _, kind in calls if kind == "Conv2d")
    assert len(conv2d) == 2 * convolution_calls
    for span in conv2d:
        ancestor = by_id[span["parent_id"]]
        while ancestor["span_id"] not in inferences:
            ancestor = by_id[ancestor["parent_id"]]
        assert ancestor["start_ns"] <= span["start_ns"] <= span["end_ns"] <= ancestor["end_ns"]
        assert module_types[span["attributes"]["layer"]] == "Conv2d"
        assert span["attributes"]["input_shapes"][0][0] == 1
    # And every layer an operator names is a real leaf module of the model
    named = {span["attributes"]["layer"] for span in operators if span["attributes"]["layer"] is not None}
    assert named and named <= set(module_types)
    assert {path for path, kind in calls if kind == "BatchNorm2d"} <= named


def test_at_full_level_operators_carry_their_python_stack(
    resnet: tuple[Predictor, dict[str, np.ndarray]],
) -> None:
    # Given a tracer at FULL, the LIBRARY pass profiles with Python stacks
    predictor, arrays = resnet
    tracer, _, _, _ = run_pass(predictor, arrays, "LIBRARY", "FULL", iterations=1)
    # Then a convolution's stack runs through the convolution module's forward
    conv2d = next(span for span in tracer.spans if span["name"] == "aten::conv2d")
    stack = conv2d["attributes"]["python_stack"]
    assert any("conv.py" in frame and "forward" in frame for frame in stack)


class Broken(torch.nn.Module):
    def forward(self, value: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("broken layer")


def test_a_failing_inference_is_recorded_and_leaves_no_hooks_behind() -> None:
    # Given a model whose second leaf module raises
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), Broken())
    tracer = Tracer("FRAMEWORK")
    pass_id = new_span_id()
    # When the FRAMEWORK pass runs it
    with pytest.raises(RuntimeError, match="broken layer"):
        layer_pass(
            model,
            lambda: model(torch.zeros(1, 4)),
            ProfiledPass("FRAMEWORK", tracer=tracer, parent_id=pass_id, batch_size=1, iterations=1, warmup=0),
            device=torch.device("cpu"),
        )
    # Then the inference span names the error, the layer that finished is in it, and no hook is left
    (inference,) = [span for span in tracer.spans if span["name"] == "inference"]
    assert inference["attributes"]["error"] == "RuntimeError: broken layer"
    assert [span["name"] for span in tracer.spans if span["parent_id"] == inference["span_id"]] == ["0"]
    assert all(not module._forward_hooks and not module._forward_pre_hooks for module in model.modules())
