"""What a run records of a model given by a path: the path made absolute (a factory's file too), so a
rerun from another directory reads the same file; and what a rerun says when the file is gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlscope.cli.rerun import _check_model_file
from mlscope.contract.errors import UserError
from mlscope.registry.resolvers.forms import absolute_reference, reference_path


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding model.onnx, net.py and a Hugging Face directory."""
    for name in ("model.onnx", "net.py"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "tiny-bert").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_relative_paths_are_recorded_absolute(here: Path) -> None:
    assert absolute_reference("./model.onnx") == str(here / "model.onnx")
    assert absolute_reference("model.onnx") == str(here / "model.onnx")
    assert absolute_reference("./net.py:make_model") == f"{here / 'net.py'}:make_model"
    assert absolute_reference("tiny-bert/") == str(here / "tiny-bert")


@pytest.mark.parametrize(
    "ref", ["resnet18", "torchvision:resnet18", "sha256:" + "ab" * 32, "./missing.onnx", "/abs/model.onnx"]
)
def test_names_uploads_and_paths_to_nothing_are_kept_as_given(here: Path, ref: str) -> None:
    assert absolute_reference(ref) == ref


def test_a_reference_reads_a_path_only_when_it_is_one(here: Path) -> None:
    assert reference_path("./net.py:make_model") == Path("net.py")
    assert reference_path("resnet18") is None and reference_path("sha256:" + "ab" * 32) is None


def test_a_rerun_of_a_file_recorded_relative_says_where_it_looked(here: Path) -> None:
    # Given an evaluation recorded (before paths were made absolute) with a relative path to nothing here
    recorded = {"id": "0123456789abcdef"}
    # When it would be rerun, Then one line names the absolute place looked at and the recorded path
    with pytest.raises(UserError) as raised:
        _check_model_file(recorded, "./gone.onnx")
    assert str(raised.value) == (
        f"cannot rerun 01234567: its model file is not at {here / 'gone.onnx'} "
        "(recorded as ./gone.onnx, a path relative to this directory)"
    )
    # ... and a file that is there, or a name, passes
    _check_model_file(recorded, "./model.onnx")
    _check_model_file(recorded, "resnet18")
