"""What the GPU tests share: tests/fixtures/gpu.py's rule, applied to every test here at collection
(skipped without a CUDA device, failed where MLSCOPE_REQUIRE_GPU=1), the device, and an mlscope
environment of a module's own (its store, cache and the GPU test models' manifests), for the tests
that start `mlscope` as a real subprocess."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, RUNTIME_MANIFESTS
from tests.fixtures.gpu import gate_gpu_tests, require_cuda, write_gpu_manifests
from tests.fixtures.torch_bricks import write_manifests

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gate_gpu_tests([item for item in items if HERE in item.path.resolve().parents])


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    """The first CUDA device."""
    require_cuda()
    return torch.device("cuda:0")


@pytest.fixture(scope="module")
def gpu_env(cuda: torch.device, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of an `mlscope` subprocess: everything under a directory of the module's own,
    the test models' manifests (tests/data, the bricks models, the GPU models) in the registry."""
    folder = tmp_path_factory.mktemp("gpu-env")
    manifests = [RUNTIME_MANIFESTS, write_manifests(folder / "bricks"), write_gpu_manifests(folder / "gpu")]
    return {
        **os.environ,
        "MLSCOPE_STORE_URL": f"sqlite:///{folder / 'store.db'}",
        "MLSCOPE_CACHE_DIR": str(folder / "cache"),
        "MLSCOPE_MANIFESTS": os.pathsep.join(str(path) for path in manifests),
        "MLSCOPE_SETTINGS": str(folder / "no-settings.toml"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
