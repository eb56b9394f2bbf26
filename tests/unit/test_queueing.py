"""Queueing theory of the server scenario (mlscope.analysis.queueing): the random-walk M/D/c law
agrees with Erlang's closed form for c = 1 and with a long simulation for c = 2; no-wait mass is
1 - rho; percentiles invert the CDF; the path truth is the FCFS recursion; KS and DKW are the
textbook figures."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from mlscope.analysis.queueing import (
    busy_service_ns,
    dkw_epsilon,
    erlang_md1_wait_cdf,
    fcfs_response_given_ns,
    fcfs_response_ns,
    ks_distance,
    md_c_response_percentile,
    md_c_wait_cdf,
    walk_md_c_wait_cdf,
)

D_MS = 5.0


def rate_for(rho: float, servers: int, service_ms: float = D_MS) -> float:
    return rho * servers * 1000.0 / service_ms


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.9])
def test_the_walk_formula_for_one_server_is_erlangs_closed_form(rho: float) -> None:
    rate = rate_for(rho, 1)
    for t in np.linspace(0.0, 25 * D_MS, 126):
        erlang = erlang_md1_wait_cdf(float(t), rate, D_MS)
        walk = walk_md_c_wait_cdf(float(t), rate, D_MS, 1)
        assert walk == pytest.approx(erlang, abs=1e-9), t


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.9])
def test_one_server_leaves_one_minus_rho_unqueued(rho: float) -> None:
    rate = rate_for(rho, 1)
    assert md_c_wait_cdf(0.0, rate, D_MS, 1) == pytest.approx(1 - rho, abs=1e-12)
    assert walk_md_c_wait_cdf(0.0, rate, D_MS, 1) == pytest.approx(1 - rho, abs=1e-9)


def test_erlangs_form_holds_at_high_load_where_floats_would_cancel() -> None:
    # At rho = 0.98 and t = 100 D the terms reach e^196; the sum must still be a probability near 1.
    rate = rate_for(0.98, 1)
    value = erlang_md1_wait_cdf(100 * D_MS, rate, D_MS)
    assert value == pytest.approx(walk_md_c_wait_cdf(100 * D_MS, rate, D_MS, 1), abs=1e-9)
    assert 0.9 < value <= 1.0


def test_two_servers_agree_with_a_long_simulation_of_the_recursion() -> None:
    # Given 2e5 seeded Poisson arrivals at an M/D/2 queue at rho = 0.6, the first 1e4 dropped
    rate = rate_for(0.6, 2)
    rng = np.random.default_rng(11)
    arrivals_ns = np.cumsum(rng.exponential(1e9 / rate, 200_000))
    waits_ms = fcfs_response_ns(arrivals_ns, D_MS * 1e6, 2)[10_000:] / 1e6 - D_MS

    # When every 10th wait (thinned: neighbours in a queue are correlated) is compared with the law
    sample = waits_ms[::10]
    distance = ks_distance(sample, lambda t: md_c_wait_cdf(t, rate, D_MS, 2))

    # Then it lies within the 99.9% DKW band
    assert distance <= dkw_epsilon(sample.size, 0.001)


@pytest.mark.parametrize("rho", [0.3, 0.9])
def test_two_servers_agree_with_independent_replications(rho: float) -> None:
    # At rho = 0.9 one run's waits stay correlated over hundreds of queries, so DKW (which needs
    # independent samples) is not valid for them; independent replications are: each of 4,000
    # seeded queues, started empty, gives the wait of its 1,000th query (the walk relaxes within
    # ~100 queries at this load, so the empty start is forgotten).
    rate = rate_for(rho, 2)
    rng = np.random.default_rng(23)
    gaps = rng.exponential(1e9 / rate, (4_000, 1_000))
    waits_ms = np.array([fcfs_response_ns(np.cumsum(row), D_MS * 1e6, 2)[-1] for row in gaps]) / 1e6 - D_MS

    distance = ks_distance(waits_ms, lambda t: md_c_wait_cdf(t, rate, D_MS, 2))

    assert distance <= dkw_epsilon(waits_ms.size, 0.001)


def test_the_response_percentile_inverts_the_cdf() -> None:
    rate = rate_for(0.9, 2)
    for p in (50.0, 90.0, 99.0):
        r = md_c_response_percentile(p, rate, D_MS, 2)
        assert md_c_wait_cdf(r - D_MS, rate, D_MS, 2) >= p / 100
        assert md_c_wait_cdf(r - D_MS - 2e-6, rate, D_MS, 2) < p / 100


def test_a_percentile_inside_the_no_wait_mass_is_the_service_time() -> None:
    assert md_c_response_percentile(50, rate_for(0.3, 1), D_MS, 1) == D_MS


def test_a_one_server_percentile_below_d_matches_erlangs_law_by_hand() -> None:
    # For t < D Erlang's form is (1 - rho) e^{lambda t}; at rho = 0.6 the 45th percentile of the
    # wait is ln(0.45 / 0.4) / lambda (the no-wait mass is 40%).
    rate = rate_for(0.6, 1)
    expected = D_MS + np.log(0.45 / 0.4) / (rate / 1000)
    assert md_c_response_percentile(45, rate, D_MS, 1) == pytest.approx(expected, abs=1e-5)


def naive_fcfs(arrivals: np.ndarray, service: float, servers: int) -> np.ndarray:
    """The FCFS queue simulated server by server: each arrival takes the server free first."""
    free = [0.0] * servers
    out = []
    for arrival in arrivals:
        start = max(float(arrival), heapq.heappop(free))
        heapq.heappush(free, start + service)
        out.append(start + service - arrival)
    return np.asarray(out)


@pytest.mark.parametrize("servers", [1, 2, 3])
def test_the_path_truth_is_the_fcfs_queue(servers: int) -> None:
    rng = np.random.default_rng(5)
    arrivals = np.round(np.cumsum(rng.exponential(1_000_000.0, 5_000)) + 1e12)
    got = fcfs_response_ns(arrivals, 1_700_000.0, servers)
    assert np.allclose(got, naive_fcfs(arrivals - arrivals[0], 1_700_000.0, servers), atol=1e-3)


def test_the_path_truth_of_a_burst_queues_each_behind_the_last() -> None:
    # Three queries at once on one server: D, 2D, 3D; on two servers: D, D, 2D.
    assert fcfs_response_ns([0, 0, 0], 10.0, 1).tolist() == [10.0, 20.0, 30.0]
    assert fcfs_response_ns([0, 0, 0], 10.0, 2).tolist() == [10.0, 10.0, 20.0]


def test_ks_distance_of_a_sample_to_its_own_distribution_and_to_a_shifted_one() -> None:
    values = [1.0, 2.0, 3.0, 4.0]

    def uniform(x: float) -> float:
        return min(1.0, max(0.0, x / 4.0))

    assert ks_distance(values, uniform) == pytest.approx(0.25)
    assert ks_distance(values, lambda x: uniform(x - 2.0)) == pytest.approx(0.5)


def test_ks_distance_counts_an_atom_once() -> None:
    # Half the samples at 0, as the law's atom at 0 says: no distance from the atom itself.
    samples = [0.0] * 50 + list(np.linspace(0.01, 1.0, 50))

    def law(x: float) -> float:
        return 0.0 if x < 0 else min(1.0, 0.5 + 0.5 * x)

    assert ks_distance(samples, law) <= 0.011


def test_dkw_epsilon_is_massarts_band() -> None:
    assert dkw_epsilon(1000, 0.01) == pytest.approx(np.sqrt(np.log(200) / 2000))
    with pytest.raises(ValueError):
        dkw_epsilon(0, 0.01)


@pytest.mark.parametrize(
    "args",
    [(0.0, -1.0, 5.0, 1), (0.0, 100.0, 0.0, 1), (0.0, 100.0, 5.0, 0), (0.0, 200.0, 5.0, 1)],
)
def test_bad_parameters_are_refused(args: tuple[float, float, float, int]) -> None:
    with pytest.raises(ValueError):
        md_c_wait_cdf(*args)


def test_ks_distance_with_a_tolerance_forgives_jitter_around_an_atom_and_no_more() -> None:
    # The law: all mass at 5 ms. Samples jittered 0-0.05 ms above it read the whole atom as distance
    # without a tolerance, none with 0.1 ms, and all of it again when the jitter is past the tolerance.
    samples = 5.0 + np.linspace(0.0, 0.05, 100)

    def atom(x: float) -> float:
        return 1.0 if x >= 5.0 else 0.0

    assert ks_distance(samples, atom) == pytest.approx(0.99)
    assert ks_distance(samples, atom, tolerance_ms=0.1) == 0.0
    assert ks_distance(samples + 0.2, atom, tolerance_ms=0.1) == pytest.approx(1.0)


@pytest.mark.parametrize("servers", [1, 2])
def test_busy_service_reads_the_service_time_off_the_completions(servers: int) -> None:
    rng = np.random.default_rng(9)
    arrivals = np.cumsum(rng.exponential(1.0, 2_000))
    held = busy_service_ns(arrivals, fcfs_response_ns(arrivals, 0.8 * servers, servers), servers)
    assert held.size > 100
    assert np.allclose(held, 0.8 * servers)


def test_the_path_truth_with_each_querys_own_service_matches_the_fixed_one_and_a_hand_example() -> None:
    rng = np.random.default_rng(5)
    arrivals = np.cumsum(rng.exponential(2e6, size=2_000))
    for servers in (1, 2, 3):
        fixed = fcfs_response_ns(arrivals, 3e6, servers)
        given = fcfs_response_given_ns(arrivals, np.full(arrivals.size, 3e6), servers)
        np.testing.assert_allclose(given, fixed, rtol=0, atol=1e-3)
    # One server: the second query waits for the first's 5 ms, the third for the second's 1 ms.
    hand = fcfs_response_given_ns([0, 1, 2], [5, 1, 4], 1)
    assert hand.tolist() == [5.0, 5.0, 8.0]
    # Two servers: the third query takes the server the second frees at 2, not the first's at 5.
    assert fcfs_response_given_ns([0, 1, 2], [5, 1, 4], 2).tolist() == [5.0, 1.0, 4.0]
