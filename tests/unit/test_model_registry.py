"""The model registry: shipped manifests and the catalogue (read when a name is first looked up), the
user's directories on top (read at load), and lookups that explain misses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest, ManifestError, parse_manifest
from mlscope.contract.settings import load_settings
from mlscope.registry import models
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.models import ModelRegistry
from tests.fixtures.onnx_graphs import onnx_model

DATA = Path(__file__).resolve().parents[1] / "data" / "manifests"
SHIPPED_NAMES = [
    "alexnet",
    "bert_base",
    "digits_cnn",
    "llama_tiny",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "resnet18",
    "resnet50",
    "vgg16",
    "vit_b_16",
]
# Every manifest file mlscope ships, one per (model, framework).
SHIPPED_FILES = len(list(Path(models.__file__).resolve().parents[1].joinpath("manifests").rglob("*.yaml")))


def document(name: str = "tiny_cnn", framework: str = "pytorch", **changes: Any) -> dict[str, Any]:
    doc = yaml.safe_load((DATA / "valid.yaml").read_text())
    doc.update(name=name, **changes)
    doc["framework"]["name"] = framework
    return doc


def write(path: Path, doc: dict[str, Any] | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def shipped() -> ModelRegistry:
    return ModelRegistry.load()


def test_shipped_registry_lists_models_and_frameworks(shipped: ModelRegistry) -> None:
    # Given the registry of shipped manifests
    # Then it knows every shipped model on PyTorch, ONNX Runtime and OpenVINO, sorted
    assert shipped.names() == SHIPPED_NAMES
    assert shipped.frameworks_for("bert_base") == ["jax", "onnxruntime", "openvino", "pytorch"]
    assert shipped.frameworks_for("resnet50") == [
        "caffe2",
        "jax",
        "litert",
        "mxnet",
        "onnxruntime",
        "openvino",
        "pytorch",
        "tensorflow",
        "tensorrt",
    ]
    keys = [m.key for m in shipped.all()]
    assert keys == sorted(keys) and len(keys) == len(shipped) == SHIPPED_FILES
    assert shipped.get("resnet50", "onnxruntime").attributes["top1"] == 76.130


def test_unknown_model_suggests_close_names(shipped: ModelRegistry) -> None:
    # When a model name is misspelt
    with pytest.raises(UserError) as caught:
        shipped.get("resnet19", "pytorch")
    # Then the error suggests the close ones, lists every known model and says the catalogue has more
    message = str(caught.value)
    assert message.startswith("unknown model 'resnet19'; did you mean resnet18")
    assert f"known models: {', '.join(SHIPPED_NAMES)} and " in message
    assert message.endswith("catalogue architectures (`mlscope models` lists them)")
    assert caught.value.field == "model"


def test_unknown_model_with_another_separator_is_suggested(shipped: ModelRegistry) -> None:
    with pytest.raises(UserError, match="did you mean bert_base"):
        shipped.frameworks_for("bert-base")


def test_known_model_without_the_framework_lists_the_frameworks_it_has(shipped: ModelRegistry) -> None:
    with pytest.raises(UserError) as caught:
        shipped.get("bert_base", "tensorflow")
    assert str(caught.value) == (
        "model 'bert_base' has no manifest for framework 'tensorflow'; "
        "it has: jax, onnxruntime, openvino, pytorch"
    )
    assert caught.value.field == "framework"


def test_extra_directory_overrides_shipped_manifest(tmp_path: Path) -> None:
    # Given a user directory with its own resnet18 for PyTorch (nested, .yml) and a new model
    override = write(tmp_path / "mine" / "vision" / "resnet18.yml", document("resnet18", description="mine"))
    write(tmp_path / "mine" / "tiny.yaml", document())
    # When the registry loads it on top of the shipped manifests
    registry = ModelRegistry.load([tmp_path / "mine"])
    # Then the user's manifest wins for that key only, and the new model is there
    assert registry.get("resnet18", "pytorch").origin == str(override)
    assert registry.get("resnet18", "pytorch").description == "mine"
    assert registry.get("resnet18", "onnxruntime").source.target == "resnet18"
    assert "tiny_cnn" in registry.names()


def test_later_extra_directory_overrides_earlier(tmp_path: Path) -> None:
    write(tmp_path / "first" / "m.yaml", document(description="first"))
    write(tmp_path / "second" / "m.yaml", document(description="second"))
    registry = ModelRegistry.load([tmp_path / "first", tmp_path / "second"])
    assert registry.get("tiny_cnn", "pytorch").description == "second"


def test_same_key_twice_in_one_directory_names_both_files(tmp_path: Path) -> None:
    # Given two files in one directory defining the same (name, framework)
    first = write(tmp_path / "a.yaml", document())
    second = write(tmp_path / "sub" / "b.yaml", document(description="again"))
    # When the directory is loaded
    with pytest.raises(ManifestError) as caught:
        ModelRegistry.load([tmp_path])
    # Then the error names both files and the key
    message = str(caught.value)
    assert str(first) in message and str(second) in message
    assert "model 'tiny_cnn' for framework 'pytorch' is already defined by" in message


def test_same_name_on_two_frameworks_is_not_a_duplicate(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", document())
    write(tmp_path / "b.yaml", document(framework="onnxruntime"))
    assert ModelRegistry.load([tmp_path]).frameworks_for("tiny_cnn") == ["onnxruntime", "pytorch"]


def test_missing_extra_directory_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(UserError) as caught:
        ModelRegistry.load([missing])
    assert str(caught.value) == f"manifest directory {missing} does not exist (check MLSCOPE_MANIFESTS)"
    assert caught.value.field == "manifests"


def test_broken_manifest_fails_the_whole_load(tmp_path: Path) -> None:
    # Given a user directory with one good and one broken manifest
    write(tmp_path / "good.yaml", document())
    broken = write(tmp_path / "broken.yaml", document(task="classify"))
    # When it is loaded, the broken file's error surfaces instead of the model vanishing
    with pytest.raises(ManifestError, match=f"^{broken}: task: must be one of"):
        ModelRegistry.load([tmp_path])


def test_hidden_directories_and_other_files_are_ignored(tmp_path: Path) -> None:
    write(tmp_path / ".git" / "broken.yaml", "not: [valid")
    write(tmp_path / "notes.txt", "not a manifest")
    write(tmp_path / "m.yaml", document())
    assert [m.key for m in ModelRegistry.load([tmp_path]).all() if m.name == "tiny_cnn"] == [
        ("tiny_cnn", "pytorch")
    ]


def test_registry_built_from_manifests_refuses_duplicates() -> None:
    first = parse_manifest(document(), "one.yaml")
    second = parse_manifest(document(), "two.yaml")
    with pytest.raises(
        ManifestError,
        match=r"^two\.yaml: model 'tiny_cnn' for framework 'pytorch' is already defined by one\.yaml",
    ):
        ModelRegistry([first, second])


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each read of the shipped manifests ("manifests") and of the catalogue ("catalogue")."""
    calls: list[str] = []
    shipped, catalogue = models._load_shipped, Catalogue.load

    def read_shipped() -> list[Manifest]:
        calls.append("manifests")
        return shipped()

    def read_catalogue() -> Catalogue:
        calls.append("catalogue")
        return catalogue()

    monkeypatch.setattr(models, "_load_shipped", read_shipped)
    monkeypatch.setattr(Catalogue, "load", staticmethod(read_catalogue))
    return calls


def test_a_path_is_resolved_without_reading_the_shipped_manifests_or_the_catalogue(
    tmp_path: Path, reads: list[str]
) -> None:
    graph = onnx_model(tmp_path / "model.onnx")
    registry = ModelRegistry.load()
    # Every framework that runs ONNX graphs (TensorRT too, though it runs on a GPU only)
    assert registry.frameworks_for(str(graph)) == ["onnxruntime", "openvino", "tensorrt"]
    assert registry.get(str(graph), "onnxruntime").inputs[0].shape == (16,)
    for nowhere in (str(tmp_path / "missing.onnx"), str(tmp_path / "missing")):
        with pytest.raises(UserError, match="no such file"):
            registry.get(nowhere, "onnxruntime")
    assert reads == []
    # A name reads them, once each; what they hold is then as before.
    assert registry.frameworks_for("bert_base") == ["jax", "onnxruntime", "openvino", "pytorch"]
    assert registry.get("resnet50", "onnxruntime").attributes["top1"] == 76.130
    assert registry.get("torchvision:resnet18", "onnxruntime").name == "torchvision:resnet18"
    assert registry.names() == SHIPPED_NAMES and len(registry) == SHIPPED_FILES
    assert registry.catalogue is not None and registry.catalogue.has("torchvision:resnet18")
    assert sorted(reads) == ["catalogue", "manifests"]


def test_an_unknown_name_reads_the_manifests_and_the_catalogue_to_suggest_one(reads: list[str]) -> None:
    with pytest.raises(UserError, match="did you mean resnet18"):
        ModelRegistry.load().get("resnet19", "pytorch")
    assert sorted(reads) == ["catalogue", "manifests"]


def test_the_user_directories_are_read_at_load_the_shipped_set_at_first_name(
    tmp_path: Path, reads: list[str]
) -> None:
    broken = write(tmp_path / "bad" / "broken.yaml", document(task="classify"))
    with pytest.raises(ManifestError, match=f"^{broken}: task: must be one of"):
        ModelRegistry.load([tmp_path / "bad"])
    write(tmp_path / "good" / "mine.yaml", document(name="resnet18", description="mine"))
    registry = ModelRegistry.load([tmp_path / "good"])
    assert reads == []
    # The user's manifest still replaces the shipped one of its (name, framework), and only that one.
    assert registry.get("resnet18", "pytorch").description == "mine"
    assert registry.get("resnet18", "onnxruntime").description != "mine"
    assert reads == ["manifests"]


def test_the_settings_manifest_directories_are_checked_before_any_model_is_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nope"
    monkeypatch.setenv("MLSCOPE_MANIFESTS", str(missing))
    monkeypatch.setenv("MLSCOPE_SETTINGS", str(tmp_path / "settings.toml"))
    with pytest.raises(UserError, match=f"^manifest directory {missing} does not exist"):
        ModelRegistry.load(load_settings().manifests)
