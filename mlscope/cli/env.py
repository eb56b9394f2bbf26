"""`mlscope env create` and `mlscope env list`: the framework environments `--runner process` uses
for a framework not installed beside mlscope (see mlscope.workers.envs)."""

from __future__ import annotations

import sys
import time

import click

from mlscope.cli.consoles import escape
from mlscope.cli.options import json_flag
from mlscope.cli.render import console, err_console, new_table, print_json_lines
from mlscope.contract.settings import load_settings

__all__ = ["env"]


@click.group()
def env() -> None:
    """Framework environments for `--runner process`: a virtual environment of its own for a framework
    whose requirements clash with mlscope's (MXNet 1.9 needs numpy < 1.24)."""


@env.command("create")
@click.argument("framework")
@click.option("--rebuild", is_flag=True, help="Make it again even if it exists.")
def env_create(framework: str, rebuild: bool) -> None:
    """Create (or update) the environment of FRAMEWORK under the cache directory."""
    sys.exit(create_command(framework, rebuild=rebuild))


def create_command(framework: str, *, rebuild: bool) -> int:
    """Make (or reuse) the environment of a framework and say where it is.

    A UserError (unknown framework, no pins file) propagates: the CLI prints it and exits with 2.

    Returns:
        0 when the environment is ready, 1 when pip or venv failed (their last lines are printed).
    """
    from mlscope.workers.envs import EnvBuildError, create_env

    settings = load_settings()
    started = time.monotonic()

    def progress(line: str) -> None:
        # The tools' own chatter stays dim; mlscope's steps start with the framework's name.
        style = "" if line.startswith(f"{framework}: ") else "dim"
        err_console.print(escape(line), style=style, highlight=False)

    try:
        info, made = create_env(framework, settings.cache_dir, rebuild=rebuild, log=progress)
    except EnvBuildError as exc:
        err_console.print(f"mlscope: {escape(str(exc))}; its last lines:", highlight=False)
        err_console.print(escape(exc.log), highlight=False)
        return 1
    state = "made" if made else "already there"
    console.print(
        f"{info.framework} {info.version}: environment {escape(str(info.directory))} ({state}, "
        f"{time.monotonic() - started:.1f} s); python {escape(str(info.python))}",
        highlight=False,
    )
    return 0


@env.command("list")
@json_flag("Print one JSON line per environment.")
def env_list(as_json: bool) -> None:
    """List the framework environments and the framework version each holds."""
    from mlscope.workers.envs import list_envs

    found = list_envs(load_settings().cache_dir)
    if as_json:
        print_json_lines(info.to_dict() for info in found)
        return
    columns = ("framework", "version", "python", "pins", "created", "directory")
    table = new_table(f"{len(found)} framework environments", columns)
    for info in found:
        table.add_row(
            info.framework,
            info.version,
            info.python_version,
            info.pins_hash,
            info.created,
            escape(str(info.directory)),
        )
    console.print(table)
