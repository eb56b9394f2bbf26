"""`mlscope api`: serve the HTTP API of the farm."""

from __future__ import annotations

import click

from mlscope.cli.render import log_to_stderr
from mlscope.contract.settings import load_settings

__all__ = ["api"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=8000, show_default=True, help="Port to listen on.")
@click.option("--threads", type=click.IntRange(min=1), default=8, show_default=True, help="Request threads.")
def api(host: str, port: int, threads: int) -> None:
    """Serve the HTTP API (/api/v1, OpenAPI at /api/openapi.json, docs at /api/docs)."""
    from mlscope.api import serve

    log_to_stderr("INFO")
    serve(load_settings(), host=host, port=port, threads=threads)
