"""Early stopping: MLPerf LoadGen's rule for certifying a latency percentile from a finite run.

Owns the binomial test LoadGen applies after a run (``loadgen/early_stopping.cc`` and
``PerformanceSummary::EarlyStopping`` in ``loadgen/results.cc``): `min_passing` (LoadGen's
``find_min_passing``), `min_queries`, the single/multi-stream percentile estimate
(`estimate_percentile`), the server-style verdict against a latency bound (`certify_bound`), the
`Certificate` both return, and mlscope's mirror test for ending a failing probe early
(`certainly_fails`).

The rule: with ``t`` queries over the bound and ``h`` under it, the ``p`` percentile is certified at
confidence ``c`` when a system whose true ``p`` percentile sat exactly at the bound would show ``t`` or
fewer over-bound queries with probability below ``1 - c``:
``odds(h, t, p, d) = P(Binomial(h + t, 1 - (p - d)) <= t) < 1 - c`` (LoadGen writes it as
``BetaRegularized(p - d, h, 1 + t)``). The binomial CDF is summed here in log space.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "Certificate",
    "certainly_fails",
    "certify_bound",
    "estimate_percentile",
    "min_passing",
    "min_queries",
]

NS_PER_MS = 1_000_000.0
_LOG_CUTOFF = 60.0  # past the mode, a term this far (natural log) below the sum so far ends the sum


def _check_open(name: str, value: float, top: float = 1.0) -> None:
    if not (isinstance(value, (int, float)) and 0.0 < value < top):
        raise ValueError(f"{name} must be in (0, {top:g}), got {value!r}")


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


def _log_pmf(n: int, q: float, k: int) -> float:
    """log P(Binomial(n, q) = k), 0 <= k <= n, 0 < q < 1."""
    log_choose = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
    return log_choose + k * math.log(q) + (n - k) * math.log1p(-q)


def _log_cdf(n: int, q: float, t: int) -> float:
    """log P(Binomial(n, q) <= t), summing the terms from k = t down with their ratio recurrence."""
    if t >= n:
        return 0.0
    log_odds_down = math.log1p(-q) - math.log(q)  # log of (1 - q) / q
    mode = math.floor((n + 1) * q)
    anchor = _log_pmf(n, q, t)
    total = 1.0  # sum of exp(log term - anchor) so far; the k = t term is 1
    level = 0.0  # log term (relative to anchor) of the last term summed
    k, chunk = t, 256
    while k > 0:
        ks = np.arange(k, max(k - chunk, 0), -1, dtype=np.float64)  # k, k-1, ...: ratio to the term below
        levels = level + np.cumsum(np.log(ks) - np.log(n - ks + 1.0) + log_odds_down)
        top = max(0.0, float(levels.max()))
        if top > 0.0:  # rescale so the largest term is 1: no overflow when t sits above the mode
            anchor += top
            total *= math.exp(-top)
            levels -= top
        total += float(np.exp(levels).sum())
        level = float(levels[-1])
        k -= len(ks)
        if k <= mode and level < math.log(total) - _LOG_CUTOFF:
            break  # past the mode the terms only shrink: the rest is negligible
        chunk *= 2
    return anchor + math.log(total)


def _odds(h: int, t: int, p: float, d: float) -> float:
    """LoadGen's odds: P(Binomial(h + t, 1 - (p - d)) <= t), the chance of t or fewer over-bound queries."""
    return math.exp(_log_cdf(h + t, 1.0 - (p - d), t))


@functools.lru_cache(maxsize=4096)
def _min_passing(t: int, p: float, d: float, c: float) -> int:
    # odds(h, t) falls as h grows and rises with t, so the t = 0 answer (closed form, LoadGen's start)
    # is a lower bound; gallop up from it, then bisect. Invariant: odds(lo) >= 1 - c > odds(hi).
    target = 1.0 - c
    lo = max(1, math.ceil(math.log(target) / math.log(p - d)) - 1)
    if _odds(lo, t, p, d) < target:
        while lo > 1 and _odds(lo - 1, t, p, d) < target:  # only when the closed form rounds high
            lo -= 1
        return lo
    step, hi = lo, 2 * lo
    while _odds(hi, t, p, d) >= target:
        lo, step = hi, step * 2
        hi = lo + step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _odds(mid, t, p, d) < target else (mid, hi)
    return hi


def min_passing(overlatency: int, percentile: float, confidence: float = 0.99, tolerance: float = 0.0) -> int:
    """LoadGen's ``find_min_passing``: the fewest queries under the bound that certify the percentile.

    Args:
        overlatency: t, the number of queries over the latency bound.
        percentile: the percentile as a fraction in (0, 1), e.g. 0.99.
        confidence: the confidence c in (0, 1); LoadGen uses 0.99.
        tolerance: d, subtracted from the percentile; LoadGen uses 0.

    Returns:
        The minimum h with ``P(Binomial(h + t, 1 - (p - d)) <= t) < 1 - c``; ValueError (naming the
        argument) when one is out of range.
    """
    _check_count("overlatency", overlatency)
    _check_open("percentile", percentile)
    _check_open("confidence", confidence)
    if not (isinstance(tolerance, (int, float)) and 0.0 <= tolerance < percentile):
        raise ValueError(f"tolerance must be in [0, percentile), got {tolerance!r}")
    return _min_passing(int(overlatency), float(percentile), float(tolerance), float(confidence))


def min_queries(percentile: float, confidence: float = 0.99) -> int:
    """The fewest queries LoadGen's single/multi-stream early stopping needs for any estimate.

    That is ``min_passing(1, percentile, confidence) + 1``: 64 at p90, 662 at p99 (confidence 0.99).
    """
    return min_passing(1, percentile, confidence) + 1


@dataclass(frozen=True)
class Certificate:
    """The early-stopping verdict on a run's latencies (JSON form: `to_dict`)."""

    percentile: float  # in percent, e.g. 99.0
    confidence: float  # e.g. 0.99
    ok: bool  # the estimate exists (no bound), or the bound is certified
    queries: int  # queries counted, n
    queries_needed: int  # 0 when ok; else how many more queries, all under the bound, would certify it
    estimate_ms: float | None  # an upper confidence bound of the true percentile; None if too few queries
    bound_ms: float | None  # the latency bound certified against; None when estimating only
    over_bound: int | None  # queries over the bound; None when no bound

    def to_dict(self) -> dict[str, Any]:
        """Every field by name, JSON-serialisable."""
        return asdict(self)


def _fraction(percentile_pct: float) -> float:
    """Percent to fraction, rounded so 99.9 gives LoadGen's 0.999 (not 0.9990000000000001)."""
    p = round(percentile_pct / 100.0, 12)
    return p if 0.0 < p < 1.0 else percentile_pct / 100.0


def _as_latencies(latencies_ns: npt.ArrayLike) -> npt.NDArray[np.int64]:
    arr = np.asarray(latencies_ns)
    if arr.ndim != 1:
        raise ValueError(f"latencies_ns must be one-dimensional, got shape {arr.shape}")
    return arr.astype(np.int64, copy=False)


def _estimate_overlatency(n: int, p: float, c: float) -> int:
    """LoadGen's t for n >= min_queries: the largest t with n >= h(t) + t, i.e. odds(n - t, t) < 1 - c.

    Bisects on the odds (one sum, not a search per step); confirms with `_min_passing`, else bisects on it."""

    def passes(t: int, quick: bool) -> bool:
        return _odds(n - t, t, p, 0.0) < 1.0 - c if quick else n >= _min_passing(t, p, 0.0, c) + t

    for quick in (True, False):
        lo, hi = 1, n  # n >= h(lo) + lo holds; n < h(hi) + hi since h >= 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if passes(mid, quick) else (lo, mid)
        if not quick or (passes(lo, False) and not passes(lo + 1, False)):
            break
    return lo


def _estimate_ms(sorted_ns: npt.NDArray[np.int64], p: float, c: float, unfinished: int = 0) -> float | None:
    """The t-th largest of n latencies; unfinished queries count as the largest (None if one is picked)."""
    n = len(sorted_ns) + unfinished
    if n < min_queries(p, c):
        return None
    index = n - _estimate_overlatency(n, p, c)
    return float(sorted_ns[index]) / NS_PER_MS if index < len(sorted_ns) else None


def estimate_percentile(
    latencies_ns: npt.ArrayLike, percentile_pct: float, confidence: float = 0.99
) -> Certificate:
    """LoadGen's single/multi-stream early-stopping estimate of a latency percentile.

    With n queries, t is the largest count with ``n >= min_passing(t) + t``; the estimate is the t-th
    largest latency, an upper bound of the true percentile at the given confidence.

    Args:
        latencies_ns: the queries' latencies in nanoseconds, any order.
        percentile_pct: the percentile in percent, in (0, 100).
        confidence: the confidence in (0, 1).

    Returns:
        A `Certificate` with no bound; not ok (and no estimate) below `min_queries`.
    """
    _check_open("percentile_pct", percentile_pct, 100.0)
    _check_open("confidence", confidence)
    arr = np.sort(_as_latencies(latencies_ns))
    p = _fraction(percentile_pct)
    n = len(arr)
    needed = max(0, min_queries(p, confidence) - n)
    return Certificate(
        percentile=float(percentile_pct),
        confidence=float(confidence),
        ok=needed == 0,
        queries=n,
        queries_needed=needed,
        estimate_ms=_estimate_ms(arr, p, confidence),
        bound_ms=None,
        over_bound=None,
    )


def certify_bound(
    latencies_ns: npt.ArrayLike,
    bound_ms: float,
    percentile_pct: float,
    confidence: float = 0.99,
    unfinished: int = 0,
) -> Certificate:
    """LoadGen's server-scenario verdict: is the percentile certified to be within the bound?

    t counts latencies strictly over the bound plus the ``unfinished`` queries; n is every query;
    the run passes when ``n >= min_passing(t) + t``.

    Args:
        latencies_ns: the completed queries' latencies in nanoseconds, any order.
        bound_ms: the latency bound in milliseconds.
        percentile_pct: the percentile in percent, in (0, 100).
        confidence: the confidence in (0, 1).
        unfinished: queries that never completed; they count as over the bound.

    Returns:
        A `Certificate` against the bound, with the early-stopping estimate when n allows one.
    """
    _check_open("percentile_pct", percentile_pct, 100.0)
    _check_open("confidence", confidence)
    _check_count("unfinished", unfinished)
    if not (isinstance(bound_ms, (int, float)) and math.isfinite(bound_ms) and bound_ms >= 0):
        raise ValueError(f"bound_ms must be a finite number >= 0, got {bound_ms!r}")
    arr = np.sort(_as_latencies(latencies_ns))
    p = _fraction(percentile_pct)
    over = int(len(arr) - np.searchsorted(arr, bound_ms * NS_PER_MS, side="right")) + int(unfinished)
    n = len(arr) + int(unfinished)
    needed = max(0, min_passing(over, p, confidence) + over - n)
    return Certificate(
        percentile=float(percentile_pct),
        confidence=float(confidence),
        ok=needed == 0,
        queries=n,
        queries_needed=needed,
        estimate_ms=_estimate_ms(arr, p, confidence, int(unfinished)),
        bound_ms=float(bound_ms),
        over_bound=over,
    )


def certainly_fails(queries: int, over_bound: int, percentile_pct: float, confidence: float = 0.99) -> bool:
    """Whether a run is already certain to fail its bound (mlscope's addition: LoadGen has no early failure).

    The mirror of the pass test: True when ``P(Binomial(queries, 1 - p) >= over_bound) < 1 - confidence``,
    i.e. even a system exactly at the percentile would rarely show this many over-bound queries, so a
    search probe can stop early.

    Args:
        queries: the queries counted so far.
        over_bound: how many of them were over the bound (at most ``queries``).
        percentile_pct: the percentile in percent, in (0, 100).
        confidence: the confidence in (0, 1).
    """
    _check_count("queries", queries)
    _check_count("over_bound", over_bound)
    _check_open("percentile_pct", percentile_pct, 100.0)
    _check_open("confidence", confidence)
    if over_bound > queries:
        raise ValueError(f"over_bound ({over_bound}) must not exceed queries ({queries})")
    if over_bound == 0:
        return False  # P(X >= 0) = 1
    q = 1.0 - _fraction(percentile_pct)
    n, k = int(queries), int(over_bound)
    # Above the mean the upper tail is P(Binomial(n, p) <= n - k), summed from below its mode; at or
    # below it the tail is about a half or more, so 1 - CDF loses nothing.
    upper = k > n * q
    tail = math.exp(_log_cdf(n, 1.0 - q, n - k)) if upper else -math.expm1(_log_cdf(n, q, k - 1))
    return tail < 1.0 - confidence
