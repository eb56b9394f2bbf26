"""`mlscope env create` and `mlscope env list`: the framework environments `--runner process` uses
for a framework not installed beside mlscope (see mlscope.workers.envs)."""

from __future__ import annotations

import time

from rich.markup import escape
from rich.table import Table

from mlscope.cli.render import console, err_console, print_json_line
from mlscope.contract.settings import load_settings
from mlscope.workers.envs import EnvBuildError, create_env, list_envs

__all__ = ["create_command", "list_command"]


def create_command(framework: str, *, rebuild: bool) -> int:
    """Make (or reuse) the environment of a framework and say where it is.

    A UserError (unknown framework, no pins file) propagates: the CLI prints it and exits with 2.

    Returns:
        0 when the environment is ready, 1 when pip or venv failed (their last lines are printed).
    """
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


def list_command(*, as_json: bool) -> None:
    """Print every finished framework environment under the cache directory."""
    settings = load_settings()
    found = list_envs(settings.cache_dir)
    if as_json:
        for info in found:
            print_json_line(info.to_dict())
        return
    table = Table(title=f"{len(found)} framework environments", title_justify="left")
    for column in ("framework", "version", "python", "pins", "created", "directory"):
        table.add_column(column)
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
