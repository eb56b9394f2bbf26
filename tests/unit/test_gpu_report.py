"""The GPU check's table (ops/ci/gpu_report.py) and its script's dry run (ops/ci/gpu-smoke.sh): every
GPU test is a named check; the table reads pytest's JUnit XML, shows each check's result and figure,
counts a failure, an error, a skip or a check pytest never reported as not passed; the dry run
lists what it would install and check, and says when the wheelhouse is missing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "ops" / "ci" / "gpu-smoke.sh"


def load_report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_report", REPO / "ops" / "ci" / "gpu_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


report = load_report()


def junit(cases: str) -> str:
    return f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>'


def case(test: str, inner: str = "") -> str:
    module, name = test.split("::")
    return f'<testcase classname="tests.gpu.{module.removesuffix(".py")}" name="{name}">{inner}</testcase>'


def test_every_gpu_test_is_a_named_check_and_every_named_check_a_test() -> None:
    tests = report.gpu_tests()
    assert tests, "no test found under tests/gpu"
    assert {test.partition("::")[2] for test in tests} == set(report.CHECKS)


def test_the_table_shows_each_check_its_result_and_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a run where one check passed with a figure, one failed, one errored, one was skipped,
    # and the rest never reported
    first, second, third, fourth, *rest = report.gpu_tests()
    (tmp_path / "junit.xml").write_text(
        junit(
            case(first, '<properties><property name="figure" value="12.5 ms vs 13.0 ms"/></properties>')
            + case(second, '<failure message="assert 0 &gt; 0">long traceback</failure>')
            + case(third, '<error message="fixture broke"/>')
            + case(fourth, '<skipped message="no CUDA device"/>')
        )
    )
    # When the table is made
    code = report.main([str(tmp_path / "junit.xml"), "--markdown", str(tmp_path / "table.md")])
    out = capsys.readouterr().out
    # Then each check has its row, with its result and figure or reason, and the run did not pass
    rows = {line.split("  ")[0]: line for line in out.splitlines()[2:] if line.strip()}
    assert "PASS" in rows[report.check_of(first)] and "12.5 ms vs 13.0 ms" in rows[report.check_of(first)]
    assert "FAIL" in rows[report.check_of(second)] and "assert 0 > 0" in rows[report.check_of(second)]
    assert "ERROR" in rows[report.check_of(third)] and "fixture broke" in rows[report.check_of(third)]
    assert "SKIP" in rows[report.check_of(fourth)]
    for test in rest:
        assert "NOT RUN" in rows[report.check_of(test)]
    assert f"1 of {len(rest) + 4} checks passed" in out and code == 1
    markdown = (tmp_path / "table.md").read_text()
    assert markdown.startswith("| check | result | figure |") and markdown.count("\n") == len(rest) + 6


def test_a_run_where_every_check_passed_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "junit.xml").write_text(junit("".join(case(test) for test in report.gpu_tests())))
    assert report.main([str(tmp_path / "junit.xml")]) == 0
    # and without results at all, none passed
    assert report.main([str(tmp_path / "absent.xml")]) == 1
    assert "pytest did not finish" in capsys.readouterr().err


def smoke(*args: str, wheelhouse: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "MLSCOPE_GPU_WHEELHOUSE": str(wheelhouse)}
    return subprocess.run(
        ["bash", str(SMOKE), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_dry_run_lists_what_it_would_install_and_check(tmp_path: Path) -> None:
    # Given a wheelhouse of two wheels
    (tmp_path / "alpha-1.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "beta-2.0-py3-none-any.whl").write_bytes(b"")
    done = smoke("--dry-run", wheelhouse=tmp_path)
    # Then it exits 0 having installed nothing, naming the wheels, the install and every check
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 wheels" in done.stdout and "alpha-1.0-py3-none-any.whl" in done.stdout
    assert f"--no-index --find-links {tmp_path} -e . -r ops/ci/gpu-requirements.txt" in done.stdout
    assert "MLSCOPE_REQUIRE_GPU=1" in done.stdout
    for test in report.gpu_tests():
        assert f"tests/gpu/{test}" in done.stdout


def test_a_missing_wheelhouse_is_said_plainly(tmp_path: Path) -> None:
    dry = smoke("--dry-run", wheelhouse=tmp_path / "absent")
    assert dry.returncode == 0 and "wheelhouse: MISSING" in dry.stdout and "make gpu-wheelhouse" in dry.stdout
    run = smoke(wheelhouse=tmp_path / "absent")
    assert run.returncode == 2 and "the wheelhouse is MISSING" in run.stdout + run.stderr
