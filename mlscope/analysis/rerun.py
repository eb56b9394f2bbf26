"""Reproducibility: what a rerun of a stored evaluation submits, and what differs between the
recorded result and the rerun's besides the measurement itself.

A rerun re-submits the recorded request unchanged (settings, runner, scenarios, batch sizes, load);
what it cannot force (the model's manifest, the framework's version, the predictor image, the
system) it checks: each differing pin is named, so a diff that reports "slower" says whether the
machine or the software moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlscope.contract.errors import UserError

__all__ = ["PINS", "pin_changes", "pins", "rerun_request"]

# What identifies the software and place a result was measured with, by a readable name.
PINS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model manifest", ("model", "manifest_sha256")),
    ("framework version", ("framework", "version")),
    ("predictor image", ("framework", "image", "id")),
    ("runner", ("runner",)),
    ("device", ("device",)),
    ("system", ("system", "id")),
)


def _dig(record: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = record
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def pins(result: Mapping[str, Any]) -> dict[str, Any]:
    """The pins of one result (docs/design.md's result shape), by name; None where it has none (an image
    only for the docker runner)."""
    return {name: _dig(result, path) for name, path in PINS}


def pin_changes(recorded: Mapping[str, Any], rerun: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pins that differ between a recorded result and its rerun: [{"pin", "recorded", "now"}].

    A pin the rerun does not report (a failed rerun has no framework version) is not a change.
    """
    before, after = pins(recorded), pins(rerun)
    return [
        {"pin": name, "recorded": before[name], "now": after[name]}
        for name, _ in PINS
        if after[name] is not None and before[name] != after[name]
    ]


def rerun_request(recorded: Mapping[str, Any], target: str | None = None) -> dict[str, Any]:
    """The request to submit again: the recorded one as it was stored, aimed at `target` (a
    capability or agent:<id>) when given, else wherever it is run.

    Raises:
        UserError: the evaluation carries no request to repeat (stored by something other than a
            request, e.g. imported).
    """
    request = recorded.get("request")
    if not isinstance(request, Mapping) or not request.get("model") or not request.get("framework"):
        raise UserError(
            f"evaluation {recorded.get('id')} has no recorded request to rerun "
            "(it was stored without one); run it afresh with `mlscope run`",
            field="id",
        )
    document = dict(request)
    document["target"] = target
    return document
