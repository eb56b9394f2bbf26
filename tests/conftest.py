"""Fixtures shared by every test: an isolated mlscope environment (its own store, cache and
manifest directory), so no test reads or writes the user's real data."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Tests import OpenVINO in their own processes too (tests/integration/test_openvino.py): mlscope's
# OpenVINO package, imported first, keeps OpenVINO's usage telemetry from loading in them, as it does
# in each predictor process (mlscope/runtime/predictors/openvino/__init__.py).
import mlscope.runtime.predictors.openvino  # noqa: F401
from tests.fixtures.quiet import settle
from tests.fixtures.slow_modules import deselects_slow, is_slow_module

# Fixtures every folder of tests may use by name.
pytest_plugins = ["tests.fixtures.docker_engine"]

REPO = Path(__file__).resolve().parents[1]
RUNTIME_MANIFESTS = REPO / "tests" / "data" / "runtime-manifests"

# `make test` runs the tests on two pytest-xdist workers. A module that uses the shared Redis server's
# fixed test databases (the farm's, the api's, the uploads') or the farm's workers (which take the
# host's one measuring turn) runs in the one scope SHARED_SCOPE, one test after another; every other
# integration or browser module is a scope of its own (its module-scoped fixtures are made once);
# unit and contract tests go wherever a worker is free. (xdist's own `--dist loadgroup` cannot do
# this with pytest 9: it renames node ids through an attribute pytest no longer reads.)
SHARED_SCOPE = "shared-redis-and-host-turn"
# What makes a module's tests share: the farm (its class, its fixtures, its Redis URL) or a fixed test
# database. A module that takes only the farm module's helpers (wait_until, free_port) is a scope of
# its own: the locked-down containers and the compose stack have brokers and host turns of their own.
_SHARED_MARKS = re.compile(
    r"\bFarm\b|\bREDIS_URL\b|_REDIS_DB|127\.0\.0\.1:6379/|\b(make_|shared_store_)?farm: "
)
_UNSCOPED = ("unit", "contract")


def uses_the_farm_or_a_fixed_database(module_text: str) -> bool:
    """Whether a test module's source puts it in SHARED_SCOPE."""
    return _SHARED_MARKS.search(module_text) is not None


def xdist_scope_of(path: Path) -> str | None:
    """The scope of the tests in the module at `path` (None: each test is scheduled on its own)."""
    relative = path.resolve().relative_to(REPO / "tests")
    if relative.parts[0] in _UNSCOPED:
        return None
    if uses_the_farm_or_a_fixed_database(path.read_text(encoding="utf-8")):
        return SHARED_SCOPE
    return relative.as_posix()


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scheduler by scope, with the scopes of xdist_scope_of."""
    from xdist.scheduler import LoadScopeScheduling

    scopes: dict[str, str | None] = {}

    class ByResource(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module not in scopes:
                scopes[module] = xdist_scope_of(config.rootpath / module)
            return scopes[module] or nodeid

    return ByResource(config, log)


# Each real service a test needs becomes a marker of that name (registered in pyproject.toml), read
# from the fixtures it uses (their whole closure) and, in the integration, contract and browser
# tests, from its parameters (a store or broker by name); the browser tests also need Chromium.
# `make unit` deselects every one of them, so it runs with every service stopped; `make test` runs
# them all, and a service that is down fails them (tests/fixtures/services.py). A test that reaches a
# service by itself carries the marker in its module. Every test under tests/gpu needs a CUDA device
# (tests/fixtures/gpu.py: skipped without one, failed where MLSCOPE_REQUIRE_GPU=1).
RESOURCES = ("redis", "postgres", "rabbitmq", "docker", "browser", "gpu")
_FIXTURE_RESOURCES = {
    "redis_db": ("redis",),
    "farm": ("redis",),
    "make_farm": ("redis",),
    "shared_store_farm": ("redis",),
    "postgres_url": ("postgres",),
    "private_postgres": ("postgres",),
    "docker_engine": ("docker",),
}
_PARAM_RESOURCES = {"postgresql": "postgres", "redis": "redis", "rabbitmq": "rabbitmq"}


def resources_of(item: pytest.Item) -> set[str]:
    """The real services `item` needs, by the rules above."""
    needs: set[str] = set()
    for name in getattr(item, "fixturenames", ()):
        needs.update(_FIXTURE_RESOURCES.get(name, ()))
    relative = item.path.resolve().relative_to(REPO / "tests")
    callspec = getattr(item, "callspec", None)
    if callspec is not None and relative.parts[0] != "unit":
        needs.update(
            _PARAM_RESOURCES[value]
            for value in callspec.params.values()
            if isinstance(value, str) and value in _PARAM_RESOURCES
        )
    if relative.parts[0] in ("browser", "gpu"):
        needs.add(relative.parts[0])
    return needs


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A run that deselects the slow tests does not import the modules whose every test is slow: their
    imports (JAX, torchvision's models, a dataset read at import) cost each pytest-xdist worker seconds
    of its collection, for tests it then deselects. They are left out as deselected ones are: not run,
    not counted as passed."""
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if not deselects_slow(config.option.markexpr or ""):
        return None
    return True if is_slow_module(collection_path.read_text(encoding="utf-8")) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for resource in sorted(resources_of(item)):
            item.add_marker(getattr(pytest.mark, resource))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """A `quiet` test's body starts on a settled machine, after its fixtures (tests/fixtures/quiet.py).
    A failure's report says how long the settling took, and the run's summary lists the waits longer
    than an idle machine's (what an earlier test left running). On a pytest-xdist worker the test runs
    beside others (a run that did not leave the quiet tests for last), so the machine cannot settle
    and the test runs at once, as it would have."""
    if item.get_closest_marker("quiet") is not None and "PYTEST_XDIST_WORKER" not in os.environ:
        waited = settle()
        item.add_report_section("call", "quiet", f"the machine settled in {waited:.1f} s before the test")
        if waited > LONG_SETTLE_S:
            _long_settles.append((item.nodeid, waited))


# An idle machine settles in two windows and the sync (about 0.6 s here); a longer wait is reported.
LONG_SETTLE_S = 2.0
_long_settles: list[tuple[str, float]] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for nodeid, waited in _long_settles:
        terminalreporter.write_line(f"quiet: the machine took {waited:.1f} s to settle before {nodeid}")


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
