"""`mlscope:digits_cnn` on the real frameworks: the factory trains once per cache and reaches its
accuracy on the held-out digits when the images go through the manifest's own steps (PNG bytes,
decoded and normalised as an evaluation does), ONNX Runtime on the exported graph gives what PyTorch
gives, a wrong mean/std in the manifest visibly costs accuracy, and the CLI and the HTTP API show
the entry."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
import torch
from flask.testing import FlaskClient
from PIL import Image

from mlscope.contract.manifest import Manifest, parse_manifest
from mlscope.contract.steps import apply_steps
from mlscope.registry.catalogue import Catalogue
from mlscope.runtime.data.digits import digits_split
from mlscope.runtime.models import digits_cnn
from mlscope.runtime.predictors.onnxruntime.export import exported_graph
from mlscope.runtime.predictors.pytorch.models import build_module
from tests.integration.test_api import (  # noqa: F401 - app, redis_db, settings: fixtures (http is the suite's)
    app,
    redis_db,
    settings,
    submit,
)
from tests.integration.test_run_cli import json_lines, mlscope

pytestmark = pytest.mark.slow

REF = "mlscope:digits_cnn"
CATALOGUE = Catalogue.load()
IMAGES, LABELS = digits_split("test")


@pytest.fixture(scope="module")
def trained_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory holding the trained model (trained once for this module)."""
    cache = tmp_path_factory.mktemp("cache")
    assert digits_cnn.trained_digits_cnn(cache).origin == "trained"
    return cache


@pytest.fixture
def cache_env(trained_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """MLSCOPE_CACHE_DIR points at the trained cache, as it does for a predictor and the exporter."""
    monkeypatch.setenv("MLSCOPE_CACHE_DIR", str(trained_cache))
    monkeypatch.setenv("MLSCOPE_SETTINGS", str(tmp_path / "no-settings.toml"))
    yield trained_cache


def png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image, mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


PNGS = [png(image) for image in IMAGES]


def batch_through_steps(manifest: Manifest) -> np.ndarray:
    """The held-out split as an evaluation feeds it: each PNG through the input's steps, stacked."""
    (spec,) = manifest.inputs
    return np.stack([apply_steps(spec.steps, data) for data in PNGS])


def logits_of(manifest: Manifest, batch: np.ndarray) -> np.ndarray:
    model = build_module(manifest)
    with torch.inference_mode():
        return model(torch.from_numpy(batch)).numpy()


def top1_percent(manifest: Manifest, logits: np.ndarray) -> float:
    """Top-1 after the output's own postprocessing (softmax, then top-k's best index)."""
    (output,) = manifest.outputs
    indices, _scores = apply_steps(output.steps, logits)
    return 100.0 * float(np.mean(indices[:, 0] == LABELS))


def with_normalize(manifest: Manifest, mean: list[float], std: list[float]) -> Manifest:
    document: dict[str, Any] = manifest.to_dict()
    steps = document["inputs"][0]["steps"]
    (normalize,) = [step for step in steps if "normalize" in step]
    normalize["normalize"].update(mean=mean, std=std)
    return parse_manifest(document, "a manifest with a wrong mean/std")


# ---- training and its cache ---------------------------------------------------------------------


def test_the_factory_trains_once_then_reads_its_cache(
    trained_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an empty cache directory
    cache = tmp_path / "cache"
    # When the model is asked for the first time
    first = digits_cnn.trained_digits_cnn(cache)
    # Then it is trained, its record says how, and it is saved under the recipe's key
    assert first.origin == "trained" and first.path == digits_cnn.cache_path(cache) and first.path.is_file()
    assert first.path.name == f"digits_cnn-{digits_cnn.recipe_key()}.pt"
    record = first.record
    assert record["recipe"] == digits_cnn.recipe_key() and record["seed"] == digits_cnn.RECIPE["seed"]
    assert (record["epochs"], record["train_samples"], record["held_out_samples"]) == (
        digits_cnn.RECIPE["epochs"],
        1437,
        360,
    )
    assert record["held_out_top1"] >= 95.0 and record["train_top1"] >= record["held_out_top1"]
    assert record["parameters"] == sum(p.numel() for p in first.model.parameters())
    assert not first.model.training
    saved_at = first.path.stat().st_mtime_ns

    # When it is asked again, with training made impossible
    def no_training() -> None:
        raise AssertionError("trained again instead of reading the cache")

    monkeypatch.setattr(digits_cnn, "_trained_here", no_training)
    second = digits_cnn.trained_digits_cnn(cache)
    # Then it comes from the file, untouched, with the same weights and record
    assert second.origin == "cache" and second.path == first.path
    assert first.path.stat().st_mtime_ns == saved_at
    assert second.record == record
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(tensor, second.model.state_dict()[name]), name
    # And training is deterministic: the module's own training, in another directory, gave the same bits
    other = digits_cnn.trained_digits_cnn(trained_cache).model.state_dict()
    assert all(torch.equal(tensor, other[name]) for name, tensor in first.model.state_dict().items())


def test_a_cache_that_cannot_be_written_trains_in_memory(tmp_path: Path) -> None:
    # Given a "cache directory" that is a file (nothing can be created under it)
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    # When the model is asked for
    made = digits_cnn.trained_digits_cnn(blocked)
    # Then it is trained in memory, reaches its accuracy, and is saved nowhere
    assert (made.origin, made.path) == ("trained", None)
    assert made.record["held_out_top1"] >= 95.0


def test_a_foreign_file_under_the_cache_name_is_trained_over(trained_cache: Path, tmp_path: Path) -> None:
    # Given a file that is not a checkpoint where the recipe's cache file goes
    path = digits_cnn.cache_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a checkpoint")
    # When the model is asked for, then it is trained again and the file replaced
    made = digits_cnn.trained_digits_cnn(tmp_path)
    assert made.origin == "trained" and digits_cnn.trained_digits_cnn(tmp_path).origin == "cache"


# ---- accuracy through the manifest's own steps -------------------------------------------------


def test_the_manifest_steps_reach_the_accuracy_the_entry_states(cache_env: Path) -> None:
    # Given the catalogue's PyTorch manifest and the held-out images as PNG files
    manifest = CATALOGUE.manifest(REF, "pytorch")
    assert manifest.dataset == {"name": "digits", "split": "test"}
    # When each image goes through the manifest's steps
    batch = batch_through_steps(manifest)
    # Then the batch is exactly what the model was trained on (same arithmetic, same float32 bits)
    assert batch.shape == (360, 1, 8, 8) and batch.dtype == np.float32
    np.testing.assert_array_equal(batch, digits_cnn.preprocess(IMAGES))
    # And the model built as the predictor builds it reaches ≥ 95% top-1, what the entry states
    top1 = top1_percent(manifest, logits_of(manifest, batch))
    assert top1 >= 95.0
    assert top1 == pytest.approx(manifest.attributes["top1"], abs=1.0)


@pytest.mark.parametrize(
    ("mean", "std", "mistake"),
    [([0.305], [3.76], "std off by a factor of ten"), ([3.05], [0.376], "mean off by a factor of ten")],
)
def test_a_wrong_mean_or_std_visibly_drops_accuracy(
    cache_env: Path, mean: list[float], std: list[float], mistake: str
) -> None:
    # Given the right manifest and one whose normalize step is wrong
    right = CATALOGUE.manifest(REF, "pytorch")
    wrong = with_normalize(right, mean, std)
    # When both evaluate the held-out split through their own steps
    right_top1 = top1_percent(right, logits_of(right, batch_through_steps(right)))
    wrong_top1 = top1_percent(wrong, logits_of(wrong, batch_through_steps(wrong)))
    # Then the wrong one is at least 20 points lower
    assert right_top1 - wrong_top1 >= 20.0, (mistake, right_top1, wrong_top1)


# ---- ONNX Runtime on the exported graph --------------------------------------------------------


def test_onnx_runtime_gives_what_pytorch_gives_on_every_held_out_image(cache_env: Path) -> None:
    # Given the entry's manifests for both frameworks and the held-out batch through the steps
    torch_manifest = CATALOGUE.manifest(REF, "pytorch")
    onnx_manifest = CATALOGUE.manifest(REF, "onnxruntime")
    batch = batch_through_steps(onnx_manifest)
    # When the graph ONNX Runtime runs is exported (in a child process, from the same cache) and run
    graph = exported_graph(onnx_manifest, cache_env)
    session = onnxruntime.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    (onnx_logits,) = session.run(["logits"], {"input": batch})
    torch_logits = logits_of(torch_manifest, batch)
    # Then every top-1 agrees, the logits agree to 1e-4, and so does the accuracy
    assert onnx_logits.shape == torch_logits.shape == (360, 10)
    assert np.array_equal(onnx_logits.argmax(axis=1), torch_logits.argmax(axis=1))
    assert float(np.max(np.abs(onnx_logits - torch_logits))) < 1e-4
    assert top1_percent(onnx_manifest, onnx_logits) == top1_percent(torch_manifest, torch_logits) >= 95.0


# ---- the CLI -----------------------------------------------------------------------------------


def test_models_show_and_the_listing_name_the_entry(mlscope_env: dict[str, str]) -> None:
    # When the entry is shown as JSON, for each framework
    for framework in ("pytorch", "onnxruntime"):
        shown = mlscope(mlscope_env, "models", "show", REF, "-f", framework, "--json")
        assert shown.returncode == 0, shown.stderr
        document = json.loads(shown.stdout)
        # Then it is the trained model's manifest: its factory, its steps, its dataset, its accuracy
        assert document["name"] == REF and document["framework"]["name"] == framework
        assert document["source"] == {"python": "mlscope.runtime.models.digits_cnn:make_model"}
        (spec,) = document["inputs"]
        assert (spec["shape"], spec["dtype"], spec["layout"]) == ([1, 8, 8], "float32", "NCHW")
        assert [next(iter(step)) for step in spec["steps"]] == ["decode", "normalize", "to_layout"]
        assert spec["steps"][1]["normalize"]["mean"] == [digits_cnn.MEAN]
        assert document["dataset"] == {"name": "digits", "split": "test"}
        assert document["attributes"]["top1"] >= 95.0 and "trained, not random" in document["description"]
    # And `mlscope models` lists it for each framework, from the catalogue
    listed = mlscope(mlscope_env, "models", "--search", "digits", "--json")
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in json_lines(listed.stdout) if line["name"] == REF]
    assert sorted(line["framework"] for line in lines) == ["onnxruntime", "openvino", "pytorch"]
    assert all(line["origin"] == "catalogue" and line["task"] == "image_classification" for line in lines)


def test_the_api_shows_and_accepts_the_entry_by_name(http: FlaskClient) -> None:
    # Given a farm's API, where no code travels over the wire
    # When the entry is asked for, then both manifests name mlscope's own factory and the dataset
    detail = http.get(f"/api/v1/models/{REF}").get_json()
    assert set(detail["manifests"]) == {"pytorch", "onnxruntime", "openvino"}
    for manifest in detail["manifests"].values():
        assert manifest["source"] == {"python": "mlscope.runtime.models.digits_cnn:make_model"}
        assert manifest["dataset"] == {"name": "digits", "split": "test"}
    # And an evaluation naming it is accepted: the factory comes from shipped data, not the request
    for framework in ("pytorch", "onnxruntime"):
        accepted = submit(http, model=REF, framework=framework)
        assert accepted.status_code == 202, accepted.get_json()
