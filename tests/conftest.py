"""Fixtures shared by every test: an isolated mlscope environment (its own store, cache and
manifest directory), so no test reads or writes the user's real data."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Fixtures every folder of tests may use by name.
pytest_plugins = ["tests.fixtures.docker_engine"]

REPO = Path(__file__).resolve().parents[1]
RUNTIME_MANIFESTS = REPO / "tests" / "data" / "runtime-manifests"


@pytest.fixture
def mlscope_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Point every setting at tmp_path; the test models' manifests are added to the registry.

    Yields the environment, for tests that start `mlscope` as a real subprocess.
    """
    values = {
        "MLSCOPE_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}",
        "MLSCOPE_CACHE_DIR": str(tmp_path / "cache"),
        "MLSCOPE_MANIFESTS": str(RUNTIME_MANIFESTS),
        "MLSCOPE_SETTINGS": str(tmp_path / "no-settings.toml"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    yield {**os.environ, **values}


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory kept for the whole session, so each ONNX graph is exported once."""
    return tmp_path_factory.mktemp("shared-cache")
