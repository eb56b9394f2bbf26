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

# `make test` runs the tests on two pytest-xdist workers (`--dist loadgroup`). A module that uses the
# shared Redis server's fixed test databases (the farm's, the api's, the uploads') or the farm's
# workers (which take the host's one measuring turn) runs in the one group SHARED_GROUP, one test
# after another; every other integration or browser module is a group of its own (its module-scoped
# fixtures are made once); unit and contract tests go wherever a worker is free.
SHARED_GROUP = "shared-redis-and-host-turn"
_SHARED_MARKS = ("tests.integration.farm", "_REDIS_DB", "127.0.0.1:6379/")
_UNGROUPED = ("unit", "contract")


def xdist_group_of(path: Path) -> str | None:
    """The xdist group of the tests in the module at `path` (None: distributed one by one)."""
    relative = path.resolve().relative_to(REPO / "tests")
    if relative.parts[0] in _UNGROUPED:
        return None
    if any(mark in path.read_text(encoding="utf-8") for mark in _SHARED_MARKS):
        return SHARED_GROUP
    return relative.as_posix()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[Path, str | None] = {}
    for item in items:
        path = item.path
        if path not in groups:
            groups[path] = xdist_group_of(path)
        if groups[path] is not None:
            item.add_marker(pytest.mark.xdist_group(groups[path]))


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
