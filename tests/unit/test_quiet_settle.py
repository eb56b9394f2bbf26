"""The settling before each `quiet` test (tests/fixtures/quiet.py): a process spinning on a core reads
as busy, keeps the machine from settling and is named when the wait runs out; once it ends the
machine settles."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.fixtures.quiet import IDLE_SHARE, busy_share, settle

# Alone, after the parallel tests: it needs the machine idle apart from its own spinner.
pytestmark = pytest.mark.quiet


def test_a_spinning_process_keeps_the_machine_from_settling_and_is_named() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        # While a process spins on one of the cores, the machine reads busy
        assert busy_share(0.5) > IDLE_SHARE
        # ... does not settle, and the failure names the spinner
        with pytest.raises(pytest.fail.Exception) as failed:
            settle(limit_s=1.0)
        assert "did not settle" in str(failed.value) and f"({spinner.pid})" in str(failed.value)
    finally:
        spinner.kill()
        spinner.wait()
    # Once it is gone the machine settles
    assert settle(limit_s=30.0) < 30.0
