"""How charts name what they draw: an evaluation, a point (scenario, batch size), and the invalid ones.

Shared by the chart builders (chart_builders.py, chart_traces.py), so a legend says the same thing on
every chart, and an invalid point is named "(invalid)" and counted in a note on each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mlscope.analysis.charts import INVALID
from mlscope.contract.workload import display_name

__all__ = [
    "INVALID",
    "evaluation_id",
    "evaluation_label",
    "invalid_note",
    "is_valid",
    "point_name",
    "short_reasons",
]


def evaluation_id(evaluation: Mapping[str, Any]) -> str:
    return str(evaluation.get("id", "?"))


def evaluation_label(evaluation: Mapping[str, Any]) -> str:
    """`resnet18 · onnxruntime 1.17.0 · host-1`: what an evaluation is, for a title or a legend (the
    model by its display name, `hf:gpt2[n_layer=2]` when configured)."""
    framework = evaluation.get("framework") or {}
    version = f" {framework['version']}" if framework.get("version") else ""
    system = evaluation.get("system") or {}
    where = system.get("agent_id") or system.get("hostname") or (system.get("id") or "")[:8]
    parts = [display_name(evaluation), f"{framework.get('name', '?')}{version}"]
    return " · ".join(parts + ([str(where)] if where else []))


def point_name(measurement: Mapping[str, Any]) -> str:
    """`single_stream · batch 4`."""
    return f"{measurement['scenario']} · batch {measurement['batch_size']}"


def is_valid(measurement: Mapping[str, Any]) -> bool:
    """Whether a measurement's validity verdict says valid (one without a verdict counts as valid)."""
    return bool((measurement.get("validity") or {}).get("valid", True))


def invalid_note(points: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[str, ...]:
    """ "2 of 4 points invalid: single_stream · batch 8 (too few samples); ..." for the (name,
    measurement) pairs drawn, or nothing when every one is valid."""
    invalid = [(name, m) for name, m in points if not is_valid(m)]
    if not invalid:
        return ()
    reasons = "; ".join(f"{name} ({short_reasons(m)})" for name, m in invalid)
    return (f"{len(invalid)} of {len(points)} points invalid: {reasons}",)


def short_reasons(measurement: Mapping[str, Any]) -> str:
    """A measurement's validity reasons, each cut at its details ("variable: CV 0.42 > 0.25" →
    "variable"), so a note stays a line or two; the series' hover text keeps them whole."""
    reasons = (measurement.get("validity") or {}).get("reasons") or ["no reason recorded"]
    return ", ".join(str(reason).split(": ")[0].split(" (")[0] for reason in reasons)
