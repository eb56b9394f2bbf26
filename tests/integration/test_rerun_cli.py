"""`mlscope rerun ID` end to end: a real model run in a child process into a real SQLite store, then
rerun from its recorded request, diffed, its pins checked."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RUNTIME_MANIFESTS
from tests.integration.test_run_cli import FAST, json_lines, mlscope

pytestmark = pytest.mark.slow


def run_once(env: dict[str, str]) -> dict:
    done = mlscope(env, "run", "test_tiny_mlp", "-f", "onnxruntime", "--json", *FAST)
    assert done.returncode == 0, done.stderr
    (result,) = json_lines(done.stdout)
    return result


def test_a_rerun_repeats_the_recorded_request_and_diffs_the_two(mlscope_env: dict[str, str]) -> None:
    # Given a stored evaluation
    recorded = run_once(mlscope_env)
    # When it is rerun here
    done = mlscope(mlscope_env, "rerun", recorded["id"][:8], "--json")
    assert done.returncode == 0, done.stderr
    (answer,) = json_lines(done.stdout)
    # Then a new evaluation ran the very request recorded, on the same pins, and the two are diffed
    assert answer["recorded"] == recorded["id"] and answer["rerun"] != recorded["id"]
    assert answer["changes"] == []
    shown = mlscope(mlscope_env, "results", "show", answer["rerun"], "--json")
    assert shown.returncode == 0, shown.stderr
    rerun = json.loads(shown.stdout)
    assert rerun["request"] == recorded["request"]
    assert rerun["model"]["manifest_sha256"] == recorded["model"]["manifest_sha256"]
    (point,) = answer["diff"]["points"]
    assert (point["scenario"], point["batch_size"]) == ("single_stream", 1)
    assert point["verdict"] in ("faster", "slower", "no detectable difference", "inconclusive")
    low, high = point["ci"]
    assert low <= point["ratio"] <= high


def test_a_changed_manifest_is_refused_unless_allowed(mlscope_env: dict[str, str], tmp_path: Path) -> None:
    # Given an evaluation of a model whose manifest was edited after it was recorded
    manifests = tmp_path / "manifests"
    shutil.copytree(RUNTIME_MANIFESTS, manifests)
    env = {**mlscope_env, "MLSCOPE_MANIFESTS": str(manifests)}
    recorded = run_once(env)
    edited = manifests / "tiny_mlp-onnxruntime.yaml"
    edited.write_text(edited.read_text().replace("description: test model tiny_mlp", "description: edited"))
    # When it is rerun, the rerun is refused with the reason, and nothing new is stored
    refused = mlscope(env, "rerun", recorded["id"])
    assert refused.returncode == 2, refused.stderr
    assert "changed since" in refused.stderr and "--allow-changes" in refused.stderr
    listed = mlscope(env, "results", "list", "--json")
    assert len(json_lines(listed.stdout)) == 1
    # Unless allowed: then it runs and names the pin that moved
    allowed = mlscope(env, "rerun", recorded["id"], "--allow-changes", "--json")
    assert allowed.returncode == 0, allowed.stderr
    (answer,) = json_lines(allowed.stdout)
    assert [change["pin"] for change in answer["changes"]] == ["model manifest"]


def test_an_unknown_id_is_one_line_and_exit_2(mlscope_env: dict[str, str]) -> None:
    done = mlscope(mlscope_env, "rerun", "ffffffff")
    assert done.returncode == 2
    assert "ffffffff" in done.stderr and "Traceback" not in done.stderr


def mlscope_in(folder: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`mlscope ARGS` run from `folder`."""
    command = [sys.executable, "-m", "mlscope", *args]
    return subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_a_model_file_run_by_a_relative_path_reruns_from_anywhere(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    import torch

    # Given an ONNX file run by its relative path from its own directory
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), elsewhere.mkdir()
    net = torch.nn.Sequential(torch.nn.Linear(16, 4)).eval()
    torch.onnx.export(net, (torch.randn(1, 16),), str(work / "tiny.onnx"), external_data=False)
    ran = mlscope_in(work, mlscope_env, "run", "./tiny.onnx", "--json", *FAST)
    assert ran.returncode == 0, ran.stderr
    (recorded,) = json_lines(ran.stdout)
    # Then its request records the file by its absolute path
    assert recorded["request"]["model"] == str(work / "tiny.onnx")
    # When it is rerun from another directory, Then it runs the same file
    rerun = mlscope_in(elsewhere, mlscope_env, "rerun", recorded["id"][:8], "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert json_lines(rerun.stdout)[0]["changes"] == []
    # When the file has moved away, Then one line says where the rerun looked, exit code 2
    (work / "tiny.onnx").rename(elsewhere / "tiny.onnx")
    gone = mlscope_in(elsewhere, mlscope_env, "rerun", recorded["id"][:8])
    assert (gone.returncode, gone.stdout) == (2, "")
    assert gone.stderr == (
        f"mlscope: error: cannot rerun {recorded['id'][:8]}: its model file is not at {work / 'tiny.onnx'}\n"
    )
