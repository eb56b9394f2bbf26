"""`KEY=VALUE` options (`--measure`, `--load`, `--generation`, `--option`): parsed one way for all."""

from __future__ import annotations

import json
from typing import Any

import click

__all__ = ["parse_key_values", "with_flags"]


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


def with_flags(
    pairs: dict[str, Any], flag_settings: tuple[tuple[str, str], ...], flags: dict[str, Any]
) -> dict[str, Any]:
    """A settings document from `--SECTION KEY=VALUE` pairs and the options of its own settings:
    (parameter, setting) in `flag_settings`; a flag set wins, an unset one (None, or a switch left
    off) says nothing."""
    document = dict(pairs)
    for parameter, setting in flag_settings:
        value = flags.get(parameter)
        if value is not None and value is not False:  # not `in (None, False)`: 0 == False
            document[setting] = value
    return document
