"""The server scenario against queueing theory, end to end: mlscope's load generator drives a
fixed-time service (an M/D/1 queue) and its latencies are held to the exact FCFS response times of
the very arrivals it scheduled, and to the stationary M/D/1 law (benchmarks/queue_truth.py runs the
full grid of points)."""

from __future__ import annotations

import numpy as np
import pytest

from mlscope.analysis.queueing import (
    dkw_epsilon,
    fcfs_response_given_ns,
    ks_distance,
    md_c_wait_cdf,
)
from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.measure.synthetic import FixedService
from mlscope.runtime.scenarios import get_scenario

# `quiet`: `make test` runs it after the parallel tests, alone, so that what it holds to the truth is
# the tool's own timing and not another test's load on the two cores.
pytestmark = [pytest.mark.slow, pytest.mark.quiet]

SERVICE_MS = 5.0
RHO = 0.6
QPS = RHO * 1000.0 / SERVICE_MS
RELATIVE = 0.10
ABSOLUTE_MS = 0.5
THIN = 5


def test_server_latencies_match_the_m_d_1_queue_they_drive() -> None:
    """About 9 s of Poisson arrivals at 120 queries/s to a 5 ms service, one at a time (rho = 0.6).

    The percentile bound, max(10%, 0.5 ms) of the path truth: the path truth uses the same arrival
    times and the same per-query service times as the run, so sampling noise does not separate the
    two; what does is the tool's own timing (issue lateness, the hand-off to the model thread) and
    the serving side's own cost per query (the call around the sleep and the model thread's loop,
    20-40 µs on these VMs: on a 5 ms service at rho = 0.6 it lengthens the waits by about 3%),
    well inside the bound.
    A generator that timed from the send instead of the scheduled arrival, or from when the model
    began (dropping the queueing), would read p90 as D = 5 ms where the truth is ~14 ms; one that
    let queries overlap would lose the same wait.

    The distribution check, the KS distance to the stationary M/D/1 law below the DKW 99.9% band:
    two adjustments keep it valid. DKW assumes independent samples, and a queue's neighbouring
    response times are correlated (simulated, a perfect tool's ~1,100 queries of such a run leave
    the 99.9% band in about 1 run in 9), so every 5th query is taken (none of 300 simulated runs
    left the band). And the law has an atom at D (the 40% of queries that did not wait): measured
    no-wait times scatter a few microseconds above D, and the plain KS distance reads that as the
    whole 0.4, so the distance is taken within the same 0.5 ms timing tolerance. Dropping the
    queueing still shows as a distance of ~0.6 (checked below on the path itself), far outside
    the band (~0.13).
    """
    service = FixedService(SERVICE_MS)
    settings = MeasureSettings(min_seconds=8.0, max_seconds=30.0)
    load = LoadSettings(qps=QPS, max_in_flight=1, percentile=99, seed=3)
    m = get_scenario("server").run(service, [None], 1, settings, load=load, record_starts=True)
    assert m.starts_ns is not None
    reasons = "; ".join(m.validity.reasons)

    real_ms = float(np.median(service.taken_ns)) / 1e6  # D': the sleep's real length
    measured_ms = m.latencies_ns / 1e6
    assert measured_ms.size > 500, reasons
    # Each query's own service as the service recorded it (one server: the calls begin in query order),
    # so a sleep that a busy machine stretched is in the truth too, as it is in the queue.
    given = service.served_after(int(m.starts_ns[0]))[: m.starts_ns.size]
    assert given.size == m.starts_ns.size, (given.size, m.starts_ns.size, reasons)
    truth_ms = fcfs_response_given_ns(m.starts_ns, given, 1) / 1e6
    for p in (50, 90, 99):
        got, truth = np.percentile(measured_ms, p), np.percentile(truth_ms, p)
        assert abs(got - truth) <= max(RELATIVE * truth, ABSOLUTE_MS), (p, got, truth, real_ms, reasons)

    def law(r: float) -> float:
        return md_c_wait_cdf(r - real_ms, QPS, real_ms, 1)

    thinned = measured_ms[::THIN]
    band = dkw_epsilon(thinned.size, 0.001)
    distance = ks_distance(thinned, law, tolerance_ms=ABSOLUTE_MS)
    assert distance < band, (distance, band, reasons)
    # The check has the power it claims: service times alone (the queueing dropped) are far outside.
    dropped = ks_distance(np.full(thinned.size, real_ms), law, tolerance_ms=ABSOLUTE_MS)
    assert dropped > 3 * band
