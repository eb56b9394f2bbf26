"""A sweep of the generate scenario: one point per value of concurrency or qps, kept as one
measurement, and the throughput-latency trade-off they draw with its Pareto front.

Each point is measured as the generate scenario measures one (closed-loop until stable for a
concurrency, Poisson arrivals for a rate; certified against the SLO where there is one). The stored
measurement is the last point's (the highest load), with every point's figures under
`generation.sweep.points`; it is valid only when every point is, and says which were not.

The trade-off, for generation: output tokens per second per user (1000 / the median TPOT: how fast
one user sees its answer stream) on x, output tokens per second in all on y; for a pooling API, whose
answers have no tokens, requests per second per user (1000 / the median end-to-end latency) against
requests per second. Both are better higher, so a point is on the Pareto front when no other point is
at least as good on both and better on one (docs/generate.md, "Sweeps").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from mlscope.contract.generation import GenerationSettings
from mlscope.contract.load import LoadSettings

__all__ = ["pareto_front", "run_sweep", "sweep_axes", "sweep_point"]


def pareto_front(points: Sequence[tuple[float | None, float | None]]) -> list[int]:
    """The indices of `points` (x, y), both better higher, that no other point dominates (at least
    as high on both, higher on one); a point missing either figure is never on it. In index order;
    of equal points, each is on the front."""
    front = []
    for i, (x, y) in enumerate(points):
        if x is None or y is None:
            continue
        dominated = any(
            ox is not None and oy is not None and ox >= x and oy >= y and (ox > x or oy > y)
            for j, (ox, oy) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return front


def sweep_axes(generation: dict[str, Any]) -> tuple[str, str]:
    """The x and y figures' names of a point of this `generation` section (see the module)."""
    if "tpot_ms" in (generation.get("not_applicable") or ()):
        return "requests_per_s_per_user", "requests_per_s"
    return "output_tokens_per_s_per_user", "output_tokens_per_s"


def sweep_point(setting: str, value: float, measurement: dict[str, Any]) -> dict[str, Any]:
    """What a sweep keeps of one point's measurement: the value, its throughput figures on both
    axes, the latencies' medians and p99s, goodput, certificates, failures and validity."""
    generation = measurement.get("generation") or {}
    tpot = (generation.get("tpot_ms") or {}).get("median")
    e2e = (generation.get("e2e_ms") or {}).get("median")
    point: dict[str, Any] = {
        setting: value,
        "output_tokens_per_s_per_user": 1000.0 / tpot if tpot else None,
        "output_tokens_per_s": generation.get("output_tokens_per_s"),
        "requests_per_s_per_user": 1000.0 / e2e if e2e else None,
        "requests_per_s": generation.get("requests_per_s"),
        "requests": generation.get("requests"),
        "failed": (generation.get("failed_requests") or {}).get("count"),
        "valid": bool((measurement.get("validity") or {}).get("valid")),
        "reasons": list((measurement.get("validity") or {}).get("reasons") or []),
    }
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        summary = generation.get(metric) or {}
        point[metric] = {"median": summary.get("median"), "p99": summary.get("p99")}
    for key in ("goodput", "goodput_fraction", "certified"):
        if key in generation:
            point[key] = generation[key]
    if "load" in measurement:
        point["achieved_qps"] = measurement["load"].get("achieved_qps")
    return point


def run_sweep(
    settings: GenerationSettings,
    load: LoadSettings,
    measure_point: Callable[[GenerationSettings, LoadSettings], dict[str, Any]],
    on_point: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Measure one point per value of `load.sweep` with `measure_point` (the generate scenario's
    one-point run) and keep them as one measurement (see the module); `on_point` hears of each."""
    assert load.sweep is not None
    setting, values = load.sweep["setting"], load.sweep["values"]
    points, last = [], None
    for value in values:
        if setting == "concurrency":
            here = dataclasses.replace(settings, concurrency=int(value))
            at = dataclasses.replace(load, sweep=None)
        else:
            here, at = settings, dataclasses.replace(load, sweep=None, qps=float(value))
        last = measure_point(here, at)
        points.append(sweep_point(setting, value, last))
        if on_point is not None:
            on_point(points[-1])
    assert last is not None
    x, y = sweep_axes(last.get("generation") or {})
    front = pareto_front([(p[x], p[y]) for p in points])
    for index, point in enumerate(points):
        point["pareto"] = index in front
    last["generation"]["sweep"] = {
        "setting": setting,
        "values": list(values),
        "x": x,
        "y": y,
        "points": points,
    }
    # The last point's own reasons are its measurement's; the others' first reasons are added.
    for point in points[:-1]:
        if not point["valid"]:
            first = point["reasons"][0] if point["reasons"] else "not valid"
            validity = last["validity"]
            validity["valid"] = False
            validity["reasons"] = [
                *validity.get("reasons", []),
                f"sweep point {setting}={point[setting]:g}: {first}",
            ]
    return last
