"""The load generator's issuing process: every sample sent once, in order and not before it was due,
stopped by the decision, the query count or an error, leaving no process behind; the record's
in-flight counts and Little's law computed from its times (real processes, real clocks, a service
of known time that holds no GIL)."""

from __future__ import annotations

import os

import numpy as np
import psutil
import pytest

from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure import generator
from mlscope.runtime.measure.generator import IssueRecord, Schedule, issue
from mlscope.runtime.measure.load_report import report
from mlscope.runtime.measure.synthetic import FixedService


def issue_to(predict, schedule: Schedule, **overrides) -> IssueRecord:
    settings = {
        "max_in_flight": 1,
        "max_seconds": 1.0,
        "check_every_seconds": 0.05,
        "decide": lambda record, elapsed: None,
        "drain_seconds": 2.0,
    }
    settings.update(overrides)
    return issue(predict, [0, 1, 2, 3], schedule, **settings)


def issuers() -> list[psutil.Process]:
    """This process's issuing processes still alive (other tests' fixtures may run children of it)."""
    alive = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if any("issuer_process" in part for part in child.cmdline()):
                alive.append(child)
        except psutil.Error:
            pass  # it ended while we looked
    return alive


def test_every_sample_runs_once_in_order_never_before_it_is_due() -> None:
    seen: list[int] = []
    record = issue_to(seen.append, Schedule("poisson", 400.0, seed=3), queries=200)
    assert record.issued == 200 and record.stop_reason == "capacity"
    assert seen == [0, 1, 2, 3] * 50  # one model thread: sample i runs batches[i % 4], in order, once
    # Handed over early, a sample is held to its due time: never sent, never started before it.
    assert (record.sent >= record.scheduled).all()
    assert (record.started >= record.sent).all() and (record.ended >= record.started).all()
    assert record.issuer_priority in ("realtime", "nice -10", "normal")
    assert 0 < record.issuer_cpu_ns < record.issue_end_ns
    assert not issuers()


def test_a_query_of_several_samples_is_due_at_one_instant_and_no_sample_starts_before_it() -> None:
    record = issue_to(
        lambda batch: None, Schedule("fixed", 100.0, samples_per_query=4), queries=20, max_in_flight=4
    )
    assert record.issued == 80
    due = record.scheduled.reshape(20, 4)
    assert (due == due[:, :1]).all()
    assert (record.started.reshape(20, 4) >= due).all()


def test_the_decision_stops_issuing_and_names_why() -> None:
    def decide(record: IssueRecord, elapsed_ns: int) -> str | None:
        return "certified" if record.issued >= 20 else None

    record = issue_to(lambda batch: None, Schedule("fixed", 200.0), decide=decide, max_seconds=10.0)
    assert record.stop_reason == "certified"
    assert 20 <= record.issued < 200  # stopped within a check or two of the decision, not at 10 s
    assert not issuers()


def test_the_wall_clock_ends_a_run_the_decision_never_stops() -> None:
    record = issue_to(lambda batch: None, Schedule("fixed", 100.0), max_seconds=0.3)
    assert record.stop_reason == "max_seconds"
    assert 25 <= record.issued <= 35


def test_an_error_in_the_model_stops_the_run_and_is_raised_with_no_process_left() -> None:
    def predict(batch: int) -> None:
        if batch == 2:
            raise ValueError("the model broke")

    with pytest.raises(ValueError, match="the model broke"):
        issue_to(predict, Schedule("fixed", 200.0), max_seconds=10.0)
    assert not issuers()


def test_an_issuing_process_that_cannot_start_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generator, "_ISSUER", "/nonexistent/issuer_process.py")
    with pytest.raises(RuntimeError, match="issuing process failed to start"):
        issue_to(lambda batch: None, Schedule("fixed", 100.0), queries=5)
    assert not issuers()


def test_in_flight_is_counted_from_the_recorded_times() -> None:
    """Three samples sent at 0, 10 and 20 ms, each taking 15 ms: the second finds the first in flight,
    the third finds only the second (the first ended at 15 ms)."""
    times = np.array([0, 10, 20], dtype=np.int64) * 1_000_000
    record = IssueRecord(0, 1, times, times.copy(), times.copy(), times + 15_000_000, np.zeros(3, np.int64))
    record.issued = 3
    record.fill_in_flight()
    assert record.in_flight.tolist() == [0, 1, 1]


def test_littles_law_holds_on_a_queue_of_known_service() -> None:
    """An M/D/1 queue at utilisation 0.5: the time-averaged number in the system equals rate × mean
    latency (Little's law) up to the run's edges, and Poisson arrivals find about as many."""
    service = FixedService(4.0)
    record = issue_to(service, Schedule("poisson", 125.0, seed=1), queries=600, max_seconds=30.0)
    section = report(record, "server", LoadSettings(qps=125.0), 1, 125.0, None).section
    in_flight = section["in_flight"]
    assert in_flight["ratio"] == pytest.approx(1.0, abs=0.03), in_flight
    assert in_flight["observed"] == pytest.approx(in_flight["littles_law"], rel=0.25), in_flight
    assert section["generator"]["process"] == "separate"
    assert 0 < section["generator"]["cpu_share"] < 1


def test_more_in_flight_than_cores_warns_that_the_model_threads_contend() -> None:
    cores = len(os.sched_getaffinity(0))
    load = LoadSettings(qps=200.0, max_in_flight=cores + 1)
    record = issue_to(lambda batch: None, Schedule("poisson", 200.0), queries=50, max_in_flight=cores + 1)
    warnings = report(record, "server", load, 1, 200.0, None).warnings
    assert any(f"max_in_flight={cores + 1} is above the {cores} cores" in w for w in warnings), warnings
