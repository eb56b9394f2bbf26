"""`mlscope parity MODEL --against REF`: a user's own conversion checked against its source, for
real: an ONNX file exported here from a Python factory, run by ONNX Runtime, and the factory run by
PyTorch, on the same seeded inputs (child processes, real frameworks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_run_cli import mlscope

pytestmark = pytest.mark.slow

FACTORY = """\
import torch


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def reseeded():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """net.py, model.onnx exported from its make_model (inputs and outputs renamed, as exports do),
    make_model's weights as a state_dict file, and wide.onnx, a model of 17 inputs."""
    import importlib.util

    import torch

    folder = tmp_path_factory.mktemp("conversion")
    (folder / "net.py").write_text(FACTORY)
    spec = importlib.util.spec_from_file_location("conversion_factory", folder / "net.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net = module.make_model().eval()
    torch.onnx.export(
        net,
        (torch.randn(1, 16),),
        str(folder / "model.onnx"),
        input_names=["features"],
        output_names=["logits"],
        dynamic_axes={"features": {0: "batch"}, "logits": {0: "batch"}},
        dynamo=False,
    )
    torch.save(net.state_dict(), folder / "weights.pt")
    wide = {"input_names": ["x"], "output_names": ["y"], "dynamic_axes": {"x": {0: "batch"}}, "dynamo": False}
    torch.onnx.export(torch.nn.Linear(17, 4), (torch.randn(1, 17),), str(folder / "wide.onnx"), **wide)
    return folder


def parity(env: dict[str, str], folder: Path, *args: str):
    return mlscope(env, "parity", str(folder / "model.onnx"), *args, "--json")


def test_an_export_is_the_same_as_the_factory_it_came_from(folder: Path, mlscope_env: dict[str, str]) -> None:
    # Given an ONNX file exported from net.py:make_model (its output renamed "logits")
    # When it is compared with the factory, whose inputs are taken from the graph
    done = parity(mlscope_env, folder, "--against", f"{folder / 'net.py'}:make_model")
    # Then both ran, ONNX Runtime against PyTorch, output by output, and they agree
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "same"
    assert report["reference"]["framework"] == "onnxruntime"
    assert report["reference"]["model"] == str(folder / "model.onnx")
    (row,) = report["frameworks"]
    assert (row["framework"], row["model"]) == ("pytorch", f"{folder / 'net.py'}:make_model")
    assert set(row["outputs"]) == {"logits"} and row["count"] == 64
    assert row["max_abs"] < 1e-5


def test_a_different_source_is_caught_and_its_weights_make_it_the_same(
    folder: Path, mlscope_env: dict[str, str]
) -> None:
    # Given a factory seeded differently from the one the export came from
    factory = f"{folder / 'net.py'}:reseeded"
    # Then its outputs differ, far outside the tolerance, and the exit code is 1
    done = parity(mlscope_env, folder, "--against", factory)
    assert done.returncode == 1, done.stderr
    (row,) = json.loads(done.stdout)["frameworks"]
    assert row["verdict"] == "different" and row["max_abs"] > 0.01
    # And given the export's own weights, the same factory gives the same answers
    done = parity(mlscope_env, folder, "--against", factory, "--against-weights", str(folder / "weights.pt"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"] == "same"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--against-weights", "weights.pt"], "--against-weights is the --against model's"),
        (["--against", "{folder}/wide.onnx"], "take different inputs (16 float32 against 17 float32)"),
        (["--against", "{folder}/net.py:make_model", "-f", "onnxruntime,pytorch,tensorflow"], "at most two"),
        (["--against", "{folder}/nothing.py:make_model"], "no such file"),
    ],
)
def test_a_comparison_parity_cannot_make_is_one_line_and_exit_2(
    folder: Path, mlscope_env: dict[str, str], args: list[str], message: str
) -> None:
    done = parity(mlscope_env, folder, *(arg.format(folder=folder) for arg in args))
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("mlscope: error:")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "Traceback" not in done.stderr
