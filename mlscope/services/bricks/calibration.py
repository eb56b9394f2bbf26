"""The pairs `mlscope bricks` calibrates its prediction intervals on (`mlscope.analysis.bricks.interval`):
each estimate beside the latency its model then measured whole, per system and setup.

The store keeps the whole model's evaluation (its id is in the pair) and every brick, but not the
estimate, which exists only in the report. So each report with an estimate and a measured latency
appends one JSON line to a pair log, `<cache>/bricks/pairs.jsonl` by default (beside the brick
models), and a later report reads the pairs of its own setup back:

    setup = system id, framework, framework version (without a build's local tag), threads, device

A brick estimate is only as good as its system's past estimates say, and those are not comparable
across setups. A line that does not parse (a write cut short) is skipped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlscope.analysis.bricks.interval import (
    DEFAULT_LOG_SPREAD,
    NOMINAL,
    Calibration,
    Pair,
    calibration_set,
    leave_one_out,
    prediction_interval,
)

__all__ = ["PAIRS_FILE", "PairLog", "interval_section", "setup_of"]

# The pair log's place under the cache directory.
PAIRS_FILE = Path("bricks") / "pairs.jsonl"


def setup_of(
    system_id: str | None, framework: str, version: str, threads: int | None, device: str
) -> dict[str, Any]:
    """What a pair is comparable by: the same system measuring the same way."""
    return {
        "system_id": system_id,
        "framework": framework,
        "version": version.split("+")[0],
        "threads": threads,
        "device": device,
    }


@dataclass
class PairLog:
    """Estimate-vs-measured pairs, one JSON object a line, oldest first."""

    path: Path

    def pairs(self, setup: Mapping[str, Any]) -> list[Pair]:
        """The pairs of `setup`, oldest first."""
        if not self.path.is_file():
            return []
        found = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                if all(row.get(name) == value for name, value in setup.items()):
                    found.append(
                        Pair(
                            str(row["model"]),
                            float(row["estimate_ms"]),
                            float(row["measured_ms"]),
                            float(row.get("estimate_se_ms") or 0.0),
                        )
                    )
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        return found

    def add(self, setup: Mapping[str, Any], pair: Pair, **more: Any) -> None:
        """Append `pair` of `setup` (with `more`: the evaluation's id, the interval given it)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        row = {
            **setup,
            "model": pair.model,
            "estimate_ms": pair.estimate_ms,
            "measured_ms": pair.measured_ms,
            "estimate_se_ms": pair.estimate_se_ms,
            **more,
        }
        line = (json.dumps(row, sort_keys=True, default=str) + "\n").encode()
        if self.path.is_file() and self.path.stat().st_size:
            with self.path.open("rb") as file:  # a line cut short: this one starts on a line of its own
                file.seek(-1, os.SEEK_END)
                line = line if file.read(1) == b"\n" else b"\n" + line
        # One write of one line in append mode: concurrent verbs do not interleave their lines.
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)


def interval_section(
    report: Mapping[str, Any], log: PairLog, setup: Mapping[str, Any], nominal: float = NOMINAL
) -> dict[str, Any]:
    """`interval_ms` and `coverage` of a report with an estimate, from the pairs `log` holds for
    `setup` (never the report's own model's); then the report's own pair is added to `log`, if its
    model was measured whole."""
    model = str(report["model"])
    estimate, se = float(report["estimate_ms"]), float(report.get("estimate_se_ms") or 0.0)
    pairs = calibration_set(log.pairs(setup), exclude=model)
    interval = prediction_interval(estimate, se, Calibration.of(pairs), nominal)
    inside = sum(held.holds(pair.measured_ms) for pair, held in leave_one_out(pairs, nominal))
    calibration = interval.calibration
    coverage: dict[str, Any] = {
        "nominal": nominal,
        "pairs": len(pairs),
        "inside": inside,
        "share": inside / len(pairs) if pairs else None,
        "calibrated": calibration.calibrated,
        "centre_log": calibration.centre,
        "spread_log": calibration.spread,
    }
    if not calibration.calibrated:
        coverage["note"] = (
            f"{len(pairs)} stored pair(s) of other models on this system and setup: not calibrated, "
            f"the default log spread {DEFAULT_LOG_SPREAD} stands in"
        )
    measured = report.get("measured_ms")
    if measured:
        log.add(
            setup,
            Pair(model, estimate, float(measured), se),
            evaluation_id=report.get("evaluation_id"),
            interval_ms=[interval.low_ms, interval.high_ms],
            inside=interval.holds(float(measured)),
        )
    return {"interval_ms": [interval.low_ms, interval.high_ms], "coverage": coverage}
