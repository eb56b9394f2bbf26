"""benchmarks/fleet.py's own core at a tiny scale: a Redis and a PostgreSQL of its own, a real api, two
real workers and one simulated agent; every job it submits ends once, and its table has every figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fleet import measure, print_table, private_fleet

pytestmark = pytest.mark.slow


def test_a_tiny_fleet_loses_nothing_doubles_nothing_and_fills_its_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a fleet of two real agents (one runs the jobs) and one simulated agent
    with private_fleet(tmp_path, real=2, executors=1) as fleet:
        # When the benchmark takes its row: 10 jobs each side, 3 one at a time, 4 clients once each
        row = measure(fleet, 3, jobs=10, latency_jobs=3, clients=4, rounds=1, idle_s=1.0)
        listed = {agent.id for agent in fleet.registry.live()}

    # Then every job ended succeeded, once: 2 warm-up + 10 burst + 3 latency + 4 client submissions
    assert (row.jobs, row.lost, row.doubled) == (19, 0, 0)
    assert (row.agents, row.real, row.simulated) == (3, 2, 1)
    assert listed == {"fleet-0000", "fleet-0001", "fleet-0002"}
    for name in ("mlscope_jobs_per_s", "bare_jobs_per_s", "ratio", "start_p50_ms", "start_p99_ms",
                 "read_p99_ms", "submit_p99_ms", "live_ms", "route_ms"):  # fmt: skip
        assert getattr(row, name) > 0, name
    assert row.start_p50_ms <= row.start_p99_ms
    assert row.api_cpu_share >= 0 and row.redis_cpu_per_agent >= 0

    # And the table prints the row under its header
    print_table([row], clients=4)
    lines = capsys.readouterr().out.splitlines()
    assert "ratio ≥0.8" in lines[0] and "lost" in lines[0] and "doubled" in lines[0]
    assert lines[1].split()[:2] == ["3", "2+1"]
    assert "lost 0, doubled 0 (target 0 and 0: met)" in lines[2]
