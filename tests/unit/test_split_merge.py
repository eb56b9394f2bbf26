"""Load split across agents (docs/farm.md, "Load from many hosts"): the split of one seeded Poisson
schedule, the parts' settings, and the merge, held to the one-agent reduction of the same requests."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from mlscope.cli.render_load import agents_lines
from mlscope.contract.errors import UserError
from mlscope.contract.generation import GenerationSettings
from mlscope.contract.load import LoadSettings, Shard
from mlscope.runtime.generate.parts import PART_KEY, _shipped, merge_parts
from mlscope.runtime.generate.records import RequestRecord
from mlscope.runtime.generate.reduce import Point, reduce_records
from mlscope.runtime.measure.generator import IssueRecord, Schedule
from mlscope.runtime.measure.load_report import report
from mlscope.runtime.measure.parts import merge_server_parts, merged_record, ship
from mlscope.runtime.measure.settings import MeasureSettings

LEAD_NS = 5_000_000


@pytest.mark.parametrize("parts", [2, 4, 7])
def test_the_parts_of_a_split_schedule_are_the_whole_schedule_query_for_query(parts: int) -> None:
    whole = Schedule("poisson", 250.0, seed=11)
    split = [dataclasses.replace(whole, part=index, parts=parts) for index in range(parts)]
    positions = [part.positions(5000) for part in split]
    # every query of the whole goes to exactly one part ...
    assert np.array_equal(np.sort(np.concatenate(positions)), np.arange(5000))
    # ... at its due time in the whole schedule, whichever count a part asks for
    merged = np.sort(np.concatenate([part.offsets_ns(400) for part in split]))
    expected = whole.offsets_ns(5000)
    assert np.array_equal(merged[: 300 * parts], expected[: 300 * parts])
    # the assignment is a prefix of a longer one: two agents asking for different lengths agree
    assert np.array_equal(split[0].positions(9000)[: positions[0].size], positions[0])


def test_each_part_is_a_poisson_process_at_its_share_of_the_rate() -> None:
    """Thinning, not dealing in turn: each part's gaps are exponential (coefficient of variation 1)
    with mean parts / rate; dealing every 4th query would give Erlang-4 gaps (CV 0.5)."""
    whole = Schedule("poisson", 400.0, seed=5)
    part = dataclasses.replace(whole, part=1, parts=4)
    gaps = np.diff(part.offsets_ns(20_000)).astype(np.float64) / 1e9
    assert gaps.mean() == pytest.approx(4 / 400.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)


def test_a_split_needs_a_rate_and_open_loop_scenarios() -> None:
    with pytest.raises(UserError) as no_rate:
        LoadSettings.from_dict({"agents": 4})
    assert no_rate.value.field == "agents" and "give qps" in no_rate.value.message
    with pytest.raises(UserError) as closed:
        LoadSettings.from_dict({"agents": 4, "qps": 10}).check_scenarios(["generate", "offline"])
    assert closed.value.field == "agents" and "offline" in closed.value.message
    with pytest.raises(UserError) as bad_part:
        LoadSettings.from_dict(
            {
                "agents": 2,
                "qps": 10,
                "shard": {"group": "g", "index": 2, "count": 2, "start_at": 0, "ids": ["a", "b"]},
            }
        )
    assert bad_part.value.field == "shard"
    with pytest.raises(UserError, match="agents"):
        LoadSettings.from_dict({"agents": 10_000, "qps": 10})


def _records(due: np.ndarray, base_ns: int) -> list[RequestRecord]:
    """Requests with scripted timing: a wait for a slot, a first token, four more tokens; a few
    failures; absolute times on a clock whose schedule start is `base_ns`."""
    rng = np.random.default_rng(3)
    records = []
    for index, offset in enumerate(due.tolist()):
        due_ns = base_ns + int(offset)
        start = due_ns + int(rng.integers(0, 2_000_000))
        first = start + int(rng.integers(10_000_000, 40_000_000))
        tokens = [first + k * int(rng.integers(2_000_000, 6_000_000)) for k in range(5)]
        record = RequestRecord(index, 40, 5, 5, start, tokens, [1] * 5, tokens[-1] + 100_000, due_ns=due_ns)
        if index % 37 == 5:
            record.error = "HTTP 500: scripted"
        records.append(record)
    return records


def _point(records: list[RequestRecord], base_ns: int, qps: float, due: np.ndarray) -> Point:
    start_ns = base_ns - LEAD_NS
    scheduled = (due + LEAD_NS).astype(np.int64)
    sent = scheduled + 50_000
    zeros = np.zeros(due.size, dtype=np.int64)
    issued = IssueRecord(start_ns, 1, scheduled, sent, zeros, zeros.copy(), zeros.copy(), int(due.size))
    wall = max((r.end_ns for r in records), default=base_ns) - start_ns
    return Point(records, wall, qps, {"other_cpu_share": 0.0, "cpu_count": 2}, issued)


def test_the_merge_of_the_parts_is_the_one_agent_reduction_of_the_same_requests() -> None:
    """Every figure that depends on the requests (percentiles with their intervals, goodput, the SLO
    certificates, failures, throughput) is the same whether one agent issued them or four did."""
    qps, total, parts = 200.0, 400, 4
    slo = "ttft_ms=30,tpot_ms=5"
    settings = GenerationSettings.from_dict({"requests": total, "output_tokens": 5, "slo": slo})
    load = LoadSettings.from_dict({"qps": qps, "agents": parts})
    measure = MeasureSettings()
    whole = Schedule("poisson", qps, seed=load.seed)
    due = whole.offsets_ns(total)
    alone = _point(_records(due, 10**12), 10**12, qps, due)
    one = reduce_records(alone, settings, load, measure, remote=True)

    shipped, ids = [], tuple(f"part{i}" for i in range(parts))
    everyone = _records(due, 0)
    for index in range(parts):
        mine = dataclasses.replace(whole, part=index, parts=parts).positions(total)
        base = 7 * 10**11 + index * 123_456_789  # each agent's own monotonic clock
        records = [dataclasses.replace(everyone[i], **_shifted(everyone[i], base)) for i in mine.tolist()]
        point = _point(records, base, qps / parts, due[mine])
        shard = Shard("group", index, parts, 0.0, ids, clock_offset_s=0.001 * index, clock_rtt_s=0.0002)
        shipped.append(_shipped(point, shard, base, 0.0))

    merged = merge_parts(shipped, [f"agent-{i}" for i in range(parts)], settings, load, measure, remote=True)
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms"):
        assert merged["generation"][metric] == one["generation"][metric], metric
    assert merged["generation"]["certified"] == one["generation"]["certified"]
    assert merged["generation"]["goodput_fraction"] == one["generation"]["goodput_fraction"]
    assert merged["generation"]["failed_requests"] == one["generation"]["failed_requests"]
    assert merged["generation"]["per_request"] == one["generation"]["per_request"]
    assert sorted(merged["latencies_ns"]) == sorted(one["latencies_ns"])
    assert merged["validity"] == one["validity"]
    assert merged["load"]["issue_lateness_ms"] == one["load"]["issue_lateness_ms"]
    # ... and the merged point says who issued what
    rows = merged["load"]["agents"]
    assert [row["agent"] for row in rows] == [f"agent-{i}" for i in range(parts)]
    assert sum(row["requests"] for row in rows) == total
    assert [row["clock_offset_ms"] for row in rows] == pytest.approx([0.0, 1.0, 2.0, 3.0])
    assert PART_KEY not in merged["generation"]


def _shifted(record: RequestRecord, base: int) -> dict[str, object]:
    """A record's times moved onto a clock whose schedule start is `base` (they start at 0)."""
    assert record.due_ns is not None
    return {
        "due_ns": record.due_ns + base,
        "start_ns": record.start_ns + base,
        "end_ns": record.end_ns + base,
        "token_ns": [t + base for t in record.token_ns],
    }


def test_a_part_that_began_late_makes_the_merged_point_invalid() -> None:
    qps, total = 100.0, 60
    settings = GenerationSettings.from_dict({"requests": total, "output_tokens": 5})
    load = LoadSettings.from_dict({"qps": qps, "agents": 2})
    whole = Schedule("poisson", qps, seed=0)
    due = whole.offsets_ns(total)
    everyone = _records(due, 0)
    shipped = []
    for index in range(2):
        mine = dataclasses.replace(whole, part=index, parts=2).positions(total)
        point = _point([everyone[i] for i in mine.tolist()], 0, qps / 2, due[mine])
        shipped.append(_shipped(point, Shard("g", index, 2, 0.0, ("a", "b")), 0, 0.0 if index == 0 else 1.5))
    merged = merge_parts(shipped, ["one", "two"], settings, load, MeasureSettings(), remote=True)
    assert merged["validity"]["valid"] is False
    assert merged["validity"]["reasons"][0] == "agent two began 1.500 s after the shared start"


def _served(due: np.ndarray, service_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A model with one thread serving queries in arrival order: (sent, started, ended)."""
    sent = due + 20_000
    started, ended = np.zeros_like(due), np.zeros_like(due)
    free = 0
    for i in range(due.size):
        started[i] = max(int(sent[i]), free)
        ended[i] = started[i] + int(service_ns[i])
        free = int(ended[i])
    return sent, started, ended


def test_the_server_merge_of_the_parts_is_the_report_of_the_whole_schedule() -> None:
    """Parts that stopped at different times: the merge keeps the whole schedule's queries up to the
    first part's last, and reports them as one generator's record of them would be."""
    qps, parts = 300.0, 3
    whole = Schedule("poisson", qps, seed=9)
    due = whole.offsets_ns(3000) + LEAD_NS
    service = np.random.default_rng(1).integers(500_000, 3_000_000, size=due.size)
    shipped = []
    for index in range(parts):
        mine = dataclasses.replace(whole, part=index, parts=parts).positions(due.size)
        mine = mine[: int(mine.size * (0.7 + 0.1 * index))]  # each part stopped at its own time
        sent, started, ended = _served(due[mine], service[mine])
        zeros = np.zeros(mine.size, dtype=np.int64)
        record = IssueRecord(0, 1, due[mine], sent, started, ended, zeros, int(mine.size), "certified")
        record.issue_end_ns, record.idle_start = int(due[mine][-1]), np.full(mine.size, -1, dtype=np.int64)
        shard = Shard("g", index, parts, 0.0, ("a", "b", "c"), clock_offset_s=0.0, clock_rtt_s=0.0001)
        shipped.append({**ship(record, shard, 0.0), "environment": {"other_cpu_share": 0.01 * index}})
    record = merged_record(shipped)
    cut = min(part["scheduled_ns"][-1] for part in shipped)
    assert np.array_equal(record.scheduled, due[due <= cut])  # the whole schedule up to the cut
    load = LoadSettings.from_dict({"qps": qps, "agents": parts})
    merged = merge_server_parts(shipped, ["x", "y", "z"], load, MeasureSettings(), 1, 10)
    alone = report(record, "server", load, 1, qps, None)
    assert merged["latencies_ns"] == [int(v) for v in alone.latencies_ns.tolist()]
    assert merged["load"]["certified"] == alone.section["certified"]
    assert merged["environment"] == {"other_cpu_share": 0.02}  # the busiest agent's
    assert [row["requests"] for row in merged["load"]["agents"]] == [
        int((np.asarray(part["scheduled_ns"]) <= cut).sum()) for part in shipped
    ]
    assert sum(row["requests"] for row in merged["load"]["agents"]) == record.issued


def test_run_refuses_agents_without_a_farm_target_in_one_line() -> None:
    flags = ["-f", "pytorch", "--scenario", "server", "--qps", "10", "--agents", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "mlscope", "run", "test_tiny_mlp", *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "--agents 2 splits the load across farm agents: give --on TARGET" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_merged_point_prints_who_issued_what() -> None:
    load = {
        "scheduled_qps": 119.6,
        "sent_qps": 119.4,
        "issue_lateness_ms": {"p99": 0.02},
        "agents": [
            {"agent": "a", "requests": 300, "scheduled_qps": 60.1, "issue_lateness_ms": {"p99": 0.0}}
            | {"clock_offset_ms": 0.25, "clock_rtt_ms": 0.4, "ready_late_s": 0.0},
            {"agent": "b", "requests": 300, "scheduled_qps": 59.5, "issue_lateness_ms": {"p99": 1.5}}
            | {"clock_offset_ms": None, "clock_rtt_ms": None, "ready_late_s": 0.75},
        ],
    }
    assert agents_lines(load, "") == [
        "agents     2 issued one schedule: intended 119.6/s, achieved 119.4/s; issue lateness p99 0.020 ms",
        "  a: 300 requests at 60.1/s, lateness p99 0.000 ms, clock +0.250 ms (± 0.200)",
        "  b: 300 requests at 59.5/s, lateness p99 1.500 ms, clock not measured, began 0.750 s late",
    ]
