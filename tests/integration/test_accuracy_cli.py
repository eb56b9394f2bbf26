"""Accuracy and output parity end to end: `mlscope run --dataset --check-parity` and `mlscope parity`,
run for real (child processes, PyTorch and ONNX Runtime, a real SQLite store), on the built-in digits
dataset and a small seeded convolutional net (tests/fixtures/models.py:digits_conv); each bad input
refused with one line and exit code 2, nothing stored.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.integration.test_run_cli import FAST, json_lines, mlscope, stored

pytestmark = pytest.mark.slow

MODEL = "test_digits_conv"


def test_run_measures_accuracy_on_the_dataset_and_checks_parity(mlscope_env: dict[str, str]) -> None:
    # Given a seeded net with manifests for PyTorch and ONNX Runtime, and the digits dataset
    # When ONNX Runtime is evaluated on 100 digits with a parity check against PyTorch
    done = mlscope(
        mlscope_env, "run", MODEL, "-f", "onnxruntime", "--dataset", "digits", "--limit", "100",
        "--check-parity", "--json", "--trace-level", "APPLICATION", *FAST,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (result,) = json_lines(done.stdout)
    # Then the accuracy counts the 100 samples, with an interval around each figure
    accuracy = result["accuracy"]
    assert accuracy["dataset"] == "digits" and accuracy["count"] == 100 and accuracy["limit"] == 100
    for k in ("top1", "top5"):
        low, high = accuracy["ci"][k]
        assert 0 <= low <= accuracy[k] <= high <= 1
    assert accuracy["top5"] >= accuracy["top1"]
    # And the export gives PyTorch's answers
    parity = result["parity"]
    assert parity["against"] == "pytorch" and parity["verdict"] == "same", parity
    assert parity["top1_agreement"] == 1.0 and parity["cosine"] > 0.9999
    # And the outputs themselves are not kept in the result
    assert "outputs" not in result
    # And the pipeline's stages are spans beside inference
    traced = mlscope(mlscope_env, "trace", result["id"], "--format", "json")
    assert traced.returncode == 0, traced.stderr
    document = json.loads(traced.stdout)
    spans = document["spans"] if isinstance(document, dict) else document
    names = {span["name"] for span in spans}
    assert {"accuracy", "preprocess", "predict", "postprocess"} <= names


def test_both_frameworks_reach_the_same_accuracy_on_the_same_inputs(mlscope_env: dict[str, str]) -> None:
    done = mlscope(
        mlscope_env, "run", MODEL, "-f", "pytorch,onnxruntime", "--dataset", "digits", "--json", *FAST
    )
    assert done.returncode == 0, done.stderr
    first, second = (r["accuracy"] for r in json_lines(done.stdout))
    assert first["count"] == second["count"] == 360
    assert first["top1"] == second["top1"] and first["top5"] == second["top5"]


def test_parity_passes_an_honest_export_and_catches_a_perturbed_one(mlscope_env: dict[str, str]) -> None:
    import onnx
    from onnx import numpy_helper

    # Given an honest export: the verdict is "same" and the exit code 0
    honest = mlscope(mlscope_env, "parity", MODEL, "-f", "pytorch,onnxruntime", "--samples", "32", "--json")
    assert honest.returncode == 0, honest.stderr
    (report,) = json_lines(honest.stdout)
    assert report["verdict"] == "same" and report["reference"]["framework"] == "pytorch"
    assert report["frameworks"][0]["count"] == 32
    # When one weight of the exported graph is changed, as a faulty conversion would
    (graph_path,) = (Path(mlscope_env["MLSCOPE_CACHE_DIR"]) / "onnx").glob("*.onnx")
    graph = onnx.load(str(graph_path))
    weight = next(t for t in graph.graph.initializer if numpy_helper.to_array(t).ndim == 2)
    array = numpy_helper.to_array(weight).copy()
    array[3, :] += 0.05
    weight.CopyFrom(numpy_helper.from_array(array, weight.name))
    onnx.save(graph, str(graph_path))
    # Then parity says "different", on the dataset too, and exits 1
    perturbed = mlscope(
        mlscope_env,
        "parity",
        MODEL,
        "-f",
        "pytorch,onnxruntime",
        "--dataset",
        "digits",
        "--limit",
        "40",
        "--json",
    )
    assert perturbed.returncode == 1, perturbed.stderr
    (report,) = json_lines(perturbed.stdout)
    row = report["frameworks"][0]
    assert report["verdict"] == "different" and row["verdict"] == "different"
    assert row["max_abs"] > 1e-3 and report["dataset"]["name"] == "digits"
    # And the human output names the verdict
    shown = mlscope(mlscope_env, "parity", MODEL, "-f", "pytorch,onnxruntime", "--samples", "8")
    assert shown.returncode == 1 and "verdict: different" in shown.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["run", MODEL, "-f", "pytorch", "--dataset", "no_such_set"], "no_such_set"),
        (["run", MODEL, "-f", "pytorch", "--limit", "5"], "limit: needs a dataset"),
        (["run", "test_tiny_mlp", "-f", "pytorch", "--dataset", "digits"], "lists no preprocessing"),
        (["run", MODEL, "-f", "pytorch", "--check-parity", "--parity-against", "pytorch"], "parity_against"),
        (["run", MODEL, "-f", "pytorch", "--tolerance", "0.1"], "tolerance: applies only with check_parity"),
        (["parity", MODEL, "-f", "pytorch"], "two or more frameworks"),
    ],
)
def test_bad_accuracy_and_parity_requests_are_one_line_and_store_nothing(
    mlscope_env: dict[str, str], arguments: list[str], message: str
) -> None:
    done = mlscope(mlscope_env, *arguments, *([] if arguments[0] == "parity" else FAST))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert stored(mlscope_env) == []


def test_a_dataset_whose_labels_exceed_the_models_classes_fails_naming_both(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    from PIL import Image

    # Given a folder of 12 classes of 8x8 images, for a model that scores 10
    folder = tmp_path / "twelve"
    for label in range(12):
        (folder / f"c{label:02d}").mkdir(parents=True)
        Image.fromarray(np.full((8, 8), label * 20, np.uint8)).save(folder / f"c{label:02d}" / "a.png")
    done = mlscope(mlscope_env, "run", MODEL, "-f", "pytorch", "--dataset", str(folder), "--json", *FAST)
    # Then the evaluation does not succeed, and says why
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "12 classes" in text and "scores only 10" in text
    assert all(r["status"] != "succeeded" for r in stored(mlscope_env))


def test_the_trained_digits_model_is_accurate_and_its_export_answers_the_same(
    mlscope_env: dict[str, str],
) -> None:
    # Given mlscope's own trained model, on both frameworks, out of the box
    done = mlscope(
        mlscope_env, "run", "mlscope:digits_cnn", "-f", "pytorch,onnxruntime", "--dataset", "digits",
        "--check-parity", "--json", *FAST,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json_lines(done.stdout)
    # Then each reaches its stated accuracy on all 360 held-out digits, and each agrees with the other
    for result in results:
        assert result["accuracy"]["count"] == 360 and result["accuracy"]["top1"] >= 0.95, result["accuracy"]
        assert result["parity"]["verdict"] == "same" and result["parity"]["top1_agreement"] == 1.0
    assert {r["parity"]["against"] for r in results} == {"pytorch", "onnxruntime"}
    assert results[0]["accuracy"]["top1"] == results[1]["accuracy"]["top1"]


def test_a_manifest_with_a_wrong_std_visibly_drops_accuracy(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    import yaml

    # Given the trained model's manifest, and a copy whose normalize std is ten times too large
    shown = mlscope(mlscope_env, "models", "show", "mlscope:digits_cnn", "-f", "pytorch", "--json")
    assert shown.returncode == 0, shown.stderr
    manifest = json.loads(shown.stdout)
    manifest["name"] = "digits_cnn_wrong_std"
    normalize = next(s for s in manifest["inputs"][0]["steps"] if "normalize" in s)["normalize"]
    normalize["std"] = [normalize["std"][0] * 10]
    folder = tmp_path / "wrong"
    folder.mkdir()
    (folder / "digits_cnn_wrong_std.yaml").write_text(yaml.safe_dump(manifest))
    env = {**mlscope_env, "MLSCOPE_MANIFESTS": f"{mlscope_env['MLSCOPE_MANIFESTS']}:{folder}"}
    # When both are evaluated on the digits
    right = mlscope(env, "run", "mlscope:digits_cnn", "-f", "pytorch", "--dataset", "digits", "--json", *FAST)
    wrong = mlscope(
        env, "run", "digits_cnn_wrong_std", "-f", "pytorch", "--dataset", "digits", "--json", *FAST
    )
    assert right.returncode == 0 and wrong.returncode == 0, (right.stderr, wrong.stderr)
    # Then the wrong preprocessing costs at least twenty points of top-1
    (good,), (bad,) = json_lines(right.stdout), json_lines(wrong.stdout)
    assert good["accuracy"]["top1"] - bad["accuracy"]["top1"] >= 0.20, (good["accuracy"], bad["accuracy"])
