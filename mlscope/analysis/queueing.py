"""Queueing theory for the server scenario: what a load generator driving a fixed-time service with
Poisson arrivals must measure.

A server-scenario run on a service that takes a fixed D with `max_in_flight = c` is an M/D/c queue
served first come, first served. Two kinds of truth follow, and this module computes both:

* the stationary law: the distribution of the waiting time W (and of the response time W + D) that
  the queue settles to, for any rate and c (`md_c_wait_cdf`, `md_c_response_percentile`); a long
  enough run's response times must follow it, as a Kolmogorov-Smirnov distance within the
  Dvoretzky-Kiefer-Wolfowitz band says (`ks_distance`, `dkw_epsilon`);
* the path truth: the exact response time of each query on the very arrival times a run used
  (`fcfs_response_ns`), what a perfect tool would have measured for them, free of sampling noise.

The stationary law. With identical deterministic service and FCFS, customer n starts at
S_n = max(A_n, S_{n-c} + D): it takes the server the customer c places ahead of it frees. Unrolled,
S_n = max_j (A_{n-jc} + jD), so W <= t if and only if, for every j >= 1, at most jc - 1 customers
arrived in the window (A_n - (jD - t), A_n) (no condition where jD <= t). Seen back from a Poisson
arrival the earlier arrivals are a Poisson process of rate lambda, so with t = kD + u (0 <= u < D)
and v = D - u the conditions become: N(v) <= (k+1)c - 1, and then each further span of D adds
Poisson(lambda D) arrivals and c places. Hence

    P(W <= t) = sum_n P(Poisson(lambda v) = n) * h((k+1)c - 1 - n),

where h(x) is the probability that the random walk L' = L + c - Poisson(lambda D), started at x,
never goes below 0. h solves h(x) = sum_a p(a) h(x + c - a) with h = 0 below 0 and h -> 1 upwards;
it is computed on a grid long enough that taking h = 1 beyond it errs by less than 1e-10 (the walk's
chance of ever falling x places decays as exp(-theta x), theta the Cramer root of
rho (e^theta - 1) = theta). For c = 1 Erlang's closed form gives the same law; it alternates in sign
and cancels catastrophically in floating point at high load, so it is summed in decimal arithmetic.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable
from decimal import Decimal, localcontext

import numpy as np
import numpy.typing as npt

__all__ = [
    "busy_service_ns",
    "dkw_epsilon",
    "erlang_md1_wait_cdf",
    "fcfs_response_given_ns",
    "fcfs_response_ns",
    "ks_distance",
    "md_c_response_percentile",
    "md_c_wait_cdf",
    "walk_md_c_wait_cdf",
]

# h is taken as 1 beyond its grid; the grid is long enough that this errs by less than this.
_GRID_TOLERANCE = 1e-10
# The grid's length is checked by solving again on a longer one; at most this long (a dense solve).
_MAX_GRID = 6000
# Poisson terms beyond mean + this many standard deviations (+ _TAIL_PAD) are below 1e-30.
_TAIL_SIGMAS = 15.0
_TAIL_PAD = 30
# Percentiles are found by bisection to this many ms.
_BISECT_MS = 1e-6


def _check(rate_per_s: float, service_ms: float, servers: int) -> float:
    """The utilisation rho = lambda D / c of valid parameters.

    Raises:
        ValueError: a rate or service time not > 0, servers not a positive int, or rho >= 1 (no
            stationary law: the queue grows without bound).
    """
    if not rate_per_s > 0:
        raise ValueError(f"rate_per_s={rate_per_s!r}: expected a number > 0")
    if not service_ms > 0:
        raise ValueError(f"service_ms={service_ms!r}: expected a number > 0")
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise ValueError(f"servers={servers!r}: expected an int >= 1")
    rho = rate_per_s * service_ms / 1000.0 / servers
    if not rho < 1:
        raise ValueError(
            f"utilisation rho = rate x service / servers = {rho:.6g} >= 1: the queue has no stationary law"
        )
    return rho


def _poisson_pmf(mean: float, count: int) -> npt.NDArray[np.float64]:
    """P(Poisson(mean) = a) for a = 0 .. count - 1."""
    a = np.arange(count, dtype=np.float64)
    if mean == 0:
        return (a == 0).astype(np.float64)
    log_factorial = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, max(count, 1), dtype=np.float64)))))
    return np.exp(a * math.log(mean) - mean - log_factorial[:count])


def _poisson_terms(mean: float) -> int:
    """How many Poisson(mean) terms from 0 hold all but a negligible (< 1e-30) tail."""
    return math.ceil(mean + _TAIL_SIGMAS * math.sqrt(mean)) + _TAIL_PAD


def _cramer_root(rho: float) -> float:
    """theta > 0 with rho (e^theta - 1) = theta: P(the walk ever falls x places) ~ exp(-theta x)."""
    low, high = 0.0, 1.0
    while rho * math.expm1(high) < high:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if rho * math.expm1(mid) < mid:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _solve_h(arrivals_per_service: float, servers: int, size: int) -> npt.NDArray[np.float64]:
    """h on the grid 0 .. size - 1, with h = 1 beyond it: the fixed point of
    h(x) <- sum_a p(a) h(x + c - a), solved as the linear system it is."""
    c = servers
    terms = _poisson_terms(arrivals_per_service)
    pmf = _poisson_pmf(arrivals_per_service, max(terms, size + c + 1))
    x = np.arange(size)[:, None]
    y = np.arange(size)[None, :]
    jump = x + c - y  # arrivals a that take x to y
    step = np.where(jump >= 0, pmf[np.clip(jump, 0, pmf.size - 1)], 0.0)
    # Mass that lands beyond the grid, where h = 1: a <= x + c - size.
    cdf = np.cumsum(pmf)
    over = np.arange(size) + c - size
    beyond = np.where(over >= 0, cdf[np.clip(over, 0, pmf.size - 1)], 0.0)
    return np.asarray(np.linalg.solve(np.eye(size) - step, beyond), dtype=np.float64)


@functools.lru_cache(maxsize=64)
def _h_table(arrivals_per_service: float, servers: int) -> npt.NDArray[np.float64]:
    """h on a grid long enough that h = 1 beyond it errs by less than _GRID_TOLERANCE, checked
    against a solve on a grid half as long again.

    Raises:
        ValueError: the load is so close to 1 that the grid would exceed _MAX_GRID.
    """
    rho = arrivals_per_service / servers
    theta = _cramer_root(rho)
    size = math.ceil(math.log(1.0 / (_GRID_TOLERANCE * 1e-2)) / theta) + 2 * servers + 16
    while True:
        if size * 3 // 2 > _MAX_GRID:
            raise ValueError(
                f"utilisation rho={rho:.6g} is too close to 1: the walk's grid would need more than "
                f"{_MAX_GRID} points"
            )
        h = _solve_h(arrivals_per_service, servers, size)
        longer = _solve_h(arrivals_per_service, servers, size * 3 // 2)
        if float(np.max(np.abs(longer[:size] - h))) < _GRID_TOLERANCE and 1.0 - h[-1] < _GRID_TOLERANCE:
            h.setflags(write=False)
            return h
        size *= 2


def walk_md_c_wait_cdf(t_ms: float, rate_per_s: float, service_ms: float, servers: int) -> float:
    """P(W <= t) in a stationary FCFS M/D/c queue, by the random-walk formula of the module's
    docstring (any c, c = 1 included).

    Args:
        t_ms: the waiting time, in ms.
        rate_per_s: the Poisson arrival rate lambda, per second.
        service_ms: the fixed service time D, in ms.
        servers: c, the servers (queries run at once).

    Returns:
        The probability, in [0, 1]; 0 for t < 0.

    Raises:
        ValueError: invalid parameters, or utilisation >= 1 (or too close to 1 for the grid).
    """
    _check(rate_per_s, service_ms, servers)
    if t_ms < 0:
        return 0.0
    lam = rate_per_s / 1000.0  # per ms
    h = _h_table(lam * service_ms, servers)
    k = math.floor(t_ms / service_ms)
    v = service_ms - (t_ms - k * service_ms)
    top = (k + 1) * servers - 1
    count = min(top, _poisson_terms(lam * v)) + 1
    n = np.arange(count)
    index = top - n
    h_at = np.where(index < h.size, h[np.clip(index, 0, h.size - 1)], 1.0)
    return float(min(1.0, max(0.0, float(np.dot(_poisson_pmf(lam * v, count), h_at)))))


def erlang_md1_wait_cdf(t_ms: float, rate_per_s: float, service_ms: float) -> float:
    """P(W <= t) in a stationary M/D/1 queue by Erlang's closed form,
    (1 - rho) sum_{k=0}^{floor(t/D)} (lambda (kD - t))^k / k! e^{-lambda (kD - t)},
    summed in decimal arithmetic at a precision that covers its cancellation (the terms alternate
    in sign and grow like e^{lambda t}).

    Args:
        t_ms: the waiting time, in ms.
        rate_per_s: the Poisson arrival rate lambda, per second.
        service_ms: the service time D, in ms.

    Returns:
        The probability, in [0, 1]; 0 for t < 0.

    Raises:
        ValueError: invalid parameters, or utilisation >= 1.
    """
    rho = _check(rate_per_s, service_ms, 1)
    if t_ms < 0:
        return 0.0
    lam_t = rate_per_s / 1000.0 * t_ms
    top = math.floor(t_ms / service_ms)
    with localcontext() as context:
        # Terms reach ~e^{2 lambda t}; keep 40 significant digits beyond that.
        context.prec = int(2 * lam_t / math.log(10)) + 40
        lam = Decimal(rate_per_s) / 1000
        t, d = Decimal(t_ms), Decimal(service_ms)
        total = Decimal(0)
        factorial = Decimal(1)
        for k in range(top + 1):
            if k:
                factorial *= k
            x = lam * (k * d - t)
            # x**0 is 1 (Decimal refuses 0**0, the k = 0 term at t = 0).
            power = x**k if k else Decimal(1)
            total += power / factorial * (-x).exp()
        value = (1 - Decimal(rho)) * total
    return float(min(1.0, max(0.0, float(value))))


def md_c_wait_cdf(t_ms: float, rate_per_s: float, service_ms: float, servers: int) -> float:
    """P(W <= t): the waiting-time CDF of a stationary FCFS M/D/c queue (Erlang's closed form for
    c = 1, the random-walk formula otherwise).

    Args:
        t_ms: the waiting time, in ms.
        rate_per_s: the Poisson arrival rate, per second.
        service_ms: the fixed service time, in ms.
        servers: c, the servers.

    Returns:
        The probability, in [0, 1]; 0 for t < 0.

    Raises:
        ValueError: invalid parameters, or utilisation >= 1.
    """
    if servers == 1:
        return erlang_md1_wait_cdf(t_ms, rate_per_s, service_ms)
    return walk_md_c_wait_cdf(t_ms, rate_per_s, service_ms, servers)


def md_c_response_percentile(p: float, rate_per_s: float, service_ms: float, servers: int) -> float:
    """The p-th percentile of the response time W + D of a stationary FCFS M/D/c queue.

    The smallest r with P(W + D <= r) >= p / 100, found by bisection on the waiting-time CDF to
    1e-6 ms; D itself when the queries that do not wait already make up p percent.

    Args:
        p: the percentile, in (0, 100).
        rate_per_s: the Poisson arrival rate, per second.
        service_ms: the fixed service time, in ms.
        servers: c, the servers.

    Returns:
        The percentile, in ms.

    Raises:
        ValueError: p outside (0, 100), invalid parameters, or utilisation >= 1.
    """
    if not 0 < p < 100:
        raise ValueError(f"p={p!r}: expected a percentile in (0, 100)")
    _check(rate_per_s, service_ms, servers)
    q = p / 100.0

    def cdf(t: float) -> float:
        return md_c_wait_cdf(t, rate_per_s, service_ms, servers)

    if cdf(0.0) >= q:
        return service_ms
    low, high = 0.0, service_ms
    while cdf(high) < q:
        low, high = high, high * 2
    while high - low > _BISECT_MS:
        mid = (low + high) / 2
        if cdf(mid) >= q:
            high = mid
        else:
            low = mid
    return service_ms + high


def fcfs_response_ns(arrivals_ns: npt.ArrayLike, service_ns: float, servers: int) -> npt.NDArray[np.float64]:
    """The exact response time of each query of an arrival sequence at an FCFS queue with `servers`
    servers and a fixed service time: what a perfect tool would measure for these very arrivals.

    Customer n starts at S_n = max(A_n, S_{n-c} + D) (it takes the server the customer c places
    ahead frees; with identical service, departures keep arrival order), and its response is
    S_n + D - A_n. Each residue class n mod c is its own chain, S_{r+mc} = mD + cummax(A - mD), so
    the recursion runs vectorised. The queue starts empty.

    Args:
        arrivals_ns: arrival times, nondecreasing, in ns (any origin).
        service_ns: the service time D, in ns (> 0).
        servers: c, the servers (>= 1).

    Returns:
        Each query's response time in ns, in arrival order (float64).

    Raises:
        ValueError: arrivals not one-dimensional or decreasing, service not > 0, servers < 1.
    """
    arrivals = np.asarray(arrivals_ns, dtype=np.float64)
    if arrivals.ndim != 1:
        raise ValueError("arrivals_ns: expected a one-dimensional sequence")
    if np.any(np.diff(arrivals) < 0):
        raise ValueError("arrivals_ns: expected nondecreasing arrival times")
    if not service_ns > 0:
        raise ValueError(f"service_ns={service_ns!r}: expected a number > 0")
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise ValueError(f"servers={servers!r}: expected an int >= 1")
    if arrivals.size == 0:
        return np.zeros(0, dtype=np.float64)
    # Relative to the first arrival, so ns-since-boot origins keep their precision.
    relative = arrivals - arrivals[0]
    starts = np.empty_like(relative)
    for residue in range(min(servers, relative.size)):
        chain = relative[residue::servers]
        steps = np.arange(chain.size, dtype=np.float64) * service_ns
        starts[residue::servers] = steps + np.maximum.accumulate(chain - steps)
    return starts + service_ns - relative


def fcfs_response_given_ns(
    arrivals_ns: npt.ArrayLike, services_ns: npt.ArrayLike, servers: int
) -> npt.NDArray[np.float64]:
    """The exact response time of each query at an FCFS queue with `servers` servers, given each
    query's own service time: the truth for a run whose service recorded how long it really served
    each query (a sleep's wake-up makes every one a little longer than asked, and not equally).

    Each query, in arrival order, takes the server that frees first: start = max(arrival, earliest
    free), and that server is free again at start + its service. The queue starts empty.

    Args:
        arrivals_ns: arrival times, nondecreasing, in ns (any origin).
        services_ns: each query's service time in ns, in arrival order (same length).
        servers: c, the servers (>= 1).

    Returns:
        Each query's response time in ns, in arrival order (float64).

    Raises:
        ValueError: the sequences differ in length, arrivals decrease, or servers < 1.
    """
    arrivals = np.asarray(arrivals_ns, dtype=np.float64)
    services = np.asarray(services_ns, dtype=np.float64)
    if arrivals.shape != services.shape or arrivals.ndim != 1:
        raise ValueError("arrivals_ns and services_ns: expected one-dimensional sequences of one length")
    if np.any(np.diff(arrivals) < 0):
        raise ValueError("arrivals_ns: expected nondecreasing arrival times")
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise ValueError(f"servers={servers!r}: expected an int >= 1")
    relative = (arrivals - arrivals[0]).tolist() if arrivals.size else []
    free = [0.0] * servers
    responses = np.empty(len(relative), dtype=np.float64)
    for index, (arrival, service) in enumerate(zip(relative, services.tolist(), strict=True)):
        start = max(arrival, heapq.heappop(free))
        heapq.heappush(free, start + service)
        responses[index] = start + service - arrival
    return responses


def busy_service_ns(
    arrivals_ns: npt.ArrayLike, responses_ns: npt.ArrayLike, servers: int
) -> npt.NDArray[np.float64]:
    """How long each queued query held its server, read off a measured run: the service time the
    queue really had, the serving side's own overhead per query included.

    In an FCFS queue with c servers and identical service, a query n that arrived before query
    n - c completed starts the moment that one completes; its completion follows by exactly one
    service. So E_n - E_{n-c} over those queries (E = arrival + response) is the per-query time a
    server was held, which a sleep's own record (its time inside the call) leaves out.

    Args:
        arrivals_ns: each query's arrival, nondecreasing, in ns.
        responses_ns: each query's measured response time, same order, in ns.
        servers: c, the servers.

    Returns:
        E_n - E_{n-c} for every query n >= c that arrived before E_{n-c} (empty when none queued).

    Raises:
        ValueError: the sequences differ in length or servers < 1.
    """
    arrivals = np.asarray(arrivals_ns, dtype=np.float64)
    responses = np.asarray(responses_ns, dtype=np.float64)
    if arrivals.shape != responses.shape or arrivals.ndim != 1:
        raise ValueError("arrivals_ns and responses_ns: expected one-dimensional sequences of one length")
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise ValueError(f"servers={servers!r}: expected an int >= 1")
    ends = arrivals + responses
    earlier, later = ends[:-servers], ends[servers:]
    queued = arrivals[servers:] < earlier
    return np.asarray((later - earlier)[queued], dtype=np.float64)


def ks_distance(samples_ms: npt.ArrayLike, cdf: Callable[[float], float], tolerance_ms: float = 0.0) -> float:
    """The Kolmogorov-Smirnov distance sup_x |F_n(x) - F(x)| between the samples' empirical CDF and
    `cdf`; with a tolerance tau, the vertical distance by which F_n leaves the band between F moved
    tau to the right and tau to the left: sup_x max(F_n(x) - F(x + tau), F(x - tau) - F_n(x), 0).

    The tolerance is for a law with an atom (the M/D/c response time has one at D, the queries that
    did not wait): measured times scatter around an atom by the tool's timing jitter, and however
    small the scatter the plain distance reads the atom's whole mass, while a band of tau reads only
    what lies more than tau from where the law puts it.

    Ties and atoms are handled: at each distinct sample value u the supremum is taken of
    F_n(u) - F(u + tau) and of F((u - tau)-) - F_n(u-), the left limit read as `cdf` at the float
    just below (exact for a right-continuous `cdf` of floats).

    Args:
        samples_ms: the samples (at least one).
        cdf: the distribution function to compare with, x -> P(X <= x), right-continuous.
        tolerance_ms: tau, >= 0 (0: the plain Kolmogorov-Smirnov distance).

    Returns:
        The distance, in [0, 1].

    Raises:
        ValueError: no samples, or a negative tolerance.
    """
    if not tolerance_ms >= 0:
        raise ValueError(f"tolerance_ms={tolerance_ms!r}: expected a number >= 0")
    x = np.asarray(samples_ms, dtype=np.float64).ravel()
    n = x.size
    if n == 0:
        raise ValueError("samples_ms: expected at least one sample")
    values, counts = np.unique(x, return_counts=True)
    at = np.cumsum(counts) / n  # F_n(u)
    below = at - counts / n  # F_n(u-)
    right = values + tolerance_ms
    left = np.nextafter(values - tolerance_ms, -np.inf)
    f_right = np.fromiter((cdf(float(u)) for u in right), dtype=np.float64, count=values.size)
    f_left = np.fromiter((cdf(float(u)) for u in left), dtype=np.float64, count=values.size)
    return float(max(0.0, np.max(at - f_right), np.max(f_left - below)))


def dkw_epsilon(n: int, alpha: float) -> float:
    """The Dvoretzky-Kiefer-Wolfowitz band: with probability at least 1 - alpha, the empirical CDF
    of n independent samples lies within epsilon = sqrt(ln(2 / alpha) / (2 n)) of the true CDF
    everywhere (Massart's constant; any distribution, atoms included).

    Args:
        n: the number of samples (>= 1).
        alpha: the chance of exceeding the band, in (0, 1) (0.01 for a 99% band).

    Returns:
        epsilon.

    Raises:
        ValueError: n < 1 or alpha outside (0, 1).
    """
    if n < 1:
        raise ValueError(f"n={n!r}: expected at least one sample")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r}: expected a number in (0, 1)")
    return math.sqrt(math.log(2.0 / alpha) / (2.0 * n))
