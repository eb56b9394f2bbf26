"""ops/ci/slowest.py: `make test`'s one list of the slowest tests, over the reports of its pytest runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SLOWEST = REPO / "ops" / "ci" / "slowest.py"


def _report(tmp_path: Path, name: str, sleeps: dict[str, float]) -> Path:
    """A real pytest run's JUnit report, of tests that sleep the given seconds."""
    module = tmp_path / f"test_{name}.py"
    module.write_text(
        "import time\n"
        + "".join(f"def test_{test}():\n    time.sleep({seconds})\n" for test, seconds in sleeps.items())
    )
    report = tmp_path / f"{name}.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(module),
         "--junitxml", str(report)],
        cwd=tmp_path, check=True, capture_output=True,
    )  # fmt: skip
    return report


def test_the_slowest_tests_of_several_runs_are_listed_in_one_list_slowest_first(tmp_path: Path) -> None:
    first = _report(tmp_path, "first", {"quick": 0.0, "slow": 0.3})
    second = _report(tmp_path, "second", {"slower": 0.5, "middle": 0.15})
    done = subprocess.run(
        [sys.executable, str(SLOWEST), "3", str(first), str(second)], capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "slowest 3 tests (setup, call and teardown):"
    names = [line.split()[1] for line in lines[1:]]
    assert names == ["test_second::test_slower", "test_first::test_slow", "test_second::test_middle"]
    seconds = [float(line.split()[0].rstrip("s")) for line in lines[1:]]
    assert seconds[0] >= 0.5 and seconds[1] >= 0.3


def test_a_call_without_a_count_says_how_to_call_it_and_exits_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SLOWEST), "report.xml"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: python ops/ci/slowest.py N REPORT.xml")
