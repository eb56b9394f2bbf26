"""Manifests that are valid: the shipped ones, the normalised document, its hash, sources, semver."""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import (
    FrameworkRequirement,
    Manifest,
    Source,
    Step,
    Weights,
    load_manifest,
    parse_manifest,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "manifests"
SHIPPED_DIR = Path(str(resources.files("mlscope.manifests")))
SHIPPED = sorted(SHIPPED_DIR.rglob("*.yaml"))
IMAGENET_MODELS = {
    "resnet18": (69.758, 89.078),
    "resnet50": (76.130, 92.862),
    "mobilenet_v2": (71.878, 90.286),
    "alexnet": (56.522, 79.066),
    "vgg16": (71.592, 90.382),
}
SHA_A = "a" * 64


def base_document() -> dict[str, Any]:
    return yaml.safe_load((DATA / "valid.yaml").read_text())


# ---- shipped manifests ------------------------------------------------------------------------


# The architectures each further framework ships (Keras has no ResNet-18 or AlexNet; Gluon's model
# zoo has no AlexNet manifest here; Caffe2 runs torchvision's ImageNet models converted to its nets;
# TensorRT builds engines from the ImageNet graphs ONNX Runtime runs, on an NVIDIA GPU). TensorFlow also
# ships MobileNetV3-Small, one of the networks benchmarks/runtimes.py compares, and so does JAX, with
# BERT-base. JAX's ViT-B/16 and tiny Llama are the catalogue's torchvision:vit_b_16 and hf:llama on the
# others.
OTHER_FRAMEWORKS = {
    "jax": {"resnet18", "resnet50", "mobilenet_v3_small", "vit_b_16", "llama_tiny", "bert_base"},
    "tensorflow": {"resnet50", "mobilenet_v2", "mobilenet_v3_small", "vgg16"},
    # TensorFlow's converted, and mlscope's digits CNN as a Keras model (docs/litert.md).
    "litert": {"resnet50", "mobilenet_v2", "mobilenet_v3_small", "vgg16", "digits_cnn"},
    "mxnet": {"resnet18", "resnet50", "mobilenet_v2", "vgg16"},
    "caffe2": {"resnet18", "resnet50", "mobilenet_v2", "vgg16"},
    "tensorrt": {"alexnet", "resnet18", "resnet50", "mobilenet_v2", "vgg16"},
}


def test_every_model_ships_for_pytorch_onnxruntime_and_openvino_and_the_common_ones_for_the_rest() -> None:
    # Given the shipped manifest files
    # When their keys are collected
    keys = {load_manifest(path).key for path in SHIPPED}
    # Then every model has a PyTorch, an ONNX Runtime and an OpenVINO manifest (OpenVINO runs the
    # graph ONNX Runtime does), ResNet-50 ships on every framework, and nothing else ships
    everywhere = ("pytorch", "onnxruntime", "openvino")
    expected = {(name, fw) for name in [*IMAGENET_MODELS, "bert_base"] for fw in everywhere}
    expected |= {(name, fw) for fw, names in OTHER_FRAMEWORKS.items() for name in names}
    assert keys == expected
    assert all(("resnet50", fw) in keys for fw in (*everywhere, *OTHER_FRAMEWORKS))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_manifest_loads_and_round_trips(path: Path) -> None:
    # Given a shipped manifest file
    manifest = load_manifest(path)
    # When its normalised document is parsed again (as a worker does with a job's snapshot)
    again = parse_manifest(manifest.to_dict(), origin=manifest.origin)
    # Then it is the same manifest, with the same hash, in the directory of its framework
    assert again == manifest
    assert again.sha256 == manifest.sha256
    assert manifest.framework.name == path.parent.name
    assert manifest.weights == Weights("random")


@pytest.mark.parametrize("name", sorted(IMAGENET_MODELS))
@pytest.mark.parametrize("framework", ["pytorch", "onnxruntime"])
def test_imagenet_manifests_say_what_torchvision_publishes(name: str, framework: str) -> None:
    # Given a shipped ImageNet classifier
    manifest = load_manifest(SHIPPED_DIR / framework / f"{name}.yaml")
    # Then it is torchvision's architecture with ImageNet preprocessing and published accuracy
    top1, top5 = IMAGENET_MODELS[name]
    assert manifest.source == Source("torchvision", name, {})
    assert (manifest.attributes["top1"], manifest.attributes["top5"]) == (top1, top5)
    assert manifest.attributes["license"] == "BSD-3-Clause"
    assert "random" in manifest.description
    (spec,) = manifest.inputs
    assert (spec.name, spec.shape, spec.dtype, spec.layout) == ("input", (3, 224, 224), "float32", "NCHW")
    assert [s.name for s in spec.steps] == ["decode", "resize", "center_crop", "normalize", "to_layout"]
    assert spec.steps[3].params["mean"] == [0.485, 0.456, 0.406]
    assert spec.steps[3].params["std"] == [0.229, 0.224, 0.225]
    assert manifest.outputs[0].steps == (Step("softmax", {"axis": -1}), Step("topk", {"k": 5}))
    assert manifest.dataset == {"name": "imagenet", "split": "validation"}


def test_bert_manifest_describes_synthetic_token_ids() -> None:
    # Given the shipped BERT manifest for ONNX Runtime
    manifest = load_manifest(SHIPPED_DIR / "onnxruntime" / "bert_base.yaml")
    # Then the source is a transformers model type with its options, and the input has a value range
    assert manifest.source == Source("transformers", "bert", {"config": {}, "output": "last_hidden_state"})
    (spec,) = manifest.inputs
    assert (spec.shape, spec.dtype, spec.layout, spec.value_range) == ((128,), "int64", "NT", (0.0, 30522.0))
    assert [o.name for o in manifest.outputs] == ["last_hidden_state"]


# ---- the normalised document and its hash ------------------------------------------------------


def test_hash_ignores_key_order_comments_and_spelled_out_defaults() -> None:
    # Given two files that say the same thing in different words (see their comments)
    # When both are loaded
    first = load_manifest(DATA / "valid.yaml")
    second = load_manifest(DATA / "valid_reordered.yaml")
    # Then their documents and hashes are equal, though their origins differ
    assert first.document == second.document
    assert first.sha256 == second.sha256
    assert first.origin != second.origin


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["inputs"][0].update(shape=[3, 32, 33]),
        lambda d: d.update(description="Another description."),
        lambda d: d["framework"].update(version=">=2.1"),
        lambda d: d["outputs"][0]["steps"][1].update(topk={"k": 4}),
    ],
    ids=["shape", "description", "framework-version", "step-param"],
)
def test_hash_changes_with_any_change_of_substance(change: Any) -> None:
    # Given the base document and a copy with one field changed
    document = base_document()
    changed = copy.deepcopy(document)
    change(changed)
    # When both are parsed
    # Then the hashes differ
    assert parse_manifest(document, "a").sha256 != parse_manifest(changed, "b").sha256


def test_hash_is_sha256_of_canonical_json() -> None:
    # Given a manifest
    manifest = parse_manifest(base_document(), "doc")
    # When its document is serialised canonically
    import hashlib
    import json

    canonical = json.dumps(manifest.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # Then the hash is that of the canonical JSON
    assert manifest.sha256 == hashlib.sha256(canonical.encode()).hexdigest()


def test_to_dict_is_a_copy_with_defaults_filled_in() -> None:
    # Given a manifest without description, dataset or attributes
    document = base_document()
    for key in ("description", "dataset", "attributes"):
        del document[key]
    manifest = parse_manifest(document, "doc")
    # When its snapshot is taken and then altered
    snapshot = manifest.to_dict()
    snapshot["name"] = "changed"
    # Then defaults are present and the manifest is unaffected
    assert (snapshot["description"], snapshot["dataset"], snapshot["attributes"]) == ("", None, {})
    assert manifest.to_dict()["name"] == "tiny_cnn"
    assert manifest.key == ("tiny_cnn", "pytorch")


def test_manifest_is_frozen() -> None:
    manifest = parse_manifest(base_document(), "doc")
    with pytest.raises(AttributeError):
        manifest.name = "other"


# ---- sources and weights -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"torchvision": "resnet18"}, Source("torchvision", "resnet18", {})),
        ({"timm": "convnext_tiny"}, Source("timm", "convnext_tiny", {})),
        ({"keras_applications": "ResNet50"}, Source("keras_applications", "ResNet50", {})),
        ({"gluon": "resnet18_v1"}, Source("gluon", "resnet18_v1", {})),
        ({"python": "pkg.module:factory"}, Source("python", "pkg.module:factory", {})),
        (
            {"python": {"factory": "pkg.module:factory", "kwargs": {"depth": 3}}},
            Source("python", "pkg.module:factory", {"kwargs": {"depth": 3}}),
        ),
        (
            {
                "transformers": {
                    "model_type": "bert",
                    "config": {"num_hidden_layers": 2},
                    "output": "pooler_output",
                }
            },
            Source("transformers", "bert", {"config": {"num_hidden_layers": 2}, "output": "pooler_output"}),
        ),
        (
            {"onnx": {"url": "https://example.org/m.onnx", "sha256": SHA_A.upper()}},
            Source("onnx", "https://example.org/m.onnx", {"sha256": SHA_A}),
        ),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else "",
)
def test_source_forms(source: dict[str, Any], expected: Source) -> None:
    # Given the base document with another source
    document = {**base_document(), "source": source}
    # When it is parsed
    # Then the source is normalised to kind, target and options
    assert parse_manifest(document, "doc").source == expected


def test_python_source_without_kwargs_hashes_like_the_short_form() -> None:
    document = base_document()
    long_form = {**document, "source": {"python": {"factory": "my_models.tiny:build"}}}
    assert parse_manifest(long_form, "a").sha256 == parse_manifest(document, "b").sha256


def test_relative_onnx_path_is_resolved_against_the_manifest_directory(tmp_path: Path) -> None:
    # Given a manifest file whose ONNX source is a path relative to the file
    document = {**base_document(), "source": {"onnx": {"url": "graphs/m.onnx", "sha256": SHA_A}}}
    path = tmp_path / "sub" / "m.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(document))
    # When it is loaded
    manifest = load_manifest(path)
    # Then the target is the absolute path next to the manifest, and survives a round trip
    assert manifest.source.target == str(tmp_path / "sub" / "graphs" / "m.onnx")
    assert parse_manifest(manifest.to_dict(), manifest.origin).source == manifest.source


def test_weights_from_a_url() -> None:
    document = {**base_document(), "weights": {"url": "https://example.org/w.pt", "sha256": SHA_A}}
    assert parse_manifest(document, "doc").weights == Weights("url", "https://example.org/w.pt", SHA_A)


def test_python_source_is_accepted_from_files() -> None:
    # Given a manifest naming a Python factory (valid.yaml does), loaded from a file
    manifest: Manifest = load_manifest(DATA / "valid.yaml")
    # Then it is accepted: code references are refused only with allow_code=False
    assert manifest.source.kind == "python"


# ---- framework version constraints -------------------------------------------------------------


@pytest.mark.parametrize(
    ("constraint", "installed", "allowed"),
    [
        (">=2.0", "2.14.1+cu130", True),
        (">=2.0,<3", "2.14.1+cu130", True),
        (">=2.0,<3", "3.0.0", False),
        (">=2.0", "1.13.1+cu117", False),
        ("^1.16", "1.20.1", True),
        ("^1.16", "2.0.0", False),
        ("~2.1", "2.1.5", True),
        ("~2.1", "2.2.0", False),
        ("*", "0.1", True),
        (">=2.6", "2.6.0.dev20241001+cpu", True),
        ("==2.14.1", "2.14.1+cu130", True),
        ("<2.14.1", "2.14.1+cu130", False),
    ],
)
def test_framework_requirement_allows(constraint: str, installed: str, allowed: bool) -> None:
    # Given a constraint and an installed version string as the framework reports it
    # Then the local part is ignored and the release is compared
    assert FrameworkRequirement("pytorch", constraint).allows(installed) is allowed


def test_framework_requirement_rejects_an_installed_version_that_is_not_one() -> None:
    with pytest.raises(UserError, match="installed version 'unknown' is not a version number"):
        FrameworkRequirement("pytorch", ">=2.0").allows("unknown")


def test_framework_version_defaults_to_any() -> None:
    document = {**base_document(), "framework": {"name": "onnxruntime"}}
    requirement = parse_manifest(document, "doc").framework
    assert requirement == FrameworkRequirement("onnxruntime", "*")
    assert requirement.allows("0.0.1")


@pytest.mark.parametrize(
    "name", ["resnet18", "bert_base", "torchvision:resnet18", "hf:deberta-v2", "a.b:c-d_1"]
)
def test_a_name_may_carry_one_namespace_prefix(name: str) -> None:
    # Given a manifest named plainly or with one namespace (how catalogue models are named)
    document = {**base_document(), "name": name}
    # When it is validated
    # Then the name is kept as written
    assert parse_manifest(document, "test").name == name


@pytest.mark.parametrize("name", ["a:b:c", "Bad", "torchvision:", ":resnet18", "hf:Bert", "x:-y"])
def test_a_name_with_two_namespaces_or_capitals_is_refused(name: str) -> None:
    document = {**base_document(), "name": name}
    with pytest.raises(UserError, match="at most one 'namespace:' prefix") as caught:
        parse_manifest(document, "test")
    assert caught.value.field == "name"
