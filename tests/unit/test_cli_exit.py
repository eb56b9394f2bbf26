"""How the `mlscope` process ends (mlscope/cli/__init__.py `_end_process`): without the interpreter's
teardown (what would free every object left), but with everything the interpreter's exit would have
done that a user can see: the exit status the command chose, stdout written even when it was a pipe
(block-buffered), the threads it left running awaited, the exit handlers run, and a reader that went
away no error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mlscope

# A command as the `mlscope` script runs it (main() without argv), with a thread still writing and an
# exit handler registered before it, both as a verb could leave them; print() to a pipe is buffered.
SCRIPT = """
import atexit, sys, threading, time
from mlscope.cli import main

atexit.register(lambda: print("exit handler ran"))
class Torn:
    def __del__(self):
        print("torn down")
kept = Torn()  # freed only by the interpreter's teardown
def late():
    time.sleep(0.3)
    print("thread finished")
threading.Thread(target=late).start()
print("before the command")
sys.argv = ["mlscope", *sys.argv[1:]]
main()
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_process_ends_with_its_output_threads_and_exit_handlers() -> None:
    done = _run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "before the command",
        f"mlscope, version {mlscope.__version__}",
        "thread finished",
        "exit handler ran",
    ]


def test_the_interpreters_teardown_is_skipped() -> None:
    # The module's objects are not freed one by one: that is the time the process saves.
    assert "torn down" not in _run("--version").stdout


def test_a_users_mistake_keeps_its_exit_status_and_one_line() -> None:
    done = _run("no-such-verb")
    assert done.returncode == 2
    assert "No such command 'no-such-verb'" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.splitlines()[-1] == "exit handler ran"


def test_a_reader_that_went_away_is_no_error(tmp_path: Path) -> None:
    # `mlscope models | head -1`: the pipe closes after the first of its 100 kB or so.
    done = subprocess.run(
        f"{sys.executable} -m mlscope models | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert done.stdout.split()[1] == "models", done.stdout
    assert done.stderr == ""
