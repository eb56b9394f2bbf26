"""`mlscope store status|upgrade`: the results store's schema version, and upgrading a store an older
mlscope wrote (docs/store.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from mlscope.cli.options import json_flag
from mlscope.cli.render import print_json_line
from mlscope.contract.settings import load_settings

__all__ = ["store"]

F = TypeVar("F", bound=Callable[..., Any])


def _store_url_option(command: F) -> F:
    return click.option(
        "--store-url",
        metavar="URL",
        help="The store [default: MLSCOPE_STORE_URL, else the settings file's store_url, else the "
        "embedded SQLite store].",
    )(command)


def _open(store_url: str | None) -> Any:
    from mlscope.store import open_store

    # Opened as it is: an older store must stay reachable to be upgraded.
    return open_store(store_url or load_settings().store_url, check_schema=False)


@click.group()
def store() -> None:
    """The results store's schema: which version a store has, and upgrading it."""


@store.command("status")
@_store_url_option
@json_flag("Print the status as one JSON object.")
def store_status(store_url: str | None, as_json: bool) -> None:
    """Show the store's schema version, the one this mlscope needs, and whether to upgrade."""
    with _open(store_url) as opened:
        status = opened.schema_status()
    if as_json:
        print_json_line(status)
        return
    current = status["current"] or "-"
    if status["note"]:
        current = f"{current} ({status['note']})"
    click.echo(f"store     {status['store_url']} ({status['backend']})")
    click.echo(f"schema    {current}")
    click.echo(f"required  {status['required']}")
    if status["state"] == "current":
        click.echo("up to date: nothing to upgrade")
    elif status["state"] == "empty":
        click.echo(
            "empty: the schema is created when the store is first used (or by `mlscope store upgrade`)"
        )
    elif status["upgrade_needed"]:
        click.echo("upgrade needed: run `mlscope store upgrade`")
    else:
        click.echo(f"cannot be used: {status['message']}")


@store.command("upgrade")
@_store_url_option
@json_flag("Print what was done as one JSON object.")
def store_upgrade(store_url: str | None, as_json: bool) -> None:
    """Upgrade the store to the schema this mlscope needs (a no-op when it has it).

    The stored rows are kept and given the new fields; a SQLite file is first copied beside itself
    (<file>.before-upgrade-<schema>). A failed upgrade is rolled back. A store written by a newer
    mlscope, or another application's database, is refused (exit code 2).
    """
    with _open(store_url) as opened:
        done = opened.upgrade()
    if as_json:
        print_json_line(done)
        return
    where = f"the store at {done['store_url']}"
    if not done["upgraded"]:
        click.echo(f"{where} has schema {done['to']} already: nothing to do")
        return
    if done["from"] is None:
        click.echo(f"{where} was empty: created schema {done['to']}")
        return
    click.echo(
        f"upgraded {where} from schema {done['from']} to {done['to']} "
        f"(applied {', '.join(done['steps'])}): {done['backfilled']} measurements backfilled"
    )
    if done["backup"]:
        click.echo(f"a copy of the store from before the upgrade is at {done['backup']}")
