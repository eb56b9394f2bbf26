"""The model catalogue: its committed JSON is what the installed libraries give, every entry makes a
valid manifest for each of its frameworks, names resolve (or suggest close ones), filters filter, and
resolving a name loads no deep-learning framework."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import TASKS, parse_manifest
from mlscope.registry.catalogue import LIBRARY_FILES, Catalogue, CatalogueEntry
from mlscope.registry.catalogue.generate import check, main, render
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.frameworks import FRAMEWORKS
from tests.conftest import REPO

CATALOGUE = Catalogue.load()
ENTRIES = CATALOGUE.entries()
PACKAGE = resources.files("mlscope.registry.catalogue")


def committed(library: str) -> dict[str, Any]:
    return json.loads(PACKAGE.joinpath(LIBRARY_FILES[library]).read_text(encoding="utf-8"))


# ---- the generated data -----------------------------------------------------------------------


def test_the_committed_json_is_what_the_installed_libraries_give() -> None:
    # Given the installed torchvision and transformers (this imports both)
    said: list[str] = []
    # When the generator compares what they give with the committed files
    code = main(["--check"], out=said.append)
    # Then nothing differs: regenerate with `python -m mlscope.registry.catalogue.generate`
    assert (code, said) == (0, [])


@pytest.mark.parametrize("library", sorted(LIBRARY_FILES))
def test_the_committed_json_is_laid_out_as_the_generator_writes_it(library: str) -> None:
    text = PACKAGE.joinpath(LIBRARY_FILES[library]).read_text(encoding="utf-8")
    assert render(json.loads(text)) == text
    assert '"/' not in text and "://" not in text  # no absolute paths, nothing to download


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(library_version="0.0.1"), "written from torchvision 0.0.1, "),
        (lambda d: d["entries"].pop(0), "entries 1 new (torchvision:alexnet)"),
        (
            lambda d: d["entries"][0]["inputs"][0].update(shape=[3, 1, 1]),
            "torchvision:alexnet differs in inputs",
        ),
        (
            lambda d: d["entries"].append({**d["entries"][0], "ref": "torchvision:zzz"}),
            "1 gone (torchvision:zzz)",
        ),
    ],
)
def test_check_names_the_first_difference_in_one_line(tmp_path: Path, change: Any, expected: str) -> None:
    # Given the committed document as the fresh one, and a changed copy on disk
    fresh = committed("torchvision")
    stale = copy.deepcopy(fresh)
    change(stale)
    path = tmp_path / "torchvision.json"
    path.write_text(render(stale), encoding="utf-8")
    # When the two are compared
    problem = check("torchvision", fresh, path)
    # Then one line names the file and what differs
    assert problem is not None and "\n" not in problem
    assert problem.startswith("torchvision.json is not what torchvision gives: ") and expected in problem


def test_check_accepts_identical_bytes_and_reports_a_missing_file(tmp_path: Path) -> None:
    fresh = committed("transformers")
    (tmp_path / "same.json").write_text(render(fresh), encoding="utf-8")
    assert check("transformers", fresh, tmp_path / "same.json") is None
    assert check("transformers", fresh, tmp_path / "missing.json") == "missing.json is missing"


def test_the_catalogue_holds_at_least_100_distinct_architectures_with_unique_refs() -> None:
    refs = [entry.ref for entry in ENTRIES]
    assert len(refs) == len(set(refs)) >= 100
    by_library = {library: sum(e.library == library for e in ENTRIES) for library in LIBRARY_FILES}
    assert by_library["torchvision"] >= 100 and by_library["transformers"] >= 50
    assert by_library["timm"] >= 40
    namespaces = {"torchvision": "torchvision", "timm": "timm", "transformers": "hf", "mlscope": "mlscope"}
    assert all(ref == f"{namespaces[e.library]}:{e.name}" for ref, e in zip(refs, ENTRIES, strict=True))


def test_two_entries_with_one_ref_are_refused() -> None:
    with pytest.raises(ValueError, match="lists 'hf:bert' twice"):
        Catalogue([CATALOGUE.get("hf:bert")] * 2, {"pytorch": "*"})


def test_entries_say_what_the_brief_names() -> None:
    # Sizes from torchvision's weights, video clips, segmentation, token ids with their vocabulary
    shapes = {ref: CATALOGUE.get(ref).inputs[0].shape for ref in CATALOGUE.refs()}
    assert shapes["torchvision:resnet18"] == (3, 224, 224)
    assert shapes["torchvision:inception_v3"] == (3, 299, 299)
    assert shapes["torchvision:vit_h_14"] == (3, 224, 224)  # built without weights: 224, not SWAG's 518
    assert shapes["torchvision:r3d_18"] == (3, 16, 112, 112)
    assert shapes["torchvision:deeplabv3_resnet50"] == (3, 520, 520)
    bert = CATALOGUE.get("hf:bert")
    assert (bert.family, bert.task, bert.outputs) == ("bert", "text_embedding", ("last_hidden_state",))
    (ids,) = bert.inputs
    assert (ids.name, ids.shape, ids.dtype, ids.value_range) == ("input_ids", (128,), "int64", (0.0, 30522.0))
    assert [spec.name for spec in CATALOGUE.get("hf:t5").inputs] == ["input_ids", "decoder_input_ids"]
    assert CATALOGUE.get("hf:vit").inputs[0].shape == (3, 224, 224)
    assert CATALOGUE.get("torchvision:efficientnet_b0").family == "efficientnet"
    assert CATALOGUE.get("torchvision:vit_b_16").family == "vit"
    # timm: sizes, interpolation and normalisation from the model's default pretrained configuration
    assert shapes["timm:inception_v3"] == (3, 299, 299) and shapes["timm:tinynet_a"] == (3, 192, 192)
    assert shapes["timm:resnext26ts"] == (3, 256, 256) and shapes["timm:crossvit_tiny_240"] == (3, 240, 240)
    # Left out: optical flow (two frames) and the quantizable twins of classification models
    assert not CATALOGUE.find(search="raft") and not CATALOGUE.find(search="quantized")


def test_large_default_configurations_are_shrunk() -> None:
    llama = CATALOGUE.get("hf:llama").source["transformers"]["config"]
    assert llama["num_hidden_layers"] <= 4 and llama["hidden_size"] <= 512
    for entry in CATALOGUE.find(search="hf:"):
        config = entry.source["transformers"]["config"]
        assert config.get("num_hidden_layers", 0) <= 12 and config.get("hidden_size", 0) <= 768, entry.ref


# ---- manifests --------------------------------------------------------------------------------


def test_every_entry_makes_a_valid_manifest_for_each_of_its_frameworks() -> None:
    shipped = {m.framework.name: m.framework.version for m in ModelRegistry.load().all()}
    for entry in ENTRIES:
        # Every source kind here runs on PyTorch and is exported for ONNX Runtime and OpenVINO, unless
        # the export or the run was measured failing (then the entry says why)
        # And on a framework that names its architecture among those of the entry's library it runs
        # (llama.cpp: hf:llama; JAX: its Flax definitions), after those
        everywhere = ("pytorch", "onnxruntime", "openvino")
        named = tuple(
            name
            for name, spec in FRAMEWORKS.items()
            if entry.library in spec.sources and entry.name in spec.model_types
        )
        own = tuple(name for name in entry.frameworks if name not in named)
        assert sorted(own + tuple(entry.unsupported)) == sorted(everywhere), entry.ref
        assert entry.frameworks == tuple(name for name in everywhere if name in own) + named, entry.ref
        assert entry.task in TASKS
        for framework in entry.frameworks:
            manifest = CATALOGUE.manifest(entry.ref, framework)
            assert manifest.key == (entry.ref, framework)
            version = FRAMEWORKS[framework].model_version if framework in named else shipped[framework]
            assert manifest.framework.version == version
            assert manifest.weights.kind == "random" and manifest.version == "1.0"
            assert [spec.name for spec in manifest.inputs] == [spec.name for spec in entry.inputs]
            assert tuple(spec.name for spec in manifest.outputs) == entry.outputs
            if entry.library == "mlscope":
                # A model mlscope trains itself or ships from a package: its factory returns real
                # weights, and says so
                assert "trained, not random" in manifest.description or "real pretrained weights" in (
                    manifest.description
                )
            else:
                assert "random weights" in manifest.description
            # The same document through parse_manifest again is the same manifest, hash included
            assert parse_manifest(manifest.to_dict(), "again").sha256 == manifest.sha256


def test_a_manifest_is_hashed_like_a_yaml_one() -> None:
    # Given the catalogue's resnet18 and the shipped one: same source, weights and inputs
    ours = CATALOGUE.manifest("torchvision:resnet18", "pytorch")
    shipped = ModelRegistry.load().get("resnet18", "pytorch")
    assert ours.source == shipped.source and ours.inputs == shipped.inputs
    # Then the hash is that of the normalised document, as for a file
    document = {**shipped.to_dict(), **{k: ours.to_dict()[k] for k in ("name", "description", "attributes")}}
    document["dataset"] = None
    assert parse_manifest(document, "x").sha256 == ours.sha256


def test_an_unknown_ref_suggests_close_names() -> None:
    with pytest.raises(UserError) as caught:
        CATALOGUE.manifest("torchvision:resnet19", "pytorch")
    assert caught.value.field == "model"
    assert "'torchvision:resnet19'; did you mean torchvision:resnet18 or" in str(caught.value)
    # A bare or misspelt namespace finds the name in its own
    for typed, found in [
        ("resnet18", "timm:resnet18 or torchvision:resnet18"),
        ("huggingface:gpt2", "hf:gpt2"),
        ("hf:gtp2", "hf:gpt2"),
    ]:
        with pytest.raises(UserError, match=f"did you mean {found}"):
            CATALOGUE.get(typed)
    with pytest.raises(UserError, match=r"unknown catalogue model 'zzzz' \(names are"):
        CATALOGUE.get("zzzz")


def test_a_framework_the_entry_is_not_meant_for_is_refused_with_those_it_has() -> None:
    with pytest.raises(UserError) as caught:
        CATALOGUE.manifest("hf:bert", "tensorflow")
    assert caught.value.field == "framework"
    assert str(caught.value) == (
        "catalogue model 'hf:bert' is not meant for framework 'tensorflow'; it has: pytorch, onnxruntime, "
        "openvino, jax"
    )


# ---- lookups ----------------------------------------------------------------------------------


def test_has_is_exact() -> None:
    assert CATALOGUE.has("hf:bert") and CATALOGUE.has("torchvision:resnet18")
    assert not CATALOGUE.has("bert") and not CATALOGUE.has("HF:BERT")


def test_filters_combine() -> None:
    classifiers = CATALOGUE.find(task="image_classification")
    assert classifiers and all(e.task == "image_classification" for e in classifiers)
    assert {e.library for e in classifiers} == {"torchvision", "timm", "transformers", "mlscope"}
    resnets = CATALOGUE.find(family="resnet", framework="onnxruntime")
    assert "torchvision:resnet50" in {e.ref for e in resnets} and all(e.family == "resnet" for e in resnets)
    assert [e.ref for e in CATALOGUE.find(search="GPT2")] == ["hf:gpt2"]
    assert {e.ref for e in CATALOGUE.find(task="object_detection", search="ssd")} == {
        "torchvision:ssd300_vgg16",
        "torchvision:ssdlite320_mobilenet_v3_large",
    }
    assert CATALOGUE.find(framework="tensorflow") == [] and CATALOGUE.find() == ENTRIES
    assert isinstance(ENTRIES[0], CatalogueEntry) and [e.ref for e in ENTRIES] == CATALOGUE.refs()


def test_entries_are_frozen() -> None:
    with pytest.raises(AttributeError):
        ENTRIES[0].ref = "other"  # type: ignore[misc]


def test_resolving_a_name_imports_no_deep_learning_framework() -> None:
    # Given a fresh interpreter that loads the catalogue and makes a manifest of each library
    probe = (
        "import json, sys; from mlscope.registry.catalogue import Catalogue; c = Catalogue.load(); "
        "c.manifest('torchvision:resnet18', 'pytorch'); c.manifest('hf:bert', 'onnxruntime'); "
        "c.manifest('timm:convnext_atto', 'onnxruntime'); "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    loaded = {name.split(".")[0] for name in json.loads(done.stdout)}
    # Then neither torch, torchvision, timm, transformers nor onnxruntime was imported
    assert loaded.isdisjoint({"torch", "torchvision", "timm", "transformers", "onnxruntime"})


def test_torchvision_entries_are_built_without_downloading_a_backbone() -> None:
    # Segmentation and detection builders default to ImageNet backbone weights, which torchvision
    # would download: the PyTorch predictor builds them with weights_backbone=None too.
    from mlscope.runtime.predictors.base import PredictorError
    from mlscope.runtime.predictors.pytorch.models import torchvision_kwargs

    for entry in CATALOGUE.find(search="torchvision:"):
        kwargs = torchvision_kwargs(entry.name)
        assert kwargs["weights"] is None, entry.ref
        assert ("weights_backbone" in kwargs) == (entry.group in ("segmentation", "detection")), entry.ref
        assert kwargs.get("weights_backbone") is None
    with pytest.raises(PredictorError, match="torchvision has no model 'resnet19'"):
        torchvision_kwargs("resnet19")


# ---- timm ---------------------------------------------------------------------------------------


TIMM = CATALOGUE.find(search="timm:")


def test_timm_entries_load_as_image_classifiers_of_curated_families() -> None:
    # Given the timm part of the catalogue
    assert 40 <= len(TIMM) <= 60 and all(entry.library == "timm" for entry in TIMM)
    families = {entry.family for entry in TIMM}
    # Then every entry is a timm model name classifying one NCHW image into logits, one of many families
    assert len(families) >= 30
    for entry in TIMM:
        assert entry.ref == f"timm:{entry.name}" and entry.source == {"timm": entry.name}, entry.ref
        assert (entry.group, entry.task, entry.outputs) == (
            "classification",
            "image_classification",
            ("logits",),
        )
        (image,) = entry.inputs
        assert (image.name, image.dtype, image.layout, image.shape[0]) == ("input", "float32", "NCHW", 3)
    # The steps are timm's eval transform: resize to crop / crop_pct (bicubic here), centre crop, normalize
    steps = CATALOGUE.manifest("timm:convnext_atto", "pytorch").inputs[0].steps
    assert [(step.name, step.params) for step in steps[1:4]] == [
        ("resize", {"size": 256, "interpolation": "bicubic"}),
        ("center_crop", {"size": 224}),
        ("normalize", {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "scale": 1 / 255}),
    ]
    xception = CATALOGUE.manifest("timm:xception41", "pytorch").inputs[0].steps
    assert (xception[3].params["mean"], xception[3].params["std"]) == ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])


def test_timm_entries_filter_by_family_with_torchvision_names() -> None:
    # The family is timm's module, named as torchvision names the same architecture
    convnexts = {entry.ref for entry in CATALOGUE.find(family="convnext")}
    assert {"timm:convnext_atto", "timm:convnext_tiny", "torchvision:convnext_tiny"} <= convnexts
    assert {e.ref for e in CATALOGUE.find(family="vit", search="timm")} == {"timm:vit_tiny_patch16_224"}
    assert CATALOGUE.get("timm:swin_tiny_patch4_window7_224").family == "swin"
    assert CATALOGUE.get("timm:deit_tiny_patch16_224").family == "deit"
    assert CATALOGUE.get("timm:maxvit_rmlp_nano_rw_256").family == "maxxvit"
    resnets = {e.ref for e in CATALOGUE.find(family="resnet", framework="onnxruntime", search="timm:")}
    assert resnets == {"timm:resnet18", "timm:resnet26d", "timm:resnet50d"}


@pytest.mark.parametrize("framework", ["pytorch", "onnxruntime"])
def test_a_timm_manifest_validates_for_each_framework(framework: str) -> None:
    manifest = CATALOGUE.manifest("timm:convnext_tiny", framework)
    assert (manifest.name, manifest.framework.name, manifest.task) == (
        "timm:convnext_tiny",
        framework,
        "image_classification",
    )
    assert (manifest.source.kind, manifest.source.target, manifest.weights.kind) == (
        "timm",
        "convnext_tiny",
        "random",
    )
    assert manifest.attributes == {"catalogue": "timm", "family": "convnext"}
    assert parse_manifest(manifest.to_dict(), "again").sha256 == manifest.sha256


def test_an_unknown_timm_name_suggests_close_ones() -> None:
    with pytest.raises(UserError) as caught:
        CATALOGUE.get("timm:convnext_tiyn")
    assert caught.value.field == "model"
    assert "'timm:convnext_tiyn'; did you mean timm:convnext_tiny" in str(caught.value)
    assert "'timm:<model>'" in str(caught.value)
    # A timm name under another namespace finds it under timm's
    with pytest.raises(UserError, match="did you mean timm:efficientnetv2_rw_t"):
        CATALOGUE.get("torchvision:efficientnetv2_rw_t")


def test_timm_entries_are_built_without_pretrained_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given timm's create_model, recorded instead of called
    import timm

    from mlscope.runtime.predictors.base import PredictorError
    from mlscope.runtime.predictors.pytorch.models import build_module

    calls: list[tuple[str, dict[str, Any]]] = []

    def create_model(name: str, **kwargs: Any) -> Any:
        calls.append((name, kwargs))
        return timm.models.resnet.ResNet(block=timm.models.resnet.BasicBlock, layers=(1, 1, 1, 1))

    monkeypatch.setattr(timm, "create_model", create_model)
    # When the PyTorch builder builds a timm entry, Then it asks for no pretrained weights
    build_module(CATALOGUE.manifest("timm:resnet18", "pytorch"))
    assert calls == [("resnet18", {"pretrained": False})]
    # And a name timm does not register is refused before timm is asked
    manifest = parse_manifest(
        {**CATALOGUE.manifest("timm:resnet18", "pytorch").to_dict(), "source": {"timm": "resnet19"}}, "x"
    )
    with pytest.raises(PredictorError, match="has no model 'resnet19'"):
        build_module(manifest)
    assert len(calls) == 1


def test_a_framework_measured_failing_is_left_out_and_the_refusal_says_why() -> None:
    # Given an entry whose ONNX export was measured failing (failures.json)
    failing = [entry for entry in ENTRIES if entry.unsupported]
    assert failing, "failures.json names at least one entry"
    entry = failing[0]
    framework, reason = next(iter(entry.unsupported.items()))
    # Then it is not listed for that framework, and asking for it says what was measured
    assert framework not in entry.frameworks
    assert entry not in CATALOGUE.find(framework=framework)
    with pytest.raises(UserError) as raised:
        CATALOGUE.manifest(entry.ref, framework)
    assert raised.value.field == "framework" and reason in raised.value.message
