"""The early-stopping rule of mlscope.runtime.measure.certify against MLPerf LoadGen's own answers.

The table below is LoadGen's: its MinPassingQueriesFinder, early_stopping.cc at mlcommons/inference
b66003e10e2db4b8c36a448b0545ec90fcc6e9e9 (the file last changed in 9dee1bfcdc0e1a10de87bb554b3f4d584e8c3e31),
compiled with g++ and called once per case on a fresh finder (d = tolerance). A fresh finder, a finder
reused across the t of a row, and LoadGen's binary search over the whole range [1, 4 (t + 1) h(0) + 100]
gave the same h on every case, so the cache-interpolated search range never cut off the true minimum.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
import pytest

from mlscope.runtime.measure.certify import (
    Certificate,
    certainly_fails,
    certify_bound,
    estimate_percentile,
    min_passing,
    min_queries,
)

# (confidence, tolerance, percentile): [(t, h), ...] -- h = LoadGen's find_min_passing(t, p, d, c).
# fmt: off
LOADGEN_MIN_PASSING: dict[tuple[float, float, float], list[tuple[int, int]]] = {
    (0.99, 0.0, 0.5): [(0, 7), (1, 10), (2, 12), (5, 17), (10, 25), (50, 78), (100, 137), (500, 578),
                       (1000, 1108), (5000, 5237)],
    (0.99, 0.0, 0.9): [(0, 44), (1, 63), (2, 79), (5, 122), (10, 187), (50, 631), (100, 1146), (500, 5018),
                       (1000, 9722), (5000, 46585)],
    (0.99, 0.0, 0.95): [(0, 90), (1, 129), (2, 163), (5, 254), (10, 388), (50, 1322), (100, 2404),
                        (500, 10564), (1000, 20483), (5000, 98256)],
    (0.99, 0.0, 0.99): [(0, 459), (1, 661), (2, 836), (5, 1302), (10, 2000), (50, 6848), (100, 12471),
                        (500, 54927), (1000, 106569), (5000, 511615)],
    (0.99, 0.0, 0.999): [(0, 4603), (1, 6635), (2, 8401), (5, 13100), (10, 20130), (50, 69008),
                         (100, 125726), (500, 554010), (1000, 1075032), (5000, 5161900)],
    (0.95, 0.0, 0.5): [(0, 5), (1, 7), (2, 9), (5, 13), (10, 20), (50, 69), (100, 126), (500, 555),
                       (1000, 1076), (5000, 5167)],
    (0.95, 0.0, 0.9): [(0, 29), (1, 45), (2, 59), (5, 98), (10, 157), (50, 577), (100, 1072), (500, 4865),
                       (1000, 9509), (5000, 46119)],
    (0.95, 0.0, 0.95): [(0, 59), (1, 92), (2, 122), (5, 203), (10, 326), (50, 1210), (100, 2253),
                        (500, 10249), (1000, 20045), (5000, 97299)],
    (0.95, 0.0, 0.99): [(0, 299), (1, 472), (2, 626), (5, 1044), (10, 1683), (50, 6273), (100, 11699),
                        (500, 53319), (1000, 104334), (5000, 506730)],
    (0.95, 0.0, 0.999): [(0, 2995), (1, 4741), (2, 6292), (5, 10506), (10, 16949), (50, 63231),
                         (100, 117971), (500, 537858), (1000, 1052577), (5000, 5112828)],
    (0.99, 0.001, 0.9): [(0, 44), (1, 62), (10, 185), (100, 1133), (1000, 9616)],
    (0.99, 0.001, 0.99): [(0, 417), (1, 600), (10, 1817), (100, 11327), (1000, 96787)],
    (0.95, 0.001, 0.999): [(0, 1497), (1, 2370), (10, 8468), (100, 58931)],
}
# fmt: on
CASES = [(t, p, c, d, h) for (c, d, p), row in LOADGEN_MIN_PASSING.items() for t, h in row]
MS = 1_000_000  # ns per ms


@pytest.mark.parametrize(("t", "p", "c", "d", "h"), CASES)
def test_min_passing_matches_loadgen(t: int, p: float, c: float, d: float, h: int) -> None:
    assert min_passing(t, p, c, d) == h


def exact_odds(h: int, t: int, p: float) -> float:
    """P(Binomial(h + t, 1 - p) <= t), exactly with integers."""
    n, q = h + t, 1 - p
    return sum(math.comb(n, k) * q**k * p ** (n - k) for k in range(t + 1))


@pytest.mark.parametrize(("t", "p", "c"), [(0, 0.9, 0.99), (3, 0.9, 0.95), (7, 0.95, 0.99), (4, 0.5, 0.99)])
def test_min_passing_is_the_formulas_minimum(t: int, p: float, c: float) -> None:
    h = min_passing(t, p, c)
    assert exact_odds(h, t, p) < 1 - c <= exact_odds(h - 1, t, p)


def test_min_queries() -> None:
    assert min_queries(0.90) == 64
    assert min_queries(0.99) == 662  # LoadGen's known minimum for a p99 early-stopping estimate
    assert min_queries(0.99) == min_passing(1, 0.99) + 1


def loadgen_t(n: int, p: float, c: float) -> int:
    """A straight transcription of the SingleStream loop of PerformanceSummary::EarlyStopping."""
    t = 1
    for i in range(2, n + 1):
        if n < min_passing(i, p, c) + i:
            t = i - 1
            break
    return t


@pytest.mark.parametrize(("p_pct", "c"), [(90.0, 0.99), (99.0, 0.99), (95.0, 0.95)])
def test_estimate_percentile_picks_loadgens_t(p_pct: float, c: float) -> None:
    rng = np.random.default_rng(7)
    p = p_pct / 100
    for n in [min_queries(p, c), min_queries(p, c) + 1, *rng.integers(min_queries(p, c), 3000, size=6)]:
        n = int(n)
        lat = rng.permutation(np.arange(1, n + 1, dtype=np.int64) * MS)  # the k-th smallest is k ms
        cert = estimate_percentile(lat, p_pct, c)
        t = loadgen_t(n, p, c)
        assert cert.ok and cert.queries == n and cert.queries_needed == 0
        assert cert.estimate_ms == float(n - t + 1)  # sorted ascending, index n - t
        assert cert.bound_ms is None and cert.over_bound is None


def test_estimate_percentile_large_run() -> None:
    n = 20_000
    lat = np.arange(n, 0, -1, dtype=np.int64) * MS
    assert estimate_percentile(lat, 99.0).estimate_ms == float(n - loadgen_t(n, 0.99, 0.99) + 1)


def test_estimate_percentile_too_few_queries() -> None:
    cert = estimate_percentile(np.arange(600, dtype=np.int64), 99.0)
    assert not cert.ok and cert.estimate_ms is None and cert.queries_needed == 62
    assert estimate_percentile(np.array([], dtype=np.int64), 90.0).queries_needed == 64


def test_certify_bound_three_over_at_p99() -> None:
    lat = np.full(1000, 5 * MS, dtype=np.int64)
    lat[:3] = 50 * MS
    lat[3] = 10 * MS  # exactly at the bound: not over
    need = min_passing(3, 0.99) + 3 - 1000
    assert need > 0
    cert = certify_bound(lat, 10.0, 99.0)
    assert (cert.ok, cert.over_bound, cert.queries, cert.queries_needed) == (False, 3, 1000, need)
    assert cert.bound_ms == 10.0 and cert.estimate_ms == 50.0  # t = 2 at n = 1000: the second largest
    more = np.concatenate([lat, np.full(need, 1 * MS, dtype=np.int64)])
    passed = certify_bound(more, 10.0, 99.0)
    assert passed.ok and passed.queries_needed == 0 and passed.over_bound == 3
    json.dumps(passed.to_dict())
    assert set(passed.to_dict()) == set(Certificate.__dataclass_fields__)


def test_certify_bound_counts_unfinished_as_over() -> None:
    lat = np.full(3000, MS, dtype=np.int64)
    assert certify_bound(lat, 2.0, 99.0).ok
    cert = certify_bound(lat, 2.0, 99.0, unfinished=40)
    assert cert.over_bound == 40 and cert.queries == 3040 and not cert.ok
    assert cert.queries_needed == min_passing(40, 0.99) + 40 - 3040
    assert cert.estimate_ms is None  # the estimate would be an unfinished query


def test_certify_bound_too_few_queries() -> None:
    cert = certify_bound(np.full(100, MS, dtype=np.int64), 2.0, 99.0)
    assert not cert.ok and cert.queries_needed == 459 - 100 and cert.estimate_ms is None


def exact_upper_tail(n: int, k: int, p: float) -> float:
    q = 1 - p
    return sum(math.comb(n, j) * q**j * p ** (n - j) for j in range(k, n + 1))


def test_certainly_fails_clear_cases() -> None:
    assert certainly_fails(100, 20, 99.0)  # 20 % over where 1 % is expected
    assert certainly_fails(100_000, 1_300, 99.0)
    assert not certainly_fails(1000, 10, 99.0)  # exactly the expected count
    assert not certainly_fails(1000, 0, 99.0)
    assert not certainly_fails(100_000, 1_050, 99.0)
    assert certainly_fails(10, 10, 50.0) and not certainly_fails(10, 9, 50.0, confidence=0.999)


@pytest.mark.parametrize(("n", "p_pct", "c"), [(200, 99.0, 0.99), (60, 90.0, 0.95), (30, 50.0, 0.99)])
def test_certainly_fails_is_the_exact_tail_test(n: int, p_pct: float, c: float) -> None:
    for k in range(n + 1):
        assert certainly_fails(n, k, p_pct, c) == (exact_upper_tail(n, k, p_pct / 100) < 1 - c), k


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: min_passing(-1, 0.99), "overlatency"),
        (lambda: min_passing(1, 99.0), "percentile"),
        (lambda: min_passing(1, 0.99, confidence=1.0), "confidence"),
        (lambda: min_passing(1, 0.99, tolerance=-0.1), "tolerance"),
        (lambda: min_queries(0.0), "percentile"),
        (lambda: estimate_percentile(np.ones(10, dtype=np.int64), 0.0), "percentile_pct"),
        (lambda: estimate_percentile(np.ones(10, dtype=np.int64), 99.0, 0.0), "confidence"),
        (lambda: certify_bound(np.ones(10, dtype=np.int64), 1.0, 100.0), "percentile_pct"),
        (lambda: certify_bound(np.ones(10, dtype=np.int64), -1.0, 99.0), "bound_ms"),
        (lambda: certify_bound(np.ones(10, dtype=np.int64), 1.0, 99.0, unfinished=-1), "unfinished"),
        (lambda: certainly_fails(-1, 0, 99.0), "queries"),
        (lambda: certainly_fails(10, 11, 99.0), "over_bound"),
        (lambda: certainly_fails(10, 1, 99.0, 1.5), "confidence"),
    ],
)
def test_argument_errors_name_the_argument(call: Callable[[], object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()
