"""Caffe2's registration, manifests and pins, without Caffe2: it is known and runnable (where a
Python 3.9 environment or image holds torch 1.10.2), its manifests ask for torch 1.10.x, and its
pins and image say so. The real predictor runs in tests/integration/test_caffe2.py."""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from mlscope.cli import main
from mlscope.contract.errors import UserError
from mlscope.contract.plugins import entry_points
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.frameworks import check_available, check_runnable, get_framework
from tests.conftest import REPO

IMAGES = REPO / "ops" / "images"


def test_caffe2_is_registered_as_runnable_from_torchvision_sources() -> None:
    # Given the registry, When Caffe2 is looked up
    spec = get_framework("caffe2")
    # Then it can run, from torchvision sources, and says how to get it
    assert spec.unavailable is None and check_runnable(spec) is spec
    assert spec.import_name == "caffe2" and spec.distributions == ("torch",)
    assert spec.sources == frozenset({"torchvision"})
    assert (
        "mlscope env create caffe2" in spec.install_hint and "mlscope image build caffe2" in spec.install_hint
    )


def test_caffe2_accepts_torch_110_only_and_says_what_is_wrong_otherwise() -> None:
    spec = get_framework("caffe2")
    constraint = ModelRegistry.load().get("resnet18", "caffe2").framework.version
    # Given the version a Caffe2 environment holds, Then the manifest's constraint accepts it
    assert check_available(spec, constraint, "torchvision", version="1.10.2+cu102") == "1.10.2+cu102"
    # And a torch without the Caffe2 extension (1.11 on) is refused, naming the constraint
    for newer in ("1.12.1", "2.14.1+cu130"):
        with pytest.raises(UserError, match=r"needs caffe2 >=1\.10,<1\.11"):
            check_available(spec, constraint, "torchvision", version=newer)
    # And nothing to run it: refused with what to make
    with pytest.raises(UserError, match=r"not installed here.*mlscope env create caffe2"):
        check_available(spec, constraint, "torchvision", version=None)
    # And a source it cannot convert is refused
    with pytest.raises(UserError, match="cannot run a model whose source is 'onnx'"):
        check_available(spec, constraint, "onnx", version="1.10.2")


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_caffe2_manifests_match_pytorchs_model_and_inputs(name: str) -> None:
    # Given the shipped manifests
    registry = ModelRegistry.load()
    caffe2, pytorch = registry.get(name, "caffe2"), registry.get(name, "pytorch")
    # Then the Caffe2 one builds the same torchvision model with the same inputs and outputs
    assert (caffe2.source.kind, caffe2.source.target) == ("torchvision", name)
    assert caffe2.source == pytorch.source and caffe2.weights == pytorch.weights
    assert caffe2.inputs == pytorch.inputs and caffe2.outputs == pytorch.outputs
    # And the input size the nets are converted for is the one the manifest fixes
    assert caffe2.inputs[0].shape == (3, 224, 224)


def test_frameworks_json_lists_caffe2_as_known_with_how_to_get_it(capsys: pytest.CaptureFixture[str]) -> None:
    # When the frameworks are listed
    main(["frameworks", "--json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    (row,) = [r for r in rows if r["name"] == "caffe2"]
    # Then Caffe2 is known, runs torchvision sources, and is available exactly when it is installed
    assert row["sources"] == ["torchvision"]
    assert row["available"] is (row["installed"] is not None)
    if not row["available"]:
        assert not row["reason"].startswith("unavailable") and "mlscope env create caffe2" in row["reason"]


def test_the_pins_give_torch_1102_on_python_39_and_the_image_builds_on_39() -> None:
    # Given the Caffe2 pins and Dockerfile
    pins = dict(
        line.split("==", 1)
        for line in (IMAGES / "caffe2.requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    dockerfile = (IMAGES / "caffe2.Dockerfile").read_text()
    # Then they pin the last torch with the Caffe2 extension and what caffe2.python imports undeclared
    assert pins["torch"] == "1.10.2" and pins["torchvision"] == "0.11.3" and pins["onnx"] == "1.10.2"
    assert pins["protobuf"].startswith("3.") and {"future", "six"} <= set(pins)
    assert int(pins["numpy"].split(".")[1]) < 24  # torch 1.10 was built against numpy < 1.24
    # And the image's default base is a Python 3.9 one, and mlscope goes in despite its >= 3.10
    assert "ARG BASE=python:3.9-slim" in dockerfile and "--ignore-requires-python" in dockerfile
    # And the runtime pins give marshmallow a release that installs on 3.9 (4.1 on need 3.10+)
    runtime = (IMAGES / "runtime.requirements.txt").read_text()
    assert 'marshmallow==4.0.1; python_version < "3.11"' in runtime


def test_plugins_are_read_from_both_entry_point_apis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.9's `entry_points()` (a dict of groups) cannot run in this 3.11 interpreter, so it is
    replaced by one of that shape; the real 3.9 call runs in tests/integration/test_caffe2.py."""
    # Given the 3.10+ API, Then the group's entry points are those `entry_points(group=)` gives
    assert list(entry_points("mlscope.frameworks")) == list(
        importlib.metadata.entry_points(group="mlscope.frameworks")
    )
    # Given a 3.9-style dict of groups, Then the group is looked up in it, and a missing one is empty
    marker = object()
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda: {"mlscope.frameworks": [marker]})
    assert list(entry_points("mlscope.frameworks")) == [marker]
    assert list(entry_points("absent")) == []
