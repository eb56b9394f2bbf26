"""Change points of a benchmark series: where a run-to-run series of medians shifted, by how much, and
how sure we are that it did.

The method is E-divisive means (Matteson & James 2014, "A nonparametric approach for multiple change
point analysis of multivariate data"), as MongoDB's performance team runs it on their CI results: the
split of a series that maximises the energy distance between the points before and after it, kept
when a permutation test says a split that large is unlikely in the same points shuffled, then the
same within each side (hierarchically) until a split is not significant.

Why this and not a Bayesian online detector (Adams & MacKay 2007): benchmark medians are skewed and
heavy-tailed (a busy neighbour, a thermal dip), and an online detector needs a likelihood model of
them and a hazard rate, each of which, wrong, shows as false alarms; E-divisive assumes no
distribution, its one tuning knob is a significance level with a meaning, and its answer (a p-value
per change point) is what a verdict needs to state. We analyse stored history, not a live stream, so
the online detector's strength (one pass as points arrive) buys nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mlscope.contract.errors import UserError

__all__ = ["ChangePoint", "DetectionSettings", "detect_change_points", "points_needed"]


@dataclass(frozen=True)
class DetectionSettings:
    """How change points are looked for; each field is checked on creation.

    Attributes:
        significance: a split is kept when its permutation p-value is at most this (0 < x < 1).
            0.01 by default: at 0.05 about one flat series in twenty shows a change point that is
            not there, at 0.01 one in seventy, for a little less power (docs/history.md).
        min_segment: the fewest points on either side of a change point (2 or more): fewer and one
            outlier run would pass for a shift.
        permutations: how many shuffles the permutation test draws (19 or more); the smallest
            p-value it can give is 1 / (permutations + 1).
        seed: the shuffles' seed, so that the same series always gives the same answer.
        valid_only: look for change points among the points whose measurement mlscope found valid
            only (analysis.history applies it; the values given to detect_change_points are used
            as they are): a point measured on a busy machine can pass for a shift.
    """

    significance: float = 0.01
    min_segment: int = 5
    permutations: int = 199
    seed: int = 0
    valid_only: bool = False

    def __post_init__(self) -> None:
        significance: object = self.significance
        if isinstance(significance, bool) or not (
            isinstance(significance, (int, float)) and 0 < significance < 1
        ):
            message = f"significance={self.significance!r} must be a number between 0 and 1 (0.01: 1%)"
            raise UserError(message, field="significance")
        for field, low in (("min_segment", 2), ("permutations", 19), ("seed", 0)):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UserError(f"{field}={value!r} must be an integer, {low} or more", field=field)
        if not isinstance(self.valid_only, bool):
            raise UserError(f"valid_only={self.valid_only!r} must be true or false", field="valid_only")


@dataclass(frozen=True)
class ChangePoint:
    """Where a series shifted.

    Attributes:
        index: the position of the first point after the shift.
        median_before, median_after: the medians of the segments either side of it (up to the
            neighbouring change points).
        ratio: median_after / median_before (above 1: the values went up).
        p_value: the permutation test's p-value for the split; confidence is 1 − p_value.
    """

    index: int
    median_before: float
    median_after: float
    p_value: float

    @property
    def ratio(self) -> float:
        return self.median_after / self.median_before

    @property
    def shift_pct(self) -> float:
        """The shift as a percentage of the value before it (+3.0: 3% higher after)."""
        return (self.ratio - 1.0) * 100.0

    @property
    def confidence(self) -> float:
        return 1.0 - self.p_value


def points_needed(settings: DetectionSettings) -> int:
    """The fewest points a series must have for one change point to be testable."""
    return 2 * settings.min_segment


def detect_change_points(
    values: Sequence[float], settings: DetectionSettings | None = None
) -> list[ChangePoint]:
    """The change points of `values` (a series in time order), by E-divisive means with a permutation
    test, in order of position.

    Raises:
        UserError: (field "series") when the series is shorter than points_needed, saying how many
            more points it needs; when a value is not a finite number.
    """
    settings = settings or DetectionSettings()
    series = _checked_series(values, settings)
    rng = np.random.default_rng(settings.seed)
    cuts: dict[int, float] = {}
    segments = [(0, len(series))]
    while True:
        candidates = []
        for start, end in segments:
            best = _best_split(series[start:end], settings.min_segment)
            if best is not None:
                candidates.append((best[1], start + best[0], start, end))
        if not candidates:
            break
        statistic, cut, start, end = max(candidates)
        p_value = _permutation_p_value(series[start:end], statistic, settings, rng)
        if p_value > settings.significance:
            break
        cuts[cut] = p_value
        segments.remove((start, end))
        segments += [(start, cut), (cut, end)]
    return _described(series, cuts)


def _checked_series(values: Sequence[float], settings: DetectionSettings) -> np.ndarray:
    series = np.asarray(values, dtype=float)
    needed = points_needed(settings)
    if series.ndim != 1 or len(series) < needed:
        count = len(series) if series.ndim == 1 else 0
        raise UserError(
            f"the series has {count} point(s); change-point detection needs at least {needed} "
            f"({needed - count} more) with a minimum segment of {settings.min_segment}",
            field="series",
        )
    if not np.all(np.isfinite(series)):
        raise UserError("the series holds a value that is not a finite number", field="series")
    return series


class _Splitter:
    """The E-divisive statistic of every split of segments of one length, with the n × n distance
    matrix and its triangle mask allocated once: a permutation test computes it hundreds of times,
    and a fresh 8 MB matrix each time (n = 1000) costs four times the arithmetic."""

    def __init__(self, length: int, min_segment: int) -> None:
        self.min_segment = min_segment
        self._distances = np.empty((length, length))
        self._upper = np.triu(np.ones((length, length)), 1)
        self._tau = np.arange(min_segment, length - min_segment + 1)

    def statistics(self, values: np.ndarray) -> np.ndarray:
        """Q(τ) of every split τ in [min_segment, n − min_segment] (the points before τ against those
        from τ to the end), in O(n²) from cumulative sums of the distance matrix.

        Q(τ) = τm/n · (2/(τm)·Σ|x−y| − 1/C(τ,2)·Σ|x−x'| − 1/C(m,2)·Σ|y−y'|), m = n − τ: the energy
        distance between the two sides (exponent α = 1), scaled by their sizes.
        """
        n, distances = len(values), self._distances
        np.abs(np.subtract.outer(values, values, out=distances), out=distances)
        row_totals = distances.sum(axis=1)
        # Per point j: its distances to the points before it (earlier) and after it (later).
        earlier = np.multiply(distances, self._upper, out=distances).sum(axis=0)
        later = row_totals - earlier
        # within_left[τ]: the distances between points before τ; within_right[τ]: between points from τ.
        within_left = np.concatenate(([0.0], np.cumsum(earlier)))
        within_right = np.concatenate((np.cumsum(later[::-1])[::-1], [0.0]))
        between = within_left[-1] - within_left - within_right
        tau = self._tau
        m = n - tau
        energy = (
            2 * between[tau] / (tau * m)
            - 2 * within_left[tau] / (tau * (tau - 1))
            - 2 * within_right[tau] / (m * (m - 1))
        )
        statistics: np.ndarray = tau * m / n * energy
        return statistics

    def best_split(self, values: np.ndarray) -> tuple[int, float]:
        """(τ, Q(τ)) of the split that maximises the statistic."""
        statistics = self.statistics(values)
        best = int(np.argmax(statistics))
        return self.min_segment + best, float(statistics[best])


def _best_split(values: np.ndarray, min_segment: int) -> tuple[int, float] | None:
    """(τ, Q(τ)) of the segment's best split; None when the segment is too short to split."""
    if len(values) < 2 * min_segment:
        return None
    return _Splitter(len(values), min_segment).best_split(values)


def _permutation_p_value(
    values: np.ndarray, statistic: float, settings: DetectionSettings, rng: np.random.Generator
) -> float:
    """How often the best split of the segment shuffled is at least as large as `statistic`,
    (exceeded + 1) / (permutations + 1) so that it is never 0.

    Stops early once the p-value can no longer reach the significance level (the split is then
    rejected whatever the remaining shuffles give), which most of a flat series' tests do.
    """
    splitter = _Splitter(len(values), settings.min_segment)
    allowed = settings.significance * (settings.permutations + 1) - 1
    exceeded = 0
    for _ in range(settings.permutations):
        exceeded += splitter.best_split(rng.permutation(values))[1] >= statistic
        if exceeded > allowed:
            return 1.0
    return (exceeded + 1) / (settings.permutations + 1)


def _described(series: np.ndarray, cuts: dict[int, float]) -> list[ChangePoint]:
    """Each cut with the medians of the segments either side of it."""
    bounds = [0, *sorted(cuts), len(series)]
    return [
        ChangePoint(
            index=cut,
            median_before=float(np.median(series[before:cut])),
            median_after=float(np.median(series[cut:after])),
            p_value=cuts[cut],
        )
        for before, cut, after in zip(bounds, bounds[1:-1], bounds[2:], strict=False)
    ]
