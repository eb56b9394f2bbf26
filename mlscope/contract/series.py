"""What names a history series and how many of its points a read returns by default (docs/history.md):
the names the HTTP parameters, the CLI's options and the store share. A series is on one machine and
one software stack (contract.system_ids), whichever system ids (hosts, agents, containers) measured it."""

from __future__ import annotations

__all__ = ["DEFAULT_HISTORY_POINTS", "MAX_HISTORY_POINTS", "SERIES_KEY_FIELDS"]

DEFAULT_HISTORY_POINTS = 1000
MAX_HISTORY_POINTS = 10_000
# What names one series, in the order `Store.history_series` returns them.
SERIES_KEY_FIELDS: tuple[str, ...] = (
    "model",
    "manifest_sha256",
    "framework",
    "framework_version",
    "machine_id",
    "stack_id",
    "device",
    "scenario",
    "batch_size",
)
