"""A model's latency from its bricks' (DLBricks), and its lower bounds (Benanza, arXiv 1911.06922).

Each brick's measured runs include one session run's fixed cost. The calibration brick (one
Identity on one float) measures that run plus one node's dispatch d; d itself is calibrated apart (a
chain of tiny Adds, per node). So the run alone costs call − d, and the model pays the run once.

The estimate is made of medians (what a layer typically costs):

    layer time     = brick median − (call median − d)                  (never below zero)
    estimate       = Σ layer time + (call median − d)

The bounds are made of the least each layer can cost, because a lower bound must come from runs no
slower than the layer can go in its model. A median includes the preemptions and cache misses of a
typical run; and a brick's flushed runs (its weights out of the core's caches, as in a model where
other layers ran since) are slower than the same layer in a small model whose weights stay in those
caches: a path built from medians, or even from the flushed runs' fastest, can come out above the
model's measured latency, which a bound must never do (docs/bricks.md shows where it did). So
each brick also runs a few times back to back with nothing flushed (`mlscope.runtime.bricks`'s hot
runs), and its fastest hot run is the least it costs. The run cost taken off it is the calibration
brick's least, measured the same way (its median would take off more than a hot run pays: the tiny
layers of a small model then bound at zero):

    bound time     = brick's fastest hot run − (call's fastest hot run − d)   (never below zero; a brick
                     stored before hot runs were recorded: its fastest flushed run; none: its median)
    sequential     = Σ bound time                                      (Benanza's sequential bound)
    critical path  = the longest path of bound times over the layer DAG   (the parallel bound)
    overhead       = measured − sequential        (what the framework adds around the layers; the
                     caller's, in `mlscope bricks`)

A layer costed as a fixed time (one dispatch d, itself from fastest runs) is that time in both.

The interval: each brick's median has a confidence interval; its standard error is taken as the
interval's half-width / z. A brick used k times in a model adds k times its error (the same
measurement, so fully correlated), distinct bricks add in quadrature (independent measurements), and
the call cost's error counts (n − 1) times, subtracted once per brick run but the first. The result,
estimate ± z·√Σ, is the interval of the measurement noise only: it says nothing of how far the sum of
isolated layers is from the model run whole (cache state, thread hand-offs), which is the error
`mlscope bricks` reports against the measured latency. Its standard error, √Σ, is one of the two
terms of the prediction interval (interval.py); the other is that systematic error, calibrated.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ["BrickTime", "Composition", "compose", "critical_path"]


@dataclass(frozen=True)
class BrickTime:
    """A brick's measured median latency, the confidence interval of that median, and the least it can
    cost (its fastest hot run; None: not recorded, the median stands in for it), ms."""

    median_ms: float
    ci_ms: tuple[float, float]
    confidence: float = 0.95
    min_ms: float | None = None

    @property
    def fastest_ms(self) -> float:
        """The fastest run, or the median where none was recorded."""
        return self.median_ms if self.min_ms is None else self.min_ms

    @property
    def stderr_ms(self) -> float:
        z = NormalDist().inv_cdf(0.5 + self.confidence / 2)
        return max(self.ci_ms[1] - self.ci_ms[0], 0.0) / (2 * z)


@dataclass(frozen=True)
class Composition:
    estimate_ms: float
    estimate_ci: tuple[float, float]
    # The estimate's standard error from its bricks' measurement noise (the interval's √Σ), ms.
    estimate_se_ms: float
    sequential_ms: float
    critical_path_ms: float
    # Each layer's time in the estimate (from medians), and in the bounds (from fastest runs).
    layer_ms: list[float]
    bound_layer_ms: list[float]


def critical_path(weights: Sequence[float], edges: Sequence[tuple[int, int]]) -> float:
    """The heaviest path's weight in the DAG of nodes 0..n-1, `edges` as (from, to) pairs.

    Raises:
        ValueError: the edges make a cycle.
    """
    following: dict[int, list[int]] = {}
    waiting = [0] * len(weights)
    for start, end in edges:
        following.setdefault(start, []).append(end)
        waiting[end] += 1
    longest = list(weights)
    ready = [node for node, count in enumerate(waiting) if count == 0]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for end in following.get(node, ()):
            longest[end] = max(longest[end], longest[node] + weights[end])
            waiting[end] -= 1
            if waiting[end] == 0:
                ready.append(end)
    if done != len(weights):
        raise ValueError("the layer graph has a cycle")
    return max(longest, default=0.0)


def compose(
    layer_bricks: Sequence[str | float | None],
    times: Mapping[str, BrickTime],
    edges: Sequence[tuple[int, int]],
    call: BrickTime,
    confidence: float = 0.95,
    dispatch_ms: float = 0.0,
) -> Composition:
    """The estimate and bounds of a model whose i-th layer is brick `layer_bricks[i]` (a float: a
    layer of that fixed cost in ms, such as one node dispatch; None: one that costs nothing), from
    the bricks' `times`, the calibrated `call` cost and the `dispatch_ms` of one node within it.

    The estimate and its interval come from the medians; the bounds from the least each brick can
    cost (the module docstring says why)."""
    run_ms = max(call.median_ms - dispatch_ms, 0.0)
    least_run_ms = max(call.fastest_ms - dispatch_ms, 0.0)

    def layer_times(brick_ms: Callable[[BrickTime], float], run: float) -> list[float]:
        return [
            key if isinstance(key, float) else 0.0 if key is None else max(brick_ms(times[key]) - run, 0.0)
            for key in layer_bricks
        ]

    layer_ms = layer_times(lambda brick: brick.median_ms, run_ms)
    bound_layer_ms = layer_times(lambda brick: brick.fastest_ms, least_run_ms)
    runs = sum(isinstance(key, str) for key in layer_bricks)
    estimate = math.fsum(layer_ms) + run_ms
    uses = Counter(key for key in layer_bricks if isinstance(key, str))
    variance = math.fsum((count * times[key].stderr_ms) ** 2 for key, count in uses.items())
    variance += (max(runs - 1, 0) * call.stderr_ms) ** 2
    half = NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(variance)
    return Composition(
        estimate_ms=estimate,
        estimate_ci=(max(estimate - half, 0.0), estimate + half),
        estimate_se_ms=math.sqrt(variance),
        sequential_ms=math.fsum(bound_layer_ms),
        critical_path_ms=critical_path(bound_layer_ms, edges),
        layer_ms=layer_ms,
        bound_layer_ms=bound_layer_ms,
    )
