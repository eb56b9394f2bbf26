"""Model references end to end: an ONNX file, a Python factory, a Hugging Face directory, a catalogue
name with a config, a checkpoint; each run for real by `mlscope run` (child processes, real
frameworks, a real SQLite store), and each bad input refused with one line and exit code 2.

The model files are made here (torch.onnx.export, save_pretrained, torch.save): nothing downloads.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from mlscope.contract.manifest import parse_manifest_text
from tests.integration.test_run_cli import FAST, mlscope, ran_valid

pytestmark = pytest.mark.slow

FACTORY = """\
import torch


def make_model(width=32):
    return torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))


def not_a_module():
    return 3


def raises():
    raise RuntimeError("this factory needs a GPU")
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of model files: ONNX graphs (dynamic batch; fixed batch; dynamic spatial axes), a
    factory module with a checkpoint of its model, and a small BERT saved by save_pretrained."""
    import importlib.util

    import torch
    import transformers

    folder = tmp_path_factory.mktemp("models")
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 10),
    ).eval()
    example = (torch.randn(1, 3, 32, 32),)
    names = {"input_names": ["image"], "output_names": ["logits"], "dynamo": False}
    batch = {"image": {0: "batch"}, "logits": {0: "batch"}}
    torch.onnx.export(net, example, str(folder / "small.onnx"), dynamic_axes=batch, **names)
    torch.onnx.export(net, example, str(folder / "fixed.onnx"), **names)
    spatial = {"image": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}}
    torch.onnx.export(net, example, str(folder / "spatial.onnx"), dynamic_axes=spatial, **names)
    (folder / "truncated.onnx").write_bytes((folder / "small.onnx").read_bytes()[:700])
    (folder / "garbage.onnx").write_bytes(b"not a protobuf at all")
    (folder / "net.py").write_text(FACTORY)
    spec = importlib.util.spec_from_file_location("factory_for_weights", folder / "net.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.save(module.make_model().state_dict(), folder / "net.pt")
    torch.save(module.make_model(width=8).state_dict(), folder / "other.pt")
    config = transformers.BertConfig(
        num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=500
    )
    transformers.BertModel(config).save_pretrained(folder / "tiny-bert")
    (folder / "no-config").mkdir()
    (folder / "no-config" / "model.safetensors").write_bytes(b"")
    return folder


def run_ok(env: dict[str, str], *args: str) -> list[dict]:
    results = ran_valid(mlscope(env, "run", *args, "--json", *FAST))
    assert results and all(r["status"] == "succeeded" for r in results), results
    return results


def stored_manifest(env: dict[str, str], evaluation_id: str) -> dict:
    database = env["MLSCOPE_STORE_URL"].removeprefix("sqlite:///")
    with sqlite3.connect(database) as connection:
        (text,) = connection.execute(
            "SELECT manifest FROM evaluations WHERE id = ?", (evaluation_id,)
        ).fetchone()
    return json.loads(text)


def test_an_onnx_file_runs_with_its_inputs_read_from_the_graph(
    models: Path, mlscope_env: dict[str, str]
) -> None:
    # Given an ONNX file with a dynamic batch axis
    # When it is run by its path, at two batch sizes
    (result,) = run_ok(mlscope_env, str(models / "small.onnx"), "-b", "1,3")
    # Then ONNX Runtime ran it, named after the file, at both sizes
    assert result["framework"]["name"] == "onnxruntime"
    assert result["model"]["name"] == "small"
    assert [m["batch_size"] for m in result["measurements"]] == [1, 3]
    # And the stored manifest names the file by its SHA-256 and reads the input from the graph
    manifest = stored_manifest(mlscope_env, result["id"])
    assert manifest["source"]["onnx"]["url"] == str((models / "small.onnx").resolve())
    assert (
        manifest["source"]["onnx"]["sha256"]
        == hashlib.sha256((models / "small.onnx").read_bytes()).hexdigest()
    )
    image = manifest["inputs"][0]
    assert (image["name"], image["shape"], image["dtype"]) == ("image", [3, 32, 32], "float32")
    # And `mlscope models show` prints the very manifest that ran (same SHA-256 once parsed)
    shown = mlscope(mlscope_env, "models", "show", str(models / "small.onnx"))
    assert shown.returncode == 0, shown.stderr
    assert parse_manifest_text(shown.stdout, "shown").sha256 == result["model"]["manifest_sha256"]


def test_a_model_exported_by_torchs_default_exporter_runs(
    tmp_path: Path, mlscope_env: dict[str, str]
) -> None:
    # Given a model exported as the README exports one: torch's default (dynamo) exporter, which needs
    # onnxscript (in the pytorch extra), a dynamic batch, the weights in the one file
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    (tmp_path / "exported").mkdir()
    path = tmp_path / "exported" / "model.onnx"
    torch.onnx.export(
        net, (torch.randn(1, 16),), str(path), input_names=["x"], output_names=["y"],
        dynamic_shapes=({0: "batch"},), external_data=False,
    )  # fmt: skip
    # When it is run at two batch sizes, Then both ran, from that one file
    (result,) = run_ok(mlscope_env, str(path), "-b", "1,3")
    assert [m["batch_size"] for m in result["measurements"]] == [1, 3]
    assert [p.name for p in path.parent.iterdir()] == ["model.onnx"]


def test_dynamic_axes_take_their_sizes_from_input_shape(models: Path, mlscope_env: dict[str, str]) -> None:
    # Given a graph whose height and width are dynamic
    # When it is run without sizes, the message says which input needs them, and how
    bare = mlscope(mlscope_env, "run", str(models / "spatial.onnx"))
    assert bare.returncode == 2
    assert "input 'image' has dynamic axes" in bare.stderr and "--input-shape image=" in bare.stderr
    # When they are given, it runs at that size
    (result,) = run_ok(mlscope_env, str(models / "spatial.onnx"), "--input-shape", "image=1x3x40x24")
    assert stored_manifest(mlscope_env, result["id"])["inputs"][0]["shape"] == [3, 40, 24]


def test_a_python_factory_runs_on_pytorch_and_onnx_runtime_with_a_checkpoint(
    models: Path, mlscope_env: dict[str, str]
) -> None:
    # Given a factory file and a checkpoint of its model
    ref = f"{models / 'net.py'}:make_model"
    # When it is run with its input shape and the checkpoint, on both frameworks
    results = run_ok(
        mlscope_env,
        ref,
        "--input-shape",
        "1x16",
        "--weights",
        str(models / "net.pt"),
        "-f",
        "pytorch,onnxruntime",
    )
    # Then both ran the factory's module (ONNX Runtime through the export), with the checkpoint named
    assert [r["framework"]["name"] for r in results] == ["pytorch", "onnxruntime"]
    assert {r["model"]["name"] for r in results} == {"net.make_model"}
    manifest = stored_manifest(mlscope_env, results[0]["id"])
    assert manifest["source"]["python"]["factory"] == f"{(models / 'net.py').resolve()}:make_model"
    assert manifest["weights"]["url"] == str((models / "net.pt").resolve())
    assert manifest["inputs"][0]["shape"] == [16]


def test_a_hugging_face_directory_and_a_configured_catalogue_model_run(
    models: Path, mlscope_env: dict[str, str]
) -> None:
    # Given a directory save_pretrained wrote, and a catalogue architecture with a smaller config
    # When each is run on both frameworks
    saved = run_ok(mlscope_env, str(models / "tiny-bert"), "-f", "pytorch,onnxruntime")
    configured = run_ok(
        mlscope_env, "hf:bert", "-f", "onnxruntime",
        *("--config", "num_hidden_layers=1", "--config", "hidden_size=32", "--config", "vocab_size=300"),
        *("--config", "num_attention_heads=2", "--config", "intermediate_size=64"),
    )  # fmt: skip
    # Then the directory's model ran from its own files, token ids inside its vocabulary
    manifest = stored_manifest(mlscope_env, saved[0]["id"])
    assert manifest["source"]["transformers"]["directory"] == str((models / "tiny-bert").resolve())
    assert manifest["inputs"][0]["value_range"] == [0.0, 500.0]
    assert {r["model"]["name"] for r in saved} == {"tiny-bert"}
    # And the catalogue model ran with the given config, which its manifest records
    manifest = stored_manifest(mlscope_env, configured[0]["id"])
    assert manifest["source"]["transformers"]["config"]["num_hidden_layers"] == 1
    assert manifest["inputs"][0]["value_range"] == [0.0, 300.0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["./missing.onnx"], "missing.onnx: no such file"),
        (["./truncated.onnx"], "truncated.onnx: not a valid ONNX model"),
        (["./garbage.onnx"], "garbage.onnx: not a valid ONNX model"),
        (["./small.onnx", "--input-shape", "image=1x4x32x32"], "dimension 1 is 3 in the graph"),
        (
            ["./small.onnx", "--input-shape", "pixels=1x3x32x32"],
            "has no input 'pixels'; its inputs are: image",
        ),
        (["./fixed.onnx", "-b", "2"], "batch axis is fixed at 1"),
        (["./net.py:make_model"], "a Python factory's inputs cannot be read from it"),
        (["./net.py:make_model", "--input-shape", "1x17"], "the module fails on inputs of shape input 1x17"),
        (["./net.py:not_a_module", "--input-shape", "1x16"], "returned int, not a torch.nn.Module"),
        (["./net.py:raises", "--input-shape", "1x16"], "raised RuntimeError: this factory needs a GPU"),
        (["./net.py:missing", "--input-shape", "1x16"], "has no 'missing'"),
        (["./no-config"], "no config.json"),
        (["./net.pt"], "a model file must be an ONNX graph ending in .onnx"),
        (["torchvision:resnet181"], "did you mean torchvision:resnet18"),
        (["torchvision:resnet18", "--config", "depth=3"], "--config applies to Hugging Face models"),
        (["torchvision:resnet18", "--weights", "nothing.pt"], "--weights nothing.pt: no such file"),
        (["./net.py:make_model", "--input-shape", "1x16", "--weights", "other.pt"], "does not fit the model"),
    ],
)
def test_a_bad_reference_is_one_line_and_exit_code_2_and_stores_nothing(
    models: Path, mlscope_env: dict[str, str], args: list[str], expected: str
) -> None:
    # Given a bad model reference or option (files relative to the models' folder)
    # When it is run from that folder
    done = subprocess.run(
        [sys.executable, "-m", "mlscope", "run", *args, *FAST],
        env=mlscope_env, cwd=models, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    # Then it is refused with one line naming the problem, and exit code 2
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    # And nothing was stored
    listed = mlscope(mlscope_env, "results", "list", "--json")
    assert listed.returncode == 0 and listed.stdout.strip() == ""
