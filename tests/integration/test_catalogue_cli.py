"""The catalogue's architectures, named wherever a model is named: `mlscope run torchvision:NAME` on real
PyTorch and ONNX Runtime, `mlscope models` with its filters, `mlscope models show REF` (whose YAML,
saved, is the very manifest again), a misspelt name (exit 2, the close names), and over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.integration.test_api import (  # noqa: F401 - app, redis_db, settings: fixtures (http is the suite's)
    app,
    assert_problem,
    redis_db,
    settings,
    submit,
)
from tests.integration.test_run_cli import FAST, json_lines, mlscope, stored

pytestmark = pytest.mark.slow

SMALL = "torchvision:squeezenet1_1"


def test_a_catalogue_name_runs_on_pytorch_and_onnxruntime(mlscope_env: dict[str, str]) -> None:
    # When a catalogue architecture is run by its name on both frameworks
    done = mlscope(mlscope_env, "run", SMALL, "-f", "pytorch,onnxruntime", "-b", "1", "--json", *FAST)

    # Then both succeed, stored under that name with the manifest it resolved to (exit 3: they succeeded
    # but a point is not valid, as on a machine busy with other work; validity is not what this tests)
    assert done.returncode in (0, 3), done.stderr
    results = json_lines(done.stdout)
    assert [r["status"] for r in results] == ["succeeded", "succeeded"], [r["error"] for r in results]
    assert {r["model"]["name"] for r in results} == {SMALL}
    assert all(r["manifest"]["source"] == {"torchvision": "squeezenet1_1"} for r in results)
    shown = json_lines(mlscope(mlscope_env, "models", "show", SMALL, "-f", "pytorch", "--json").stdout)
    assert results[0]["manifest"] == shown[0]
    assert {r["model"]["name"] for r in stored(mlscope_env)} == {SMALL}


def test_models_lists_the_catalogue_with_filters(mlscope_env: dict[str, str]) -> None:
    every = json_lines(mlscope(mlscope_env, "models", "--json").stdout)
    catalogue = {line["name"] for line in every if line["origin"] == "catalogue"}
    assert len(catalogue) >= 100
    assert {"torchvision:resnet18", "hf:bert"} <= catalogue
    assert {"resnet18", "bert_base"} <= {line["name"] for line in every}  # the manifests stay

    resnets = json_lines(mlscope(mlscope_env, "models", "--family", "resnet", "--json").stdout)
    assert resnets and all(line["family"] == "resnet" for line in resnets)
    assert {"pytorch", "onnxruntime"} <= {line["framework"] for line in resnets}
    found = json_lines(mlscope(mlscope_env, "models", "--search", "efficientnet", "--json").stdout)
    assert found and all("efficientnet" in line["name"] or line["family"] == "efficientnet" for line in found)
    tasks = {line["task"] for line in every}
    task = sorted(tasks)[0]
    of_task = json_lines(mlscope(mlscope_env, "models", "--task", task, "--json").stdout)
    assert of_task and all(line["task"] == task for line in of_task)

    table = mlscope(mlscope_env, "models", "--family", "resnet")
    assert table.returncode == 0 and "torchvision:resnet18" in table.stdout


def test_a_shown_manifest_saved_as_a_file_is_the_same_manifest(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given the manifest a catalogue name resolves to, printed as YAML and saved in a manifest folder
    shown = mlscope(mlscope_env, "models", "show", "torchvision:resnet18", "-f", "onnxruntime")
    assert shown.returncode == 0, shown.stderr
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "resnet18.yaml").write_text(shown.stdout)
    before = json_lines(mlscope(mlscope_env, "models", "--search", "resnet18", "--json").stdout)
    env = {**mlscope_env, "MLSCOPE_MANIFESTS": str(folder)}

    # When the folder is added, Then the file replaces the entry, with the very same manifest
    after = json_lines(mlscope(env, "models", "--search", "resnet18", "--json").stdout)
    (mine,) = [line for line in after if line["name"] == "torchvision:resnet18"]
    (entry,) = [
        line
        for line in before
        if line["name"] == "torchvision:resnet18" and line["framework"] == "onnxruntime"
    ]
    assert mine["origin"].endswith("resnet18.yaml")
    assert mine["manifest_sha256"] == entry["manifest_sha256"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["run", "torchvsion:resnet18", "-f", "pytorch"], "torchvision:resnet18"),
        (["models", "show", "hf:bertt"], "hf:bert"),
        (["models", "show", "torchvision:resnet18", "-f", "mxnet"], "pytorch"),
    ],
)
def test_a_misspelt_name_exits_2_with_the_close_names(
    mlscope_env: dict[str, str], args: list[str], named: str
) -> None:
    done = mlscope(mlscope_env, *args)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_api_lists_and_accepts_catalogue_names(http: FlaskClient) -> None:
    listed: list[dict[str, Any]] = http.get("/api/v1/models?family=resnet").get_json()
    assert "torchvision:resnet18" in {item["name"] for item in listed}
    assert all(item["family"] == "resnet" and item["origin"] == "catalogue" for item in listed)
    detail = http.get("/api/v1/models/torchvision:resnet18").get_json()
    assert detail["manifests"]["pytorch"]["source"] == {"torchvision": "resnet18"}

    accepted = submit(http, model="torchvision:resnet18", framework="pytorch")
    assert accepted.status_code == 202, accepted.get_json()
    problem = assert_problem(submit(http, model="torchvision:resnet180", framework="pytorch"), 422, "model")
    assert "torchvision:resnet18" in str(problem["errors"]["model"])
