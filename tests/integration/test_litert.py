"""LiteRT end to end: `mlscope run -f litert` in a child process (the process runner) on a Keras model
converted to .tflite, its float outputs TensorFlow's on the same inputs and its int8 outputs shown
as different from them (the result invalid), mlscope's digits CNN scored on the held-out digits float
and int8 side by side, a FRAMEWORK-level trace saying why it has no layers, `quantize` refused on a
framework without it, and a model LiteRT's converter cannot convert refused in one line before
anything is stored."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from mlscope.contract.result import result_validity
from mlscope.runtime.models.digits_cnn import trained_digits_cnn
from tests.integration.test_run_cli import FAST, mlscope, printed_results, ran_valid, stored

pytestmark = pytest.mark.slow

MODEL = "test_tiny_keras"

# Keras's ResNet50 at 32x32 with 10 classes and random weights: the smallest keras.applications
# model (both frameworks build it from the same seed) whose random-weight logits are not vanishingly
# small (MobileNetV2's are about 1e-12, which any two runtimes "agree" on within atol), so that
# parity compares real numbers.
TINY_KERAS = """\
name: test_tiny_keras
version: "1.0"
task: image_classification
description: test model, Keras's ResNet50 at 32x32 with 10 classes (random weights)
framework:
  name: {framework}
source:
  {source}
weights: random
inputs:
  - name: input
    shape: [32, 32, 3]
    dtype: float32
    layout: NHWC
outputs:
  - name: logits
attributes:
  classes: 10
"""


def manifests(
    directory: Path, env: dict[str, str], litert_source: str = "keras_applications: ResNet50"
) -> None:
    """Put the test model's TensorFlow and LiteRT manifests in `directory` and point `env` at it."""
    directory.mkdir(exist_ok=True)
    for framework, source in (("tensorflow", "keras_applications: ResNet50"), ("litert", litert_source)):
        text = TINY_KERAS.format(framework=framework, source=source)
        (directory / f"tiny_keras-{framework}.yaml").write_text(text, encoding="utf-8")
    env["MLSCOPE_MANIFESTS"] = str(directory)


def test_a_keras_model_runs_on_litert_with_the_outputs_tensorflow_gives_and_says_why_it_traces_no_layers(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given the test Keras model on LiteRT and TensorFlow
    manifests(tmp_path / "manifests", mlscope_env)
    # When it runs on LiteRT (float), checked against TensorFlow on the same inputs, traced at FRAMEWORK
    done = mlscope(
        mlscope_env, "run", MODEL, "-f", "litert", "-b", "1,2", "--check-parity", "--parity-against",
        "tensorflow", "--trace-level", "FRAMEWORK", "--json", *FAST,
    )  # fmt: skip
    (result,) = ran_valid(done)
    # Then it ran on the installed LiteRT, from a float .tflite made by TensorFlow's converter
    facts = result["framework"]
    assert facts["name"] == "litert" and facts["version"] == importlib.metadata.version("ai-edge-litert")
    assert facts["quantize"] == "none" and facts["graph"].endswith("-none.tflite")
    assert (
        facts["conversion"]["converter"].startswith("tensorflow ")
        and "calibration" not in facts["conversion"]
    )
    assert [m["batch_size"] for m in result["measurements"]] == [1, 2]
    # And its outputs are TensorFlow's within float32's tolerance
    parity = result["parity"]
    assert parity["against"] == "tensorflow" and parity["verdict"] == "same", parity
    assert parity["count"] > 0 and parity["cosine"] > 0.9999
    # And its layers are none, and `mlscope trace --layers` says why in one line: LiteRT's interpreter
    # has no profiler (docs/litert.md), not an empty answer left unexplained
    layers = mlscope(mlscope_env, "trace", result["id"], "--layers")
    assert layers.returncode == 0, layers.stderr[-2000:]
    headline, *notes = layers.stdout.strip().splitlines()
    assert headline.endswith("has no FRAMEWORK or LIBRARY spans (trace level FRAMEWORK)"), headline
    assert notes == [
        "note litert has no FRAMEWORK profiler in mlscope: ai-edge-litert's Python interpreter takes no "
        "profiler and gives no per-op times (docs/litert.md)"
    ]


def test_int8_outputs_are_shown_as_different_from_tensorflows_and_the_result_invalid(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given the test Keras model, quantised to int8 on LiteRT (calibrated on seeded synthetic inputs:
    # its dataset is none mlscope ships)
    manifests(tmp_path / "manifests", mlscope_env)
    # When its outputs are checked against TensorFlow's float ones
    done = mlscope(
        mlscope_env, "run", MODEL, "-f", "litert", "--option", "quantize=int8", "--check-parity",
        "--parity-against", "tensorflow", "--json", *FAST,
    )  # fmt: skip
    (result,) = printed_results(done.stdout)
    # Then the flatbuffer says how it was calibrated
    conversion = result["framework"]["conversion"]
    assert conversion["quantize"] == "int8" and "synthetic" in conversion["calibration"]
    # And the verdict is "different", which makes the result invalid and the run exit 3 (an invalid
    # result), never shown as matching
    assert result["parity"]["verdict"] == "different", result["parity"]
    assert result["parity"]["max_abs"] > 0
    assert done.returncode == 3, done.stderr[-2000:]
    validity = result_validity(result)
    assert validity["valid"] is False and any("parity" in reason for reason in validity["reasons"]), validity


def test_the_digits_cnn_is_scored_float_and_int8_side_by_side(mlscope_env: dict[str, str]) -> None:
    # When mlscope's digits CNN (its Keras twin, converted) runs float and int8 with the digits dataset
    done = mlscope(
        mlscope_env, "run", "digits_cnn", "-f", "litert", "-b", "1", "--option", "quantize=none,int8",
        "--dataset", "digits", "--json", *FAST,
    )  # fmt: skip
    results = {r["framework"]["quantize"]: r for r in ran_valid(done)}
    assert set(results) == {"none", "int8"}
    fp32, int8 = (results[name]["accuracy"] for name in ("none", "int8"))
    assert fp32["count"] == int8["count"] == 360
    # Then the float model scores what the PyTorch model it was copied from scores on the held-out
    # split (within one image of 360: two runtimes' last-bit differences may flip a tie)
    record = trained_digits_cnn(Path(mlscope_env["MLSCOPE_CACHE_DIR"])).record
    assert abs(100 * fp32["top1"] - record["held_out_top1"]) <= 100 / 360 + 1e-9
    # And int8 (calibrated on the train split, never the held-out one) is within 2 points of float
    # (7 of 360 images): per-channel int8 weights and activations cost a 10k-parameter CNN on 8x8
    # digits at most a few borderline images; both far above chance (10%)
    assert "digits train split" in results["int8"]["framework"]["conversion"]["calibration"]
    assert abs(fp32["top1"] - int8["top1"]) <= 0.02, (fp32["top1"], int8["top1"])
    assert min(fp32["top1"], int8["top1"]) > 0.9
    # And the two are two workloads: the int8 one is labelled as such
    assert results["int8"]["request"]["options"]["quantize"] == "int8"


def test_quantize_is_refused_on_a_framework_without_it(mlscope_env: dict[str, str], tmp_path: Path) -> None:
    # Given the test Keras model on TensorFlow, which has no quantize option
    manifests(tmp_path / "manifests", mlscope_env)
    # When int8 is asked of TensorFlow
    done = mlscope(mlscope_env, "run", MODEL, "-f", "tensorflow", "--option", "quantize=int8", *FAST)
    # Then it is refused in one line naming the option and who has it, exit 2, nothing stored
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "options.quantize: TensorFlow has no quantize option" in line and "LiteRT" in line, line
    assert stored(mlscope_env) == []


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("keras_applications: NoSuchNet", ("source.keras_applications", "'NoSuchNet'", "ResNet50")),
        ("python: tests.fixtures.models:digits_conv", ("source.python", "not a Keras model", "-f pytorch")),
    ],
)
def test_a_model_the_converter_cannot_convert_is_refused_in_one_line(
    mlscope_env: dict[str, str], tmp_path: Path, source: str, said: tuple[str, ...]
) -> None:
    # Given a LiteRT manifest naming no Keras architecture, or a factory returning a PyTorch module
    manifests(tmp_path / "manifests", mlscope_env, litert_source=source)
    # When it is run on LiteRT
    done = mlscope(mlscope_env, "run", MODEL, "-f", "litert", *FAST)
    # Then the conversion's refusal is one line naming the field and what is possible, exit 2, and
    # nothing is stored
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert all(part in line for part in said), line
    assert stored(mlscope_env) == []
