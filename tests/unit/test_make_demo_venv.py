"""`make demo` installs only what it runs (PyTorch and ONNX Runtime) into a venv that lacks the full
set, and nothing into one that has it; `make test`'s venv still gets every extra.

Read from the plan `make --dry-run` prints for a venv directory of the test's own, so nothing is
installed: the recipes are the Makefile's own, as make expands them."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _plan(target: str, venv: Path) -> list[str]:
    if shutil.which("make") is None:
        pytest.fail("GNU make is not installed: the two commands need it")
    done = subprocess.run(
        ["make", "--dry-run", target, f"VENV={venv}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def _installs(plan: list[str]) -> list[str]:
    """The extras each `pip install -e` of the plan names."""
    return re.findall(r"-e '\.\[([^]]*)\]'", "\n".join(plan))


def _full_stamp(venv: Path) -> Path:
    inputs = (REPO / "pyproject.toml").read_bytes() + (REPO / "constraints.txt").read_bytes()
    return venv / f".installed-{hashlib.sha256(inputs).hexdigest()[:16]}"


def test_the_demo_installs_pytorch_and_onnxruntime_only_into_a_new_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    assert _installs(_plan("demo", venv)) == ["pytorch,onnxruntime"]
    extras = _installs(_plan("venv", venv))
    assert len(extras) == 1 and {"pytorch", "onnxruntime", "tensorflow", "llamacpp", "dev"} <= set(
        extras[0].split(",")
    ), extras


def test_the_demo_installs_nothing_into_the_full_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    _full_stamp(venv).touch()
    plan = _plan("demo", venv)
    assert _installs(plan) == [], plan
    assert any("mlscope run resnet18" in line for line in plan), plan
