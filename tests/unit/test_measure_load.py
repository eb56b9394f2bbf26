"""The load generator, the server and multi_stream scenarios and the max-QPS search, on models whose
service time is known because they sleep it (real threads, real clocks; no framework needed here:
tests/integration/test_load_scenarios.py runs them on ONNX Runtime and PyTorch)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.measure.closed_loop import issue_back_to_back
from mlscope.runtime.measure.generator import IssueRecord, Schedule
from mlscope.runtime.measure.load_report import report
from mlscope.runtime.measure.load_run import check_rate, generator_capacity, run_under_load
from mlscope.runtime.measure.search import Probe, find_max_qps, probe_passes
from mlscope.runtime.scenarios import get_scenario

QUICK = MeasureSettings(warmup_count=3, warmup_seconds=0.0, min_count=10, min_seconds=1.0, max_seconds=8.0)


def sleeper(seconds: float):
    def predict(batch: object) -> None:
        time.sleep(seconds)

    return predict


def ks_exponential(gaps: np.ndarray) -> tuple[float, float]:
    """Kolmogorov–Smirnov distance of `gaps` from the exponential with their mean, and the 1% critical
    value (Lilliefors' for an estimated mean: 1.25/√n would be too lenient, so use the stricter
    table value ≈ 1.31/√n for n > 50)."""
    ordered = np.sort(gaps)
    n = ordered.size
    cdf = 1 - np.exp(-ordered / ordered.mean())
    upper = np.arange(1, n + 1) / n - cdf
    lower = cdf - np.arange(0, n) / n
    return float(max(upper.max(), lower.max())), 1.31 / math.sqrt(n)


def run(scenario: str, predict, load: LoadSettings, settings: MeasureSettings = QUICK, **kwargs):
    return get_scenario(scenario).run(predict, [0, 1, 2, 3, 4, 5, 6, 7], 1, settings, load=load, **kwargs)


def test_poisson_schedule_is_seeded_and_exponential() -> None:
    first = Schedule("poisson", 50.0, seed=7).offsets_ns(4000)
    assert np.array_equal(first, Schedule("poisson", 50.0, seed=7).offsets_ns(4000))
    assert not np.array_equal(first, Schedule("poisson", 50.0, seed=8).offsets_ns(4000))
    gaps = np.diff(first)
    assert abs(gaps.mean() / 1e9 - 1 / 50) < 0.05 / 50
    distance, critical = ks_exponential(gaps)
    assert distance < critical
    # A fixed-interval schedule is the opposite: every gap equal, so it fails the same test.
    fixed = np.diff(Schedule("fixed", 50.0).offsets_ns(4000)).astype(float)
    assert ks_exponential(fixed)[0] > 10 * critical


def test_a_replayed_schedule_issues_the_recorded_arrivals_then_laps_them() -> None:
    recorded = [5_000_000_000 + t for t in (3_000, 0, 10_000_000, 40_000_000)]  # any clock, any order
    schedule = Schedule.replay(recorded)
    assert schedule.kind == "trace"
    assert schedule.rate == pytest.approx(3 / 0.04)
    offsets = schedule.offsets_ns(9)
    assert offsets[:4].tolist() == [0, 3_000, 10_000_000, 40_000_000]
    lap = 40_000_000 + round(1e9 / schedule.rate)  # the next lap starts a mean gap after the last
    assert offsets[4:8].tolist() == [lap, lap + 3_000, lap + 10_000_000, lap + 40_000_000]
    assert offsets[8] == 2 * lap
    with pytest.raises(ValueError, match="at least 2 arrivals"):
        Schedule.replay([7, 7])


def test_a_run_on_a_replayed_schedule_issues_at_the_recorded_instants() -> None:
    arrivals = np.cumsum(np.random.default_rng(3).exponential(1e9 / 200, size=300)).astype(np.int64)
    schedule = Schedule.replay(arrivals.tolist())
    settings = MeasureSettings(min_seconds=1, max_seconds=1)
    record, result = run_under_load(
        sleeper(0.0005), [0], 1, settings, LoadSettings(qps=200), "server", schedule, None
    )
    due = record.scheduled - record.scheduled[0]
    assert record.issued >= 150
    assert np.array_equal(due[: record.issued], (arrivals - arrivals[0])[: record.issued])
    assert result.section["scheduled_qps"] == pytest.approx(schedule.rate, rel=0.1)


def test_achieved_arrivals_pass_a_goodness_of_fit_check() -> None:
    measurement = run("server", sleeper(0.0005), LoadSettings(qps=300, percentile=90))
    load = measurement.load
    assert load is not None and load["queries"] >= 250
    # What the generator really sent, not what it planned: the sends' gaps are exponential too.
    assert load["achieved_qps"] / load["scheduled_qps"] > 0.99
    record_gaps = np.diff(np.sort(measurement.starts_ns if measurement.starts_ns is not None else []))
    assert record_gaps.size == 0  # no MODEL tracing asked: no per-query times kept
    measurement = run("server", sleeper(0.0005), LoadSettings(qps=300, percentile=90), record_starts=True)
    assert measurement.starts_ns is not None
    distance, critical = ks_exponential(np.diff(measurement.starts_ns).astype(float))
    assert distance < critical, (distance, critical)


def test_server_latency_counts_from_the_scheduled_arrival() -> None:
    """A model that stalls once for 300 ms: queries due during the stall wait, and their wait counts
    (no coordinated omission); the service times alone, what a sent-time tool reports, hide it."""
    calls = []

    def stalling(batch: object) -> None:
        calls.append(None)
        time.sleep(0.3 if len(calls) == 60 else 0.002)

    measurement = run("server", stalling, LoadSettings(qps=100, percentile=90), settings=QUICK)
    load = measurement.load
    assert load is not None
    # ~30 queries arrive during the stall and queue behind it: more than 1% of ~200.
    assert measurement.latency_ms.p99 > 100
    assert load["service_ms"]["p99"] < 50
    assert load["queued"] >= 20
    assert load["unfinished"] == 0
    ratio = load["in_flight"]["ratio"]
    assert ratio is not None and 0.7 < ratio < 1.3, load["in_flight"]


# Run alone (`quiet`): it certifies a live 2 ms model's p90 under 50 ms, and in a fresh clone's full
# parallel run (both cores busy with the farm and container tests) that certificate failed once, as
# a loaded machine's latency should; alone, and beside two busy loops, it passed every time.
@pytest.mark.quiet
def test_server_certifies_a_bound_and_says_what_it_needs() -> None:
    met = run("server", sleeper(0.002), LoadSettings(qps=100, latency_bound_ms=50, percentile=90))
    certified = met.load["certified"]
    assert certified["ok"] and certified["bound_ms"] == 50 and certified["queries_needed"] == 0, certified
    assert met.stop_reason == "certified"
    missed = run("server", sleeper(0.002), LoadSettings(qps=100, latency_bound_ms=1, percentile=90))
    assert not missed.validity.valid
    assert not missed.load["certified"]["ok"]
    assert any("not certified" in reason for reason in missed.validity.reasons)
    assert missed.stop_reason == "failed"


def test_overloaded_model_is_invalid() -> None:
    # 200 queries/s into a model serving 50/s, one at a time: the queue grows all run long.
    measurement = run(
        "server",
        sleeper(0.02),
        LoadSettings(qps=200, percentile=90),
        settings=MeasureSettings(
            warmup_count=1, warmup_seconds=0, min_count=10, min_seconds=1, max_seconds=2
        ),
    )
    assert not measurement.validity.valid
    assert measurement.load["unfinished"] > 0
    assert any(reason.startswith("overloaded") for reason in measurement.validity.reasons)


def test_a_generator_that_cannot_keep_up_is_flagged_invalid() -> None:
    """Asked for far more than any Python process can send, the generator falls behind its own
    schedule: the run is invalid for that reason, whatever the model did."""
    # Beyond what a request may ask (MAX_QPS), so straight to the generator; a fixed rate, not a
    # multiple of generator_capacity(), which a busy machine can measure low.
    schedule = Schedule("poisson", 10_000_000.0)
    load = LoadSettings(percentile=50)
    settings = MeasureSettings(
        warmup_count=1, warmup_seconds=0, min_count=10, min_seconds=0.5, max_seconds=0.5
    )
    _, result = run_under_load(lambda batch: None, [0], 1, settings, load, "server", schedule, None)
    assert result.section["achieved_qps"] < 0.99 * result.section["scheduled_qps"]
    assert any("load generator" in reason for reason in result.invalid)


def test_a_rate_the_machine_cannot_issue_is_refused() -> None:
    with pytest.raises(UserError, match="above what this machine can issue") as caught:
        check_rate(
            min(10 * generator_capacity(), 99_000.0) if generator_capacity() < 9_900 else 99_000.0, 100
        )
    assert caught.value.field == "qps"
    check_rate(50.0)  # a rate any machine issues needs no check


def late_record(late_queries: int, late_ms: float, queries: int = 400) -> IssueRecord:
    """A server run at 100 queries/s of 5 ms queries, sent on time but for `late_queries` of them."""
    scheduled = np.arange(queries, dtype=np.int64) * 10_000_000
    sent = scheduled.copy()
    sent[:late_queries] += int(late_ms * 1e6)
    return IssueRecord(
        start_ns=0,
        samples_per_query=1,
        scheduled=scheduled,
        sent=sent,
        started=sent,
        ended=sent + 5_000_000,
        in_flight=np.zeros(queries, dtype=np.int64),
        issued=queries,
        issue_end_ns=int(scheduled[-1]),
    )


def test_one_scheduler_hiccup_warns_but_a_generator_late_again_and_again_is_invalid() -> None:
    """p99 of a short run is its latest query or two: one query sent 3 ms late (a shared machine's
    scheduler) is a warning; the same lateness on 1% of the queries, and at least three, makes the run
    invalid for the generator."""
    load = LoadSettings(qps=100, latency_bound_ms=50, percentile=90)
    hiccup = report(late_record(1, 3.0, queries=80), "server", load, 1, 100.0, 50.0)
    assert not any("load generator" in reason for reason in hiccup.invalid)
    assert any("1 of 80 queries issued more than" in warning for warning in hiccup.warnings)
    behind = report(late_record(8, 3.0), "server", load, 1, 100.0, 50.0)
    assert any("load generator was late" in reason and "8 of 400" in reason for reason in behind.invalid)


@pytest.mark.quiet
def test_multi_stream_query_latency_is_its_slowest_sample() -> None:
    """Live, four 2 ms samples a query every 20 ms: no query overruns its interval. Run alone (`quiet`):
    beside tests loading both cores, the model threads' late wake-ups made queries overrun."""
    load = LoadSettings(samples_per_query=4, interval_ms=20, percentile=90, max_in_flight=4)
    measurement = run("multi_stream", sleeper(0.002), load)
    section = measurement.load
    assert section["samples_per_query"] == 4 and section["overruns"] == 0
    assert section["certified"]["ok"] and section["certified"]["bound_ms"] == 20
    assert 2 <= measurement.latency_ms.median < 15
    # One model thread: 4 samples × 3 ms = 12 ms > a 5 ms interval, every query overruns.
    slow = run(
        "multi_stream", sleeper(0.003), LoadSettings(samples_per_query=4, interval_ms=5, percentile=90)
    )
    assert slow.load["overruns"] > 0
    assert slow.latency_ms.median >= 12
    assert not slow.validity.valid


def test_a_multi_stream_query_ends_with_its_slowest_sample_not_its_last_or_mean() -> None:
    """Scripted: four samples due together, ending 1, 7, 2 and 3 ms later (the slowest neither last
    sent nor last in the list's order): the query's latency is exactly 7 ms."""
    due = np.repeat(np.arange(300, dtype=np.int64) * 20_000_000, 4)
    taken = np.tile(np.array([1, 7, 2, 3], dtype=np.int64) * 1_000_000, 300)
    record = served_record(
        due, due.copy(), due + taken, np.zeros(due.size, dtype=np.int64), samples_per_query=4
    )
    load = LoadSettings(samples_per_query=4, interval_ms=20, percentile=90, max_in_flight=4)
    scripted = report(record, "multi_stream", load, 1, 50.0, 20.0)
    assert np.all(scripted.latencies_ns == 7_000_000)


@pytest.mark.quiet
def test_a_live_multi_stream_query_takes_its_slowest_samples_time() -> None:
    """Live: four model threads, samples that sleep 1, 2, 3 and 4 ms by their input: each query takes
    about the slowest sample's 4 ms, not the 10 ms of their sum nor the 2.5 ms of their mean. Run
    alone (`quiet`): beside another test loading both cores, the threads' wake-ups from their sleeps
    came late enough to put a run's median at 7.4 ms, which says nothing of how a query ends."""
    load = LoadSettings(samples_per_query=4, interval_ms=20, percentile=90, max_in_flight=4)

    def by_input(batch: int) -> None:
        time.sleep((1 + batch % 4) / 1000)

    live = get_scenario("multi_stream").run(by_input, [0, 1, 2, 3], 1, QUICK, load=load)
    assert 4.0 <= live.latency_ms.median < 7.0, live.latency_ms.median


def test_multi_stream_needs_as_many_inputs_as_samples() -> None:
    with pytest.raises(UserError, match="distinct inputs") as caught:
        get_scenario("multi_stream").run(sleeper(0), [0, 1], 1, QUICK, load=LoadSettings(samples_per_query=4))
    assert caught.value.field == "samples_per_query"


def test_back_to_back_points_need_enough_samples_for_their_percentile() -> None:
    """`min_count=1 max_seconds=0` used to give a one-sample point marked valid."""
    tiny = MeasureSettings(warmup_count=0, warmup_seconds=0, min_count=1, min_seconds=0, max_seconds=0)
    for scenario in ("single_stream", "offline"):
        measurement = get_scenario(scenario).run(sleeper(0.001), [0], 1, tiny)
        assert not measurement.validity.valid
        assert any("too few samples to certify" in r for r in measurement.validity.reasons)
    enough = get_scenario("single_stream").run(sleeper(0.0005), [0], 1, QUICK)
    certified = enough.load["certified"]
    assert certified["ok"] and certified["percentile"] == 90
    assert enough.latency_ms.count >= 64  # LoadGen's minimum for an early-stopping p90
    assert certified["estimate_ms"] >= enough.latency_ms.p90


def probe_at(capacity: float):
    def probe(qps: float) -> Probe:
        return Probe(qps, qps <= capacity, "", None, None, 0.0)  # type: ignore[arg-type]

    return probe


@pytest.mark.parametrize("start", [1.0, 137.0, 5000.0])
def test_search_brackets_then_bisects_to_within_its_resolution(start: float) -> None:
    best, probes = find_max_qps(probe_at(137.0), start, resolution=0.05, cap_qps=100_000)
    assert best is not None
    assert 137.0 / 1.05 <= best.qps <= 137.0
    assert len(probes) < 24


def test_search_reports_no_rate_when_none_passes() -> None:
    best, probes = find_max_qps(probe_at(0.0), 10.0, resolution=0.05, cap_qps=1000)
    assert best is None and probes[-1].qps < 0.2


def queue_record(schedule: Schedule, queries: int, service_ns: int, servers: int) -> IssueRecord:
    """What a perfect generator and `servers` model threads of exactly `service_ns` each would
    record for the first `queries` of `schedule`, in virtual time: each query sent when due, and
    begun first come, first served when a thread frees (with a fixed service time threads free in
    start order, so query n waits for query n − servers to end)."""
    arrivals = schedule.offsets_ns(queries) + 1_000_000
    started = np.empty(queries, dtype=np.int64)
    for n, arrival in enumerate(arrivals.tolist()):
        started[n] = arrival if n < servers else max(arrival, int(started[n - servers]) + service_ns)
    ended = started + service_ns
    # Ends are in start order, so those before n still running when n was sent are a suffix.
    in_flight = np.arange(queries) - np.array(
        [np.searchsorted(ended[:n], arrival, side="right") for n, arrival in enumerate(arrivals)]
    )
    return served_record(arrivals, started, ended, in_flight.astype(np.int64), stop_reason="certified")


def served_record(
    due: np.ndarray,
    started: np.ndarray,
    ended: np.ndarray,
    in_flight: np.ndarray | None = None,
    samples_per_query: int = 1,
    stop_reason: str = "max_seconds",
) -> IssueRecord:
    """The record of samples each sent when due, with these start and end times."""
    return IssueRecord(
        start_ns=0,
        samples_per_query=samples_per_query,
        scheduled=due,
        sent=due.copy(),
        started=started,
        ended=ended,
        in_flight=np.zeros(due.size, dtype=np.int64) if in_flight is None else in_flight,
        issued=int(due.size),
        issue_end_ns=int(due[-1]),
        stop_reason=stop_reason,
    )


def test_search_finds_a_known_capacity() -> None:
    """Eight model threads of exactly 10 ms each (800 queries/s at most), in virtual time: a probe at
    rate q draws the seeded Poisson schedule, queues it first come, first served, and is judged by the
    real report and pass rule (p90 ≤ 40 ms certified, no generator or overload finding). The same
    gaps scaled by 1/q only ever wait longer as q grows, so the probe passes below one rate and fails
    above it; a fine scan finds that rate, and the search must end within one bisection step (its
    resolution) below it, never above."""
    servers, service_ns, queries = 8, 10_000_000, 1000
    load = LoadSettings(find_max_qps=True, latency_bound_ms=40, percentile=90, max_in_flight=servers)

    def probe(qps: float) -> Probe:
        schedule = Schedule("poisson", qps, seed=load.seed)
        record = queue_record(schedule, queries, service_ns, servers)
        result = report(record, "server", load, 1, qps, load.latency_bound_ms)
        passed, reason = probe_passes(result)
        return Probe(qps, passed, reason, record, result, 0.0)

    # The capacity: the last passing rate of a scan in steps of 3 queries/s, refined in steps of 0.01%; every
    # rate below it passes and every one above fails.
    coarse = np.arange(300.0, 1200.0, 3.0)
    verdicts = [probe(q).passed for q in coarse]
    last = max(i for i, ok in enumerate(verdicts) if ok)
    assert all(verdicts[: last + 1]) and not any(verdicts[last + 1 :]), "the probe is not monotone"
    fine = np.arange(coarse[last], coarse[last + 1], coarse[last] * 1e-4)
    capacity = max(q for q in fine if probe(q).passed)
    assert 0.5 * servers * 1e9 / service_ns < capacity < servers * 1e9 / service_ns

    resolution = load.resolution
    for start in (100.0, capacity, 5000.0):
        best, probes = find_max_qps(probe, start, resolution=resolution, cap_qps=100_000)
        assert best is not None and best.passed
        assert capacity / (1 + resolution) <= best.qps <= capacity * (1 + 1e-4), (start, best.qps, capacity)
        assert all(p.passed == (p.qps <= capacity) for p in probes if abs(p.qps / capacity - 1) > 1e-4)
        assert len(probes) < 24
        point = best.curve_point()
        assert point["passed"] and point["certified"] and point["reason"] == "certified"
        assert point["p90_ms"] <= 40


def test_back_to_back_issues_each_query_when_the_previous_completed() -> None:
    """LoadGen >= 1.0's multi_stream: a query's samples are sent together, the next query only once
    all of them completed; its latency is its slowest sample's (one in four sleeps 6 ms, the others
    1 ms, on four model threads)."""
    per_query, queries = 4, 40

    def predict(batch: int) -> None:
        time.sleep(0.006 if batch == 3 else 0.001)

    def decide(record: IssueRecord, elapsed_ns: int) -> str | None:
        assert (record.ended[: record.issued] > 0).all()  # consulted between queries only
        return "certified" if record.issued >= queries * per_query else None

    record = issue_back_to_back(
        predict,
        [0, 1, 2, 3],
        per_query,
        max_in_flight=4,
        max_seconds=10,
        check_every_seconds=0,
        decide=decide,
    )
    assert record.stop_reason == "certified" and record.issued == queries * per_query
    shape = (queries, per_query)
    scheduled, started, ended = (a.reshape(shape) for a in (record.scheduled, record.started, record.ended))
    assert np.array_equal(record.sent, record.scheduled)
    assert (scheduled == scheduled[:, :1]).all()  # a query's samples issued at one moment
    # Each query issued, and each of its samples begun, only after the previous query's last sample ended.
    assert (scheduled[1:, 0] >= ended[:-1].max(axis=1)).all()
    assert (started[1:].min(axis=1) >= ended[:-1].max(axis=1)).all()
    load = LoadSettings(samples_per_query=per_query, max_in_flight=4, back_to_back=True, percentile=90)
    result = report(record, "multi_stream", load, 1, None, None)
    assert np.array_equal(result.latencies_ns, ended.max(axis=1) - scheduled[:, 0])
    assert result.latencies_ns.min() >= 6_000_000  # the slow sample's sleep
    section = result.section
    assert section["back_to_back"] is True and section["interval_ms"] is None and "overruns" not in section
    assert section["target_qps"] is None and section["late"] == 0 and section["unfinished"] == 0
    assert section["issue_lateness_ms"]["max"] == 0.0
    assert section["achieved_qps"] == section["scheduled_qps"] > 0
    assert not any("load generator" in reason for reason in result.invalid)


def test_multi_stream_back_to_back_estimates_its_percentile() -> None:
    load = LoadSettings(samples_per_query=4, max_in_flight=4, back_to_back=True, percentile=90)
    measurement = run("multi_stream", sleeper(0.002), load)
    section = measurement.load
    assert section["back_to_back"] and section["interval_ms"] is None and "overruns" not in section
    assert section["target_qps"] is None and section["achieved_qps"] > 0
    certified = section["certified"]
    assert certified["ok"] and certified["bound_ms"] is None and certified["estimate_ms"] >= 2
    assert measurement.stop_reason == "certified"
    assert 2 <= measurement.latency_ms.median < 15


def test_back_to_back_cancels_a_query_still_running_at_max_seconds() -> None:
    """A query whose second sample never began by max_seconds is cancelled: unfinished, so the point is
    overloaded (with no target rate to name)."""
    record = issue_back_to_back(
        sleeper(0.4),
        [0, 1],
        2,
        max_in_flight=1,
        max_seconds=0.1,
        check_every_seconds=0,
        decide=lambda r, e: None,
    )
    assert record.stop_reason == "max_seconds" and record.issued == 2
    assert record.ended[0] > 0 and record.ended[1] == 0
    load = LoadSettings(samples_per_query=2, back_to_back=True, percentile=90)
    result = report(record, "multi_stream", load, 1, None, None)
    assert result.section["unfinished"] == 1
    assert any(reason.startswith("overloaded: 1 of 1 queries never completed") for reason in result.invalid)


def scripted_record(due_ms: list[float], service_ms: float, gap_us: float) -> IssueRecord:
    """One model thread that serves each sample for `service_ms` and, between one completion and
    the next waiting sample's start, spends `gap_us` of its own."""
    due = (np.asarray(due_ms) * 1e6).astype(np.int64)
    started, ended = np.zeros_like(due), np.zeros_like(due)
    free = 0
    for index, arrival in enumerate(due):
        started[index] = max(arrival, free + int(gap_us * 1e3)) if free > arrival else arrival
        ended[index] = started[index] + int(service_ms * 1e6)
        free = ended[index]
    return served_record(due, started, ended)


def test_the_serving_gap_is_read_off_the_waiting_queries_and_warned_about_near_saturation() -> None:
    """A scripted queue: the queries that waited start exactly `gap` after the completion that freed
    the thread, and only those count; at 90% utilisation a 30 µs gap on a 2 ms service lengthens
    the mean latency by about 16% (M/D/1: from 2 + 9 ms to 2 + 10.7 ms; less at the draw's own
    utilisation), which is warned about; with no gap there is no warning."""
    rng = np.random.default_rng(0)
    due = np.cumsum(rng.exponential(2.0 / 0.9, 600))
    load = LoadSettings(qps=450, percentile=99, max_in_flight=1)
    gapped = report(scripted_record(list(due), 2.0, 30.0), "server", load, 1, 450.0, None)
    gaps = gapped.section["serving_gap_ms"]
    assert gaps["p50"] == pytest.approx(0.030) and gaps["max"] == pytest.approx(0.030)
    warning = next(w for w in gapped.warnings if "serving side's own 30 µs" in w)
    # The M/D/1 mean at the run's own utilisation (its Poisson draw strays from 0.9), held 2.03 ms.
    rho = gapped.section["completed_qps"] * 2.0 / 1000
    rho_held = rho * 2.03 / 2.0
    expected = (2.0 + rho_held * 2.03 / (2 * (1 - rho_held))) / (2.0 + rho * 2.0 / (2 * (1 - rho))) - 1
    assert f"mean latency about {expected:.0%} longer" in warning, (warning, rho)
    clean = report(scripted_record(list(due), 2.0, 0.0), "server", load, 1, 450.0, None)
    assert clean.section["serving_gap_ms"]["max"] == 0.0
    assert not any("serving side" in warning for warning in clean.warnings)
    # Nobody waits at a low rate: nothing to read, nothing to warn.
    idle = report(scripted_record([10.0 * i for i in range(300)], 2.0, 30.0), "server", load, 1, 100.0, None)
    assert idle.section["serving_gap_ms"]["p50"] is None
