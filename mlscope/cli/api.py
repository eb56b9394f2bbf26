"""`mlscope api`: serve the HTTP API of the farm and its dashboard."""

from __future__ import annotations

import logging

import click

from mlscope.cli.render import log_to_stderr
from mlscope.contract.settings import load_settings

__all__ = ["QUIET_LOGGERS", "api"]

# Libraries whose INFO lines say nothing a person starting the api needs (Alembic names its migration
# context on every start): they log at WARNING unless --verbose.
QUIET_LOGGERS = ("alembic",)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=8000, show_default=True, help="Port to listen on.")
@click.option("--threads", type=click.IntRange(min=1), default=8, show_default=True, help="Request threads.")
@click.option("-v", "--verbose", is_flag=True, help="Also log libraries' INFO lines (Alembic's).")
def api(host: str, port: int, threads: int, verbose: bool) -> None:
    """Serve the HTTP API (/api/v1, OpenAPI at /api/openapi.json, docs at /api/docs).

    The dashboard is served at /, and the start's log line names its URL."""
    from mlscope.api import serve

    log_to_stderr("INFO")
    if not verbose:
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    serve(load_settings(), host=host, port=port, threads=threads)
