"""A real part a test needs that is missing fails the test; it never turns into a skip and a green run.

The check runs pytest for real, in a child process, on a test that asks the shared helpers for a Redis
server nothing listens for (port 1 of this host), and on one that asks `unavailable` directly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """\
from tests.fixtures.services import emptied_redis, unavailable


def test_needs_redis():
    for _ in emptied_redis("redis://127.0.0.1:1/0"):
        pass


def test_needs_a_binary():
    unavailable("no frobnicator on this machine")
"""


def test_an_unreachable_service_fails_the_run_and_says_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rfs",
            str(tmp_path / "test_probe.py"),
        ],
        cwd=REPO,  # `python -m` puts it on the path: the probe imports tests.fixtures from it
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 failed" in done.stdout and "skipped" not in done.stdout, done.stdout
    assert "Redis at redis://127.0.0.1:1/0 is unreachable" in done.stdout, done.stdout
    assert "no frobnicator on this machine (make test sets up every real part" in done.stdout, done.stdout


def test_make_unit_leaves_out_every_test_that_needs_a_service() -> None:
    """`make unit`'s selection, read from the Makefile, collected for real: no test that uses a
    service's fixture (the api's Redis database, the farm, PostgreSQL, the Docker engine), the
    browser or a GPU is in it, and the unit tests are."""
    import re

    makefile = (REPO / "Makefile").read_text()
    match = re.search(r"^UNIT_MARKERS := (.+)$", makefile, re.MULTILINE)
    assert match, "make unit's marker expression"
    recipe = re.search(r"^unit: \$\(STAMP\)\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe, "make unit's recipe"
    # Both of its pytest runs select with it: the parallel one, then the `quiet` tests alone.
    assert '-m "$(UNIT_MARKERS) and not quiet"' in recipe.group(1), recipe.group(1)
    assert '-m "$(UNIT_MARKERS) and quiet"' in recipe.group(1), recipe.group(1)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            # Collecting needs no rewritten asserts; rewriting every test module was most of the time.
            "--assert=plain",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            match.group(1),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert any(line.startswith("tests/unit/test_measure_load.py::") for line in collected)
    for needs_a_service in (
        "tests/integration/test_api.py::",
        "tests/integration/test_api_fuzz.py::",
        "tests/integration/test_farm.py::",
        "tests/contract/test_store_pool_timeout.py::",
        "tests/unit/test_docker_runner_unit.py::test_the_runner_reports",
        "tests/browser/",
        "tests/gpu/",
    ):
        assert not any(line.startswith(needs_a_service) for line in collected), needs_a_service
    assert not any("[postgresql" in line or "[rabbitmq" in line for line in collected)
    # And a module whose every test is slow is not even imported (tests/conftest.py), while every unit
    # module that is not is collected
    from tests.fixtures.slow_modules import is_slow_module

    modules = {line.split("::", 1)[0] for line in collected}
    assert "tests/integration/test_jax.py" not in modules
    for path in sorted((REPO / "tests" / "unit").glob("test_*.py")):
        if not is_slow_module(path.read_text(encoding="utf-8")):
            assert path.relative_to(REPO).as_posix() in modules, path


def test_only_a_conjunction_with_not_slow_leaves_the_slow_modules_uncollected() -> None:
    from tests.fixtures.slow_modules import deselects_slow, is_slow_module

    # A module is slow as a whole when its pytestmark is the slow mark or a list holding it
    assert is_slow_module("import pytest\n\npytestmark = pytest.mark.slow\n")
    assert is_slow_module("pytestmark = [pytest.mark.slow, pytest.mark.docker]")
    assert not is_slow_module("pytestmark = pytest.mark.slowish")
    assert not is_slow_module("pytestmark = [pytest.mark.docker]")
    assert not is_slow_module("@pytest.mark.slow\ndef test_one() -> None: ...")
    # And only an expression that deselects every slow test leaves such modules out
    assert deselects_slow("not slow and not postgres and not quiet")
    for keeps_some_slow in ("", "slow", "not slow or redis", "not (slow and docker)", "not slowly and quiet"):
        assert not deselects_slow(keeps_some_slow), keeps_some_slow
