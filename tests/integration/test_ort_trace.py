"""The ONNX Runtime predictor's FRAMEWORK and LIBRARY passes on a real ResNet-18: one span per node
ORT executed in every traced inference, inside it, on the tracer's clock."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
import pytest

from mlscope.registry.models import ModelRegistry
from mlscope.runtime.frameworks import load_predictor_class
from mlscope.runtime.predictors import Predictor, PredictorOptions
from mlscope.runtime.predictors.inputs import synthetic_batches
from mlscope.runtime.predictors.onnxruntime.export import exported_graph
from mlscope.runtime.trace.profiled import ProfiledPass
from mlscope.runtime.trace.spans import Tracer

pytestmark = pytest.mark.slow

ITERATIONS, WARMUP = 2, 1


@pytest.fixture(scope="module")
def predictor(shared_cache: Path) -> Iterator[Predictor]:
    manifest = ModelRegistry.load().get("resnet18", "onnxruntime")
    loaded = load_predictor_class("onnxruntime")(
        manifest=manifest, options=PredictorOptions(), cache_dir=shared_cache
    )
    loaded.fetch()
    loaded.load()
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def executed_nodes(shared_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Counter[tuple[str, str]]:
    """(node name, op type) of the graph ORT runs at the predictor's default level "all", from the
    optimised model ORT saves: an account of the executed nodes independent of the profiler."""
    manifest = ModelRegistry.load().get("resnet18", "onnxruntime")
    optimised = tmp_path_factory.mktemp("optimised") / "resnet18.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(optimised)
    ort.InferenceSession(
        str(exported_graph(manifest, shared_cache)), options, providers=["CPUExecutionProvider"]
    )
    return Counter((node.name, node.op_type) for node in onnx.load(str(optimised)).graph.node)


def traced_pass(predictor: Predictor, level: str) -> tuple[Tracer, int, int]:
    """Run one pass at batch 1; returns the tracer and the clock read before and after it."""
    (arrays,) = synthetic_batches(predictor.manifest, 1, 1, seed=3)
    batch = predictor.prepare(arrays)
    tracer = Tracer("FULL")
    before = tracer.clock.now()
    supported = predictor.trace_pass(
        ProfiledPass(
            level,
            tracer=tracer,
            parent_id="feedfacecafebeef",
            batch_size=1,
            iterations=ITERATIONS,
            warmup=WARMUP,
        ),
        batch,
    )
    after = tracer.clock.now()
    assert supported is True
    return tracer, before, after


def by_inference(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    inferences = [s for s in spans if s["name"] == "inference"]
    return {i["span_id"]: [s for s in spans if s["parent_id"] == i["span_id"]] for i in inferences}


def test_the_framework_pass_records_every_executed_node_as_a_layer_inside_its_inference(
    predictor: Predictor, executed_nodes: Counter[tuple[str, str]]
) -> None:
    # When the FRAMEWORK pass runs 1 warm-up and 2 traced inferences
    tracer, before, after = traced_pass(predictor, "FRAMEWORK")
    spans = tracer.spans
    inferences = [s for s in spans if s["name"] == "inference"]
    # Then there is one MODEL span per traced inference, under the pass, between the clock readings
    assert [s["attributes"]["iteration"] for s in inferences] == list(range(ITERATIONS))
    assert all(s["level"] == "MODEL" and s["parent_id"] == "feedfacecafebeef" for s in inferences)
    assert before < inferences[0]["start_ns"] < inferences[0]["end_ns"] <= inferences[1]["start_ns"]
    assert inferences[-1]["end_ns"] < after
    # And each inference holds exactly the nodes ORT executed, once each, as layers inside it
    for inference_id, layers in by_inference(spans).items():
        inference = next(s for s in inferences if s["span_id"] == inference_id)
        seen = Counter((s["attributes"]["layer"], s["attributes"]["layer_type"]) for s in layers)
        assert seen == executed_nodes
        assert all(
            inference["start_ns"] <= s["start_ns"] <= s["end_ns"] <= inference["end_ns"] for s in layers
        )
        assert sorted(s["attributes"]["layer_index"] for s in layers) == list(range(len(layers)))
    # And every span of the pass is a layer or an inference; convolutions run as Conv nodes
    assert len(spans) == ITERATIONS * (1 + sum(executed_nodes.values()))
    layers = [s for s in spans if s["name"] != "inference"]
    assert all(s["level"] == "FRAMEWORK" and s["attributes"]["kind"] == "layer" for s in layers)
    assert "Conv" in {s["attributes"]["layer_type"] for s in layers}
    first = min(layers, key=lambda s: s["start_ns"])
    assert first["attributes"]["input_shapes"][0] == [1, 3, 224, 224]


def test_the_library_pass_records_the_same_nodes_as_operators(
    predictor: Predictor, executed_nodes: Counter[tuple[str, str]]
) -> None:
    # When the LIBRARY pass runs on the CPU
    tracer, _, _ = traced_pass(predictor, "LIBRARY")
    # Then each inference holds one operator span per executed node (ORT's CPU profiler has nothing
    # below a node), named by op type, knowing its layer and thread, never a layer_type
    for operators in by_inference(tracer.spans).values():
        seen = Counter((s["attributes"]["layer"], s["name"]) for s in operators)
        assert seen == executed_nodes
        assert all(s["level"] == "LIBRARY" and s["attributes"]["kind"] == "operator" for s in operators)
        assert all(isinstance(s["attributes"]["thread"], int) for s in operators)
    assert not any("layer_type" in s["attributes"] for s in tracer.spans)


def test_other_levels_are_not_traced_by_onnxruntime(predictor: Predictor) -> None:
    (arrays,) = synthetic_batches(predictor.manifest, 1, 1, seed=3)
    tracer = Tracer("FULL")
    supported = predictor.trace_pass(
        ProfiledPass(
            "HARDWARE",
            tracer=tracer,
            parent_id="feedfacecafebeef",
            batch_size=1,
            iterations=1,
            warmup=0,
        ),
        predictor.prepare(arrays),
    )
    assert supported is False and tracer.spans == []
