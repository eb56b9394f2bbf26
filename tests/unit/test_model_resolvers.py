"""Model references: one resolver per kind, chosen once in a fixed order (`mlscope.registry.resolvers`).
Each kind's reference goes to its own resolver alone; the order is the documented precedence; what no
resolver matches is refused with the messages users know."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest
from mlscope.registry.models import ModelRegistry
from mlscope.registry.references import ModelOptions, reference_kind
from mlscope.registry.resolvers import ORDER, Resolvers
from mlscope.registry.uploads import ModelFiles
from tests.fixtures.onnx_graphs import onnx_model

DATA = Path(__file__).resolve().parents[1] / "data" / "manifests"
FACTORY = "import torch\n\ndef make_model():\n    return torch.nn.Linear(16, 4)\n"


@pytest.fixture
def references(tmp_path: Path) -> dict[str, tuple[str, str, ModelOptions]]:
    """One reference of each kind, by kind, with a framework it runs on and its options."""
    graph = onnx_model(tmp_path / "model.onnx")
    upload, _ = ModelFiles(tmp_path / "uploads").add(iter([graph.read_bytes()]), filename="tiny.onnx")
    (tmp_path / "net.py").write_text(FACTORY)
    directory = tmp_path / "my-bert"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 1000}))
    (directory / "model.safetensors").write_bytes(b"weights")
    return {
        "upload": (upload.ref, "onnxruntime", ModelOptions()),
        "factory": (f"{tmp_path / 'net.py'}:make_model", "pytorch", ModelOptions(input_shapes={"": (1, 16)})),
        "manifest": ("resnet18", "pytorch", ModelOptions()),
        "catalogue": ("torchvision:resnet18", "onnxruntime", ModelOptions()),
        "directory": (f"{directory}/", "pytorch", ModelOptions()),
        "onnx": (str(graph), "onnxruntime", ModelOptions()),
    }


@pytest.fixture
def registry(tmp_path: Path) -> ModelRegistry:
    loaded = ModelRegistry.load()
    return ModelRegistry(loaded.all(), loaded.catalogue, uploads=ModelFiles(tmp_path / "uploads").lookup)


def record_calls(registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each entry into the dispatcher ("choose") and into a resolver's `resolve` or `frameworks`
    (by kind), in order."""
    calls: list[str] = []
    resolvers = registry.resolvers

    def spy(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return function(*args, **kwargs)

        return recorded

    monkeypatch.setattr(resolvers, "choose", spy("choose", resolvers.choose))
    for resolver in resolvers.order:
        monkeypatch.setattr(resolver, "resolve", spy(f"{resolver.kind}.resolve", resolver.resolve))
    return calls


def test_the_resolvers_are_tried_in_the_documented_order(registry: ModelRegistry) -> None:
    assert tuple(resolver.kind for resolver in registry.resolvers.order) == ORDER
    assert ORDER == ("upload", "factory", "manifest", "catalogue", "directory", "onnx")


@pytest.mark.parametrize("kind", ORDER)
def test_each_kind_is_resolved_by_its_resolver_alone_chosen_once(
    kind: str,
    registry: ModelRegistry,
    references: dict[str, tuple[str, str, ModelOptions]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given one reference of the kind
    ref, framework, options = references[kind]
    assert registry.resolvers.choose(ref).kind == kind
    # When the registry resolves it
    calls = record_calls(registry, monkeypatch)
    manifest = registry.get(ref, framework, options)
    # Then the dispatcher was entered once and only this kind's resolver resolved it
    assert calls == ["choose", f"{kind}.resolve"]
    assert isinstance(manifest, Manifest) and manifest.framework.name == framework
    # And listing its frameworks enters the dispatcher once and resolves nothing
    calls.clear()
    assert framework in registry.frameworks_for(ref)
    assert calls == ["choose"]


@pytest.mark.parametrize("kind", ORDER)
def test_the_form_alone_names_the_same_kind(
    kind: str, references: dict[str, tuple[str, str, ModelOptions]]
) -> None:
    ref, _, _ = references[kind]
    assert reference_kind(ref) == ("name" if kind in ("manifest", "catalogue") else kind)


def test_a_manifest_file_shadows_a_catalogue_entry_of_its_name(tmp_path: Path) -> None:
    # Given a manifest file named like a catalogue entry, for pytorch only
    document = yaml.safe_load((DATA / "valid.yaml").read_text())
    document.update(name="torchvision:resnet18")
    document["framework"]["name"] = "pytorch"
    (tmp_path / "shadow.yaml").write_text(yaml.safe_dump(document))
    registry = ModelRegistry.load([tmp_path])
    # Then the manifest resolver is chosen, and the catalogue's frameworks are not offered
    assert registry.resolvers.choose("torchvision:resnet18").kind == "manifest"
    assert registry.frameworks_for("torchvision:resnet18") == ["pytorch"]
    with pytest.raises(UserError, match="has no manifest for framework 'onnxruntime'; it has: pytorch"):
        registry.get("torchvision:resnet18", "onnxruntime")


def test_a_directory_comes_before_an_onnx_file_and_a_name_is_never_a_path(tmp_path: Path) -> None:
    (tmp_path / "odd.onnx").mkdir()
    resolvers = Resolvers({}, None, local_files=True, uploads=None)
    assert resolvers.choose(str(tmp_path / "odd.onnx")).kind == "directory"
    assert resolvers.first("resnet18") is None
    assert resolvers.choose("sha256:" + "0" * 64).kind == "upload"


def test_what_no_resolver_matches_is_refused_with_its_message(tmp_path: Path) -> None:
    registry = ModelRegistry.load()
    (tmp_path / "weights.bin").write_bytes(b"x")
    cases = [
        ("resnet19", "unknown model 'resnet19'; did you mean resnet18"),
        (str(tmp_path / "weights.bin"), "a model file must be an ONNX graph ending in .onnx"),
        (str(tmp_path / "nothing"), "no such file or directory"),
    ]
    for ref, message in cases:
        for ask in (registry.frameworks_for, lambda r: registry.get(r, "pytorch"), reference_kind):
            if ask is reference_kind and ref == "resnet19":
                assert reference_kind(ref) == "name"
                continue
            with pytest.raises(UserError, match=message) as caught:
                ask(ref)
            assert caught.value.field == "model"


def test_a_farm_refuses_a_factory_or_a_path_first_then_a_checkpoint_then_names_an_unknown_model() -> None:
    # Given the registry of a farm's api (this machine's files are not read)
    loaded = ModelRegistry.load()
    farm = ModelRegistry(loaded.all(), loaded.catalogue, local_files=False)
    weights = ModelOptions(weights="model.pt")
    cases = [
        ("net.py:make_model", weights, "Python factories are not accepted here", "model"),
        ("./model.onnx", weights, "./model.onnx: a path on your machine means nothing", "model"),
        (
            "resnet19",
            weights,
            r"a checkpoint path \(--weights\): a path on your machine",
            "model_options.weights",
        ),
        ("sha256:" + "0" * 64, weights, r"a checkpoint path \(--weights\)", "model_options.weights"),
        ("resnet19", ModelOptions(), "unknown model 'resnet19'", "model"),
    ]
    for ref, options, message, field in cases:
        with pytest.raises(UserError, match=message) as caught:
            farm.get(ref, "onnxruntime", options)
        assert caught.value.field == field
