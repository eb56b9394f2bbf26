"""The `mlscope` command: the click group of every verb, and `main`, which turns how a command ended
into an exit code. Each verb lives in a module of its own beside this one (mlscope/cli/<verb>.py);
options verbs share are in options.py, everything printed in render.py.

A user's mistake ends with one line on stderr and exit code 2; a failed evaluation with exit code 1;
an evaluation that succeeded but whose result is not valid (every measurement invalid, or its parity
different) with 3; success with 0. Progress goes to stderr, so `--json` output on stdout stays clean
for scripts.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn

import click

from mlscope import __version__
from mlscope.cli.verbs import LazyGroup
from mlscope.contract.errors import StoreUnavailable, UserError

__all__ = ["cli", "main"]


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(__version__, prog_name="mlscope")
def cli() -> None:
    """mlscope: fair, repeatable latency and throughput benchmarks of deep-learning models.

    Start with `mlscope models`, then `mlscope run resnet18`.
    """
    from mlscope.cli.progress import progress_console

    # A wrong MLSCOPE_PROGRESS fails here, before any work: not after a farm has taken the jobs.
    progress_console(quiet=True)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; a UserError anywhere becomes one line and exit code 2.

    Without argv this is the process's own command (the `mlscope` script, `python -m mlscope`): once
    the command has ended, the process ends as `_end_process` says, without the interpreter's
    teardown. Given argv (a test, a script calling in), it returns or raises SystemExit as click does.
    """
    if argv is not None:
        _command(argv)
        return
    try:
        _command(None)
    except SystemExit as exc:
        _end_process(exc.code)
    _end_process(0)


def _command(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, prog_name="mlscope", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (Exception, KeyboardInterrupt) as exc:
        _ended(exc)


def _ended(exc: BaseException) -> None:
    """How a command that raised ends: one line and its exit code (render.py, imported only now)."""
    from mlscope.cli.render import fail, internal_error, interrupted, unavailable

    if isinstance(exc, UserError):
        fail(str(exc))
    elif isinstance(exc, StoreUnavailable):
        unavailable(exc.message)
    elif isinstance(exc, click.exceptions.Abort | KeyboardInterrupt):
        interrupted()
    elif os.environ.get("MLSCOPE_DEBUG") or not isinstance(exc, Exception):
        raise exc
    else:
        internal_error(exc)


def _end_process(code: object) -> NoReturn:
    """End this process with the exit status SystemExit's `code` means, as the interpreter would (the
    other threads it waits for awaited, the exit handlers run, stdout and stderr flushed) but without
    its teardown: freeing every module's objects one by one is a few hundred milliseconds after a
    command that imported SQLAlchemy, added to every command's time for nothing a user sees. Nothing
    is lost: what a command writes, it writes and closes (or commits) before it returns."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # A reader that went away (`mlscope results list | head`) is no error of the command's.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)
