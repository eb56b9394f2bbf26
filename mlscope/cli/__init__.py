"""The `mlscope` command: the click group of every verb, and `main`, which turns how a command ended
into an exit code. Each verb lives in a module of its own beside this one (mlscope/cli/<verb>.py);
options verbs share are in options.py, everything printed in render.py.

A user's mistake ends with one line on stderr and exit code 2; a failed evaluation with exit code 1;
an evaluation that succeeded but whose result is not valid (every measurement invalid, or its parity
different) with 3; success with 0. Progress goes to stderr, so `--json` output on stdout stays clean
for scripts.
"""

from __future__ import annotations

import os
import sys

import click

from mlscope import __version__
from mlscope.cli.agents import agents
from mlscope.cli.api import api
from mlscope.cli.bricks import bricks
from mlscope.cli.compare import compare
from mlscope.cli.diff import diff
from mlscope.cli.env import env
from mlscope.cli.frameworks import frameworks
from mlscope.cli.history import history
from mlscope.cli.image import image
from mlscope.cli.models import models
from mlscope.cli.parity import parity
from mlscope.cli.plot import plot
from mlscope.cli.progress import progress_console
from mlscope.cli.regressions import regressions
from mlscope.cli.render import fail, internal_error, interrupted, unavailable
from mlscope.cli.rerun import rerun
from mlscope.cli.results import results
from mlscope.cli.run import run
from mlscope.cli.store import store
from mlscope.cli.submit import submit
from mlscope.cli.trace import trace
from mlscope.cli.worker import worker
from mlscope.contract.errors import StoreUnavailable, UserError

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="mlscope")
def cli() -> None:
    """mlscope: fair, repeatable latency and throughput benchmarks of deep-learning models.

    Start with `mlscope models`, then `mlscope run resnet18`.
    """
    # A wrong MLSCOPE_PROGRESS fails here, before any work: not after a farm has taken the jobs.
    progress_console(quiet=True)


for _verb in (
    run,
    models,
    frameworks,
    results,
    trace,
    api,
    worker,
    submit,
    agents,
    compare,
    diff,
    image,
    env,
    store,
    parity,
    rerun,
    history,
    regressions,
    plot,
    bricks,
):
    cli.add_command(_verb)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; a UserError anywhere becomes one line and exit code 2."""
    try:
        cli.main(args=argv, prog_name="mlscope", standalone_mode=False)
    except UserError as exc:
        fail(str(exc))
    except StoreUnavailable as exc:
        unavailable(exc.message)
    except (click.exceptions.Abort, KeyboardInterrupt):
        interrupted()
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:
        if os.environ.get("MLSCOPE_DEBUG"):
            raise
        internal_error(exc)
