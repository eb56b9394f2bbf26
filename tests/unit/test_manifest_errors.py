"""Invalid manifests: every error names the file, the field as a dotted path, and what was expected."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import ManifestError, load_manifest, parse_manifest

DATA = Path(__file__).resolve().parents[1] / "data" / "manifests"
SHA_A = "a" * 64

Mutation = Callable[[dict[str, Any]], None]


def base_document() -> dict[str, Any]:
    return yaml.safe_load((DATA / "valid.yaml").read_text())


def write(tmp_path: Path, document: Any, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False))
    return path


def input_steps(document: dict[str, Any]) -> list[Any]:
    return document["inputs"][0]["steps"]


CASES: list[tuple[str, Mutation, str, str]] = [
    ("missing-required", lambda d: d.pop("task"), "task", "required field is missing"),
    (
        "missing-nested",
        lambda d: d["inputs"][0].pop("dtype"),
        "inputs.0.dtype",
        "required field is missing",
    ),
    ("wrong-type-list", lambda d: d["inputs"][0].update(shape="3x32x32"), "inputs.0.shape", "must be a list"),
    (
        "wrong-type-int",
        lambda d: d["inputs"][0].update(shape=[3, "a", 32]),
        "inputs.0.shape.1",
        "must be an integer",
    ),
    ("wrong-type-mapping", lambda d: d.update(framework="pytorch"), "framework", "must be a mapping"),
    ("version-number", lambda d: d.update(version=1.0), "version", "must be a string; quote numbers"),
    (
        "bad-dtype",
        lambda d: d["inputs"][0].update(dtype="float33"),
        "inputs.0.dtype",
        "must be one of float32, float16, bfloat16, float64, int64, int32, int8, uint8, bool; got 'float33'",
    ),
    ("shape-zero", lambda d: d["inputs"][0].update(shape=[3, 0, 32]), "inputs.0.shape.1", "must be ≥ 1"),
    ("shape-empty", lambda d: d["inputs"][0].update(shape=[]), "inputs.0.shape", "at least one dimension"),
    ("bad-task", lambda d: d.update(task="classify"), "task", "must be one of image_classification"),
    ("bad-name", lambda d: d.update(name="Tiny CNN"), "name", "lowercase"),
    (
        "unknown-step",
        lambda d: input_steps(d).insert(0, "detokenize"),
        "inputs.0.steps.0",
        "unknown preprocessing step 'detokenize'; known preprocessing steps: "
        "cast, center_crop, crop, decode, normalize, resize, to_layout, tokenize",
    ),
    (
        "crop-size-and-ratio",
        lambda d: input_steps(d)[2].update(center_crop={"size": 32, "ratio": 0.875}),
        "inputs.0.steps.2.center_crop.size",
        "give exactly one of size (pixels) or ratio (of the shorter side); both are set",
    ),
    (
        "crop-ratio-range",
        lambda d: input_steps(d)[2].update(center_crop={"ratio": 1.5}),
        "inputs.0.steps.2.center_crop.ratio",
        "must be > 0 and ≤ 1",
    ),
    (
        "crop-position",
        lambda d: input_steps(d).__setitem__(2, {"crop": {"size": 32, "position": "bottom"}}),
        "inputs.0.steps.2.crop.position",
        "must be one of center, top_left",
    ),
    (
        "center-crop-position",
        lambda d: input_steps(d)[2].update(center_crop={"size": 32, "position": "top_left"}),
        "inputs.0.steps.2.center_crop.position",
        "unknown parameter; center_crop takes: size, ratio",
    ),
    (
        "step-of-other-stage",
        lambda d: input_steps(d).append("softmax"),
        "inputs.0.steps.5",
        "'softmax' is a postprocessing step; preprocessing steps: cast",
    ),
    (
        "unknown-post-step",
        lambda d: d["outputs"][0]["steps"].append("sigmoid"),
        "outputs.0.steps.2",
        "known postprocessing steps: argmax, softmax, topk",
    ),
    (
        "bad-step-param-type",
        lambda d: input_steps(d)[3]["normalize"].update(mean=["a", 0.5, 0.5]),
        "inputs.0.steps.3.normalize.mean.0",
        "must be a number",
    ),
    (
        "bad-step-param-value",
        lambda d: input_steps(d)[3]["normalize"].update(std=[0.2, 0, 0.2]),
        "inputs.0.steps.3.normalize.std",
        "must be non-zero",
    ),
    (
        "step-param-lengths",
        lambda d: input_steps(d)[3]["normalize"].update(std=[0.2]),
        "inputs.0.steps.3.normalize.std",
        "one value per channel, as mean does (3 values)",
    ),
    (
        "missing-step-param",
        lambda d: d["outputs"][0]["steps"].__setitem__(1, "topk"),
        "outputs.0.steps.1.topk.k",
        "required field is missing",
    ),
    (
        "step-param-range",
        lambda d: d["outputs"][0]["steps"][1].update(topk={"k": 0}),
        "outputs.0.steps.1.topk.k",
        "≥ 1",
    ),
    (
        "unknown-step-param",
        lambda d: input_steps(d)[1]["resize"].update(antialias=True),
        "inputs.0.steps.1.resize.antialias",
        "unknown parameter; resize takes: size, interpolation",
    ),
    (
        "bad-resize-size",
        lambda d: input_steps(d)[1]["resize"].update(size=[1, 2, 3]),
        "inputs.0.steps.1.resize.size",
        "[height, width]",
    ),
    (
        "unknown-top-level-key",
        lambda d: d.update(colour="red"),
        "colour",
        "unknown field; expected one of: name, version, task, description, framework",
    ),
    (
        "unknown-nested-key",
        lambda d: d["inputs"][0].update(batch=8),
        "inputs.0.batch",
        "unknown field; expected one of: name, shape",
    ),
    (
        "unknown-source-kind",
        lambda d: d.update(source={"tensorflow_hub": "x"}),
        "source.tensorflow_hub",
        "unknown source kind",
    ),
    (
        "two-sources",
        lambda d: d.update(source={"torchvision": "a", "gluon": "b"}),
        "source",
        "single-key mapping",
    ),
    (
        "timm-hub-reference",
        lambda d: d.update(source={"timm": "hf-hub:timm/resnet18.a1_in1k"}),
        "source.timm",
        "must be a model name from timm",
    ),
    (
        "bad-factory",
        lambda d: d.update(source={"python": "not a reference"}),
        "source.python.factory",
        "must be 'pkg.module:factory'",
    ),
    (
        "onnx-sha",
        lambda d: d.update(source={"onnx": {"url": "m.onnx", "sha256": "abc"}}),
        "source.onnx.sha256",
        "64 hexadecimal digits; got 'abc'",
    ),
    (
        "weights-word",
        lambda d: d.update(weights="pretrained"),
        "weights",
        "must be 'random' or a mapping {url, sha256}",
    ),
    (
        "weights-no-sha",
        lambda d: d.update(weights={"url": "https://x/w.pt"}),
        "weights.sha256",
        "required field is missing",
    ),
    (
        "framework-version",
        lambda d: d["framework"].update(version="two"),
        "framework.version",
        "version constraint such as",
    ),
    (
        "layout-length",
        lambda d: d["inputs"][0].update(layout="NHW"),
        "inputs.0.layout",
        "plus N (4 letters); got 'NHW'",
    ),
    ("layout-batch", lambda d: d["inputs"][0].update(layout="CHWN"), "inputs.0.layout", "starting with N"),
    (
        "value-range-order",
        lambda d: d["inputs"][0].update(value_range=[5, 1]),
        "inputs.0.value_range",
        "low < high",
    ),
    (
        "value-range-length",
        lambda d: d["inputs"][0].update(value_range=[5]),
        "inputs.0.value_range",
        "[low, high]",
    ),
    (
        "duplicate-input",
        lambda d: d["inputs"].append(dict(d["inputs"][0])),
        "inputs.1.name",
        "must be unique; 'image' is used twice",
    ),
    ("no-outputs", lambda d: d.update(outputs=[]), "outputs", "at least one output"),
    (
        "dataset-name",
        lambda d: d.update(dataset={"split": "test"}),
        "dataset.name",
        "required field is missing",
    ),
    (
        "top1-range",
        lambda d: d["attributes"].update(top1=101),
        "attributes.top1",
        "percentage between 0 and 100",
    ),
    (
        "attributes-not-json",
        lambda d: d["attributes"].update(checked={"on": {1, 2}}),
        "attributes.checked.on",
        "must be a string, number",
    ),
]


@pytest.mark.parametrize(("mutate", "field", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error_names_file_field_and_expectation(
    tmp_path: Path, mutate: Mutation, field: str, expected: str
) -> None:
    # Given a manifest file with one mistake
    document = base_document()
    mutate(document)
    path = write(tmp_path, document)
    # When it is loaded
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    # Then one line names the file, the dotted field and what was expected
    lines = str(caught.value).splitlines()
    assert any(line.startswith(f"{path}: {field}: ") and expected in line for line in lines), lines
    assert caught.value.origin == str(path)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    # Given a manifest with three unrelated mistakes
    document = base_document()
    document["task"] = "classify"
    document["inputs"][0]["dtype"] = "float33"
    document["extra"] = 1
    # When it is parsed
    with pytest.raises(ManifestError) as caught:
        parse_manifest(document, "request body")
    # Then each has its own line, in document order, and the error is a UserError naming the first field
    fields = [path for path, _ in caught.value.problems]
    assert fields == ["task", "inputs.0.dtype", "extra"]
    assert len(str(caught.value).splitlines()) == 3
    assert isinstance(caught.value, UserError)
    assert caught.value.field == "task"


def test_python_source_is_refused_when_code_is_not_allowed() -> None:
    # Given a manifest naming a Python factory, arriving over the network
    document = base_document()
    # When it is parsed with allow_code=False
    with pytest.raises(ManifestError) as caught:
        parse_manifest(document, "request body", allow_code=False)
    # Then the source field is refused, saying why
    assert str(caught.value) == (
        "request body: source.python: code references are not accepted here: "
        "no code strings travel over the wire; got 'my_models.tiny:build'"
    )


@pytest.mark.parametrize("location", ["/srv/models/m.onnx", "file:///srv/models/m.onnx", "m.onnx"])
def test_local_files_are_refused_when_code_is_not_allowed(location: str) -> None:
    # Given a manifest from the network pointing at a file on the server
    document = {**base_document(), "source": {"onnx": {"url": location, "sha256": SHA_A}}}
    # When it is parsed with allow_code=False
    with pytest.raises(ManifestError, match=r"source\.onnx\.url: must be an http:// or https:// URL here"):
        parse_manifest(document, "request body", allow_code=False)


def test_remote_onnx_is_accepted_when_code_is_not_allowed() -> None:
    document = base_document()
    document["source"] = {"onnx": {"url": "https://example.org/m.onnx", "sha256": SHA_A}}
    assert parse_manifest(document, "request body", allow_code=False).source.kind == "onnx"


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    # Given a file whose third line breaks YAML
    path = write(tmp_path, "name: tiny\nversion: '1'\ninputs: [a, b\ntask: other\n")
    # When it is loaded
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    # Then the message names the file and a line number
    assert str(caught.value).startswith(f"{path}: line ")
    assert "not valid YAML" in str(caught.value)


def test_duplicate_yaml_key_is_an_error_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "name: tiny\ntask: other\nname: other\n")
    with pytest.raises(ManifestError, match=r"line 3, column 1: not valid YAML: duplicate key 'name'"):
        load_manifest(path)


def test_yaml_anchors_and_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    # Given a manifest that reuses a mapping through an anchor and overrides one merged key
    document = base_document()
    text = yaml.safe_dump(document, sort_keys=False).replace(
        "framework:\n  name: pytorch\n", "framework: &fw\n  name: pytorch\n"
    )
    text += "x-unused: {<<: *fw, name: other}\n"
    path = write(tmp_path, text)
    # When it is loaded, the only complaint is the unknown key, not a duplicate
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert [p for p, _ in caught.value.problems] == ["x-unused"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("- name: tiny\n", "got a list"), ("", "got nothing (the file is empty)"), ("just text\n", "got a str")],
)
def test_file_that_is_not_a_mapping_says_so(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert (
        str(caught.value) == f"{path}: must be a mapping of manifest fields (name, version, ...); {expected}"
    )


def test_unreadable_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    with pytest.raises(ManifestError, match=f"^{path}: cannot read the manifest"):
        load_manifest(path)
