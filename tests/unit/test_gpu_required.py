"""A GPU test on a machine with no CUDA device is skipped, saying why; where MLSCOPE_REQUIRE_GPU=1
says a GPU must be there (the GPU check), it fails instead, naming what is missing, and none of its
fixtures (which would need the GPU) is set up.

The check runs pytest for real, in a child process whose PyTorch is shown no device
(CUDA_VISIBLE_DEVICES empty, so it holds on a GPU machine too), on probes: tests gated as tests/gpu's
are (tests/fixtures/gpu.py's `gate_gpu_tests`), one with a fixture that must never be set up, and a
test that asks `require_cuda` itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.gpu import REQUIRE_GPU

REPO = Path(__file__).resolve().parents[2]

GATE = """\
from tests.fixtures.gpu import gate_gpu_tests


def pytest_collection_modifyitems(config, items):
    gate_gpu_tests(items)
"""

GATED = """\
import pytest


@pytest.fixture(scope="module")
def on_the_gpu():
    raise RuntimeError("a GPU fixture was set up")


def test_needs_the_gpu(on_the_gpu):
    pass


def test_needs_it_too():
    pass
"""

ASKS = """\
from tests.fixtures.gpu import require_cuda


def test_asks_for_the_gpu():
    require_cuda()
"""


def probe(tmp_path: Path, require: str | None) -> subprocess.CompletedProcess[str]:
    """pytest on the probes, with MLSCOPE_REQUIRE_GPU set to `require` (None: unset)."""
    gated = tmp_path / "gated"
    gated.mkdir(exist_ok=True)
    (gated / "conftest.py").write_text(GATE)
    (gated / "test_gated_probe.py").write_text(GATED)
    (tmp_path / "test_asking_probe.py").write_text(ASKS)
    env = {key: value for key, value in os.environ.items() if key != REQUIRE_GPU}
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["COLUMNS"] = "1000"  # the short summary is cut to the terminal's width: never cut here
    if require is not None:
        env[REQUIRE_GPU] = require
    probes = [str(gated), str(tmp_path / "test_asking_probe.py")]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", *probes],
        cwd=REPO,  # `python -m` puts it on the path: the probes import tests.fixtures from it
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_a_gpu_the_gpu_tests_are_skipped_saying_why(tmp_path: Path) -> None:
    done = probe(tmp_path, require=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 skipped" in done.stdout and "failed" not in done.stdout, done.stdout
    assert "no CUDA device" in done.stdout and f"set {REQUIRE_GPU}=1 to fail instead" in done.stdout
    assert "a GPU fixture was set up" not in done.stdout


def test_where_a_gpu_is_required_its_absence_fails_every_gpu_test_naming_it(tmp_path: Path) -> None:
    done = probe(tmp_path, require="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "3 failed" in done.stdout, done.stdout
    assert "skipped" not in done.stdout and "error" not in done.stdout, done.stdout
    summary = [line for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    assert len(summary) == 3, done.stdout
    assert all("no CUDA device: PyTorch" in line for line in summary), done.stdout
    assert f"{REQUIRE_GPU}=1 says this machine has one" in done.stdout
    assert "a GPU fixture was set up" not in done.stdout


def test_only_the_value_1_requires_a_gpu(tmp_path: Path) -> None:
    done = probe(tmp_path, require="0")
    assert done.returncode == 0 and "3 skipped" in done.stdout, done.stdout
