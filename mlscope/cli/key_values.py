"""`KEY=VALUE` options (`--measure`, `--load`, `--generation`, `--option`): parsed one way for all."""

from __future__ import annotations

import json
from typing import Any

import click

__all__ = ["parse_key_values"]


def parse_key_values(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any]:
    """KEY=VALUE pairs; a value is read as JSON (numbers, true/false, lists) or else kept as text."""
    parsed: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE, e.g. min_seconds=5")
        try:
            parsed[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            parsed[key.strip()] = raw
    return parsed
