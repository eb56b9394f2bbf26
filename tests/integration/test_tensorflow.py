"""TensorFlow end to end: `mlscope run` of a Keras MobileNetV2 in a child process (the process
runner), traced at FRAMEWORK level, and the predictor's numerics and LIBRARY pass in a probe process.

TensorFlow is never imported into the pytest process: loaded before torchvision it segfaults a later
`import torchvision` (inside triton), and other tests of the session import torchvision.
Without TensorFlow in this venv the tests skip; in CI (CI=true) they fail, since `make` installs it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

from mlscope.store import open_store
from tests.integration.conftest import _unavailable
from tests.integration.test_run_cli import FAST, json_lines, mlscope

pytestmark = pytest.mark.slow

KERAS_LAYER_TYPES = {"Conv2D", "DepthwiseConv2D", "BatchNormalization", "ReLU", "Add", "Dense"}


@pytest.fixture(autouse=True)
def tensorflow_installed() -> None:
    if importlib.util.find_spec("tensorflow") is None:
        _unavailable("TensorFlow is not installed in this venv (pip install 'mlscope[tensorflow]')")


def test_a_traced_run_on_tensorflow_stores_keras_layers_inside_their_inferences(
    mlscope_env: dict[str, str],
) -> None:
    # When MobileNetV2 runs on TensorFlow in a child process, traced at FRAMEWORK level
    done = mlscope(
        mlscope_env,
        "run",
        "mobilenet_v2",
        "-f",
        "tensorflow",
        "--trace-level",
        "FRAMEWORK",
        "--measure",
        "trace_iterations=2",
        "--measure",
        "trace_warmup=1",
        "--json",
        *FAST,
    )
    assert done.returncode == 0, done.stderr
    (result,) = json_lines(done.stdout)
    # Then it succeeded on the installed TensorFlow, NHWC input, with the build facts recorded
    assert result["status"] == "succeeded" and result["error"] is None
    assert result["runner"] == "process" and result["device"] == "cpu"
    assert result["framework"]["name"] == "tensorflow"
    assert result["framework"]["version"] == importlib.metadata.version("tensorflow-cpu")
    assert result["framework"]["libraries"]["cuda_build"] is False
    assert result["framework"]["parameters"] == result["manifest"]["attributes"]["parameters"]
    (spec,) = result["manifest"]["inputs"]
    assert spec["layout"] == "NHWC" and spec["shape"] == [224, 224, 3]
    assert result["cold_start"]["import_ms"] > 0 and result["measurements"][0]["latency_ms"]["count"] >= 5
    # And the FRAMEWORK pass holds, per traced inference, one span per Keras layer that ran ops
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as store:
        spans = store.get_spans(result["id"], limit=200_000)
    inferences = {
        s["span_id"]: s for s in spans if s["name"] == "inference" and s["attributes"]["pass"] == "FRAMEWORK"
    }
    layers = [s for s in spans if s["level"] == "FRAMEWORK"]
    assert len(inferences) == 2
    per_inference = Counter(s["parent_id"] for s in layers)
    assert set(per_inference) == set(inferences) and len(set(per_inference.values())) == 1
    for span in layers:
        inference = inferences[span["parent_id"]]
        assert inference["start_ns"] <= span["start_ns"] <= span["end_ns"] <= inference["end_ns"]
        assert span["attributes"]["kind"] == "layer" and span["name"] == span["attributes"]["layer"]
    types = Counter(s["attributes"]["layer_type"] for s in layers)
    assert set(types) <= KERAS_LAYER_TYPES | {"ZeroPadding2D", "GlobalAveragePooling2D"}
    assert types["Conv2D"] > types["Dense"] > 0
    # And a layer's shapes are Keras's, with the batch axis filled in
    first = min(layers, key=lambda s: (s["start_ns"], s["attributes"]["layer_index"]))
    assert first["attributes"]["layer_type"] == "Conv2D"
    assert first["attributes"]["input_shapes"] == [[1, 224, 224, 3]]


PROBE = """
import json, sys
import numpy as np
from mlscope.registry.models import ModelRegistry
from mlscope.contract.steps import apply_steps
from mlscope.runtime.frameworks import load_predictor_class
from mlscope.runtime.predictors import PredictorOptions
from mlscope.runtime.predictors.inputs import synthetic_batches
from mlscope.runtime.trace.profiled import ProfiledPass
from mlscope.runtime.trace.spans import Tracer

manifest = ModelRegistry.load().get("mobilenet_v2", "tensorflow")
predictor = load_predictor_class("tensorflow")(manifest=manifest, options=PredictorOptions(seed=1))
predictor.load()
(arrays,) = synthetic_batches(manifest, 2, 1, seed=5)
batch = predictor.prepare(arrays)
(logits,) = predictor.outputs_to_numpy(predictor.predict(batch)).values()
probabilities = apply_steps(manifest.outputs[0].steps[:1], logits)
tracer = Tracer("FULL")
hardware = predictor.trace_pass(
    ProfiledPass("HARDWARE", tracer, "feedfacecafebeef", batch_size=2, iterations=1, warmup=0), batch
)
unsupported_spans = len(tracer.spans)
supported = predictor.trace_pass(
    ProfiledPass("LIBRARY", tracer, "feedfacecafebeef", batch_size=2, iterations=2, warmup=1), batch
)
json.dump({
    "shape": list(logits.shape),
    "finite": bool(np.isfinite(logits).all()),
    "spread": float(logits.std()),
    "sums": np.asarray(probabilities).sum(axis=-1).tolist(),
    "supported": supported,
    "hardware": hardware,
    "unsupported_spans": unsupported_spans,
    "spans": tracer.spans,
}, sys.stdout)
"""


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    """One inference of MobileNetV2 at batch 2 and a LIBRARY pass, in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_outputs_are_finite_logits_whose_softmax_sums_to_one(probe: dict[str, Any]) -> None:
    assert probe["shape"] == [2, 1000]
    assert probe["finite"] and probe["spread"] > 0  # random weights, but not a constant output
    assert probe["sums"] == pytest.approx([1.0, 1.0], abs=1e-4)


def test_the_library_pass_records_tf_ops_with_their_layers_inside_each_inference(
    probe: dict[str, Any],
) -> None:
    spans = probe["spans"]
    assert probe["supported"] is True
    assert probe["hardware"] is False and probe["unsupported_spans"] == 0
    inferences = {s["span_id"]: s for s in spans if s["name"] == "inference"}
    assert sorted(s["attributes"]["iteration"] for s in inferences.values()) == [0, 1]
    operators = [s for s in spans if s["level"] == "LIBRARY"]
    assert operators and all(s["attributes"]["kind"] == "operator" for s in operators)
    assert not any("layer_type" in s["attributes"] for s in spans)
    for span in operators:
        inference = inferences.get(span["parent_id"])
        assert inference is not None
        assert inference["start_ns"] <= span["start_ns"] <= span["end_ns"] <= inference["end_ns"]
    # Convolutions ran as oneDNN ops, each knowing the Keras layer it belongs to
    convolutions = [s for s in operators if "Conv2D" in s["name"]]
    assert convolutions and all(s["attributes"]["layer"] for s in convolutions)
    assert {s["attributes"]["layer"] for s in convolutions} >= {"Conv1", "Conv_1"}
