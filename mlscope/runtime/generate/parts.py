"""Load from many hosts: one seeded Poisson schedule split across agents, each issuing its part at
one instant, and every request of every part merged into one point (docs/farm.md, "Load from many
hosts").

Each agent runs `run_part`: it builds the whole run's requests (the same on every agent: same
settings, same seed), keeps those the split gives its part (`Schedule.positions`, a seeded draw per
query: the parts are independent Poisson processes that superpose to the whole schedule exactly),
and issues them at their due times in the whole schedule, counted from the shared start instant.
Its measurement is an ordinary one for its own requests, plus `generation.part`: every request's
record and every due and hand-over time, relative to the schedule's start, so nothing is summarised
before the merge.

`merge_parts` rebuilds the whole run's records from the parts and reduces them with the same
`reduce_records` one agent's run uses: the percentiles, goodput and certificates are those of every
request, not a combination of the parts' summaries (percentiles do not combine). The merged
measurement says which agent issued which requests, each agent's lateness and clock offset.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from mlscope.contract.generation import GenerationSettings
from mlscope.contract.load import LoadSettings, Shard
from mlscope.runtime.generate.records import GenerateEngine, GenerationRequest, RequestRecord
from mlscope.runtime.generate.reduce import Point, reduce_records
from mlscope.runtime.measure.generator import IssueRecord, Schedule
from mlscope.runtime.measure.loop import NS_PER_S
from mlscope.runtime.measure.parts import agent_rows, busiest, late_reasons, start_instant_ns
from mlscope.runtime.measure.settings import MeasureSettings

__all__ = ["PART_KEY", "merge_parts", "part_schedule", "run_part"]

# Where a part's raw records travel, inside its measurement's generation section.
PART_KEY = "part"


def part_schedule(load: LoadSettings, shard: Shard) -> Schedule:
    """The whole run's Poisson schedule at load.qps, as part `shard.index` of `shard.count` sees it."""
    assert load.qps is not None  # LoadSettings refuses agents > 1 without a rate
    return Schedule("poisson", load.qps, seed=load.seed, part=shard.index, parts=shard.count)


def run_part(
    engine: GenerateEngine,
    requests: list[GenerationRequest],
    settings: GenerationSettings,
    load: LoadSettings,
    measure: MeasureSettings,
    shard: Shard,
    send: Callable[..., Point],
    *,
    remote: bool,
    on_done: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Issue this agent's part of `requests` (the whole run's) at the shared start, and measure it.

    Args:
        send: the driver's `issue_requests` (passed in: the driver calls this module).

    Returns:
        The part's own measurement (its requests alone, at its share of the rate), with
        `generation.part` holding what the merge needs.
    """
    schedule = part_schedule(load, shard)
    mine = schedule.positions(len(requests))
    due = schedule.whole().offsets_ns(len(requests))[mine]
    share = Schedule("trace", schedule.rate / shard.count, trace_ns=tuple(int(d) for d in due))
    started_ns = start_instant_ns(shard)
    lateness_s = max(0.0, (time.perf_counter_ns() - started_ns) / NS_PER_S)
    point = send(
        engine,
        [requests[int(i)] for i in mine],
        settings.concurrency,
        schedule=share if mine.size else None,
        start_at_ns=started_ns,
        # progress counts this part's requests as shares of the whole run's
        on_done=None if on_done is None else lambda done: on_done(done * len(requests) // max(mine.size, 1)),
    )
    measurement = reduce_records(point, settings, load, measure, remote=remote)
    measurement["generation"][PART_KEY] = _shipped(point, shard, started_ns, lateness_s)
    return measurement


def _shipped(point: Point, shard: Shard, start_ns: int, ready_late_s: float) -> dict[str, Any]:
    """What a part ships for the merge: its identity, its clock, its wall time and every record and
    hand-over, times relative to the schedule's start."""

    def rel(ns: int | None) -> int | None:
        return None if ns is None else int(ns - start_ns)

    records = [
        [
            r.index,
            r.prompt_tokens,
            r.requested_tokens,
            r.output_tokens,
            rel(r.due_ns),
            rel(r.start_ns),
            rel(r.end_ns),
            r.error,
            [int(t - start_ns) for t in r.token_ns],
            list(r.chunk_tokens),
            r.turn,
            r.prompt_counted,
        ]
        for r in point.records
    ]
    issued = point.issued
    lead = 0 if issued is None else int(start_ns - issued.start_ns)
    return {
        **shard.to_dict(),
        "requests": len(records),
        "ready_late_s": round(ready_late_s, 6),
        "wall_ns": int(point.wall_ns - lead),
        "environment": point.environment,
        "records": records,
        "scheduled_ns": [] if issued is None else [int(v - lead) for v in issued.scheduled.tolist()],
        "sent_ns": [] if issued is None else [int(v - lead) for v in issued.sent.tolist()],
    }


def _record(row: Sequence[Any]) -> RequestRecord:
    (index, prompt, requested, output, due, start, end, error, tokens, chunks, turn, counted) = row
    return RequestRecord(
        index=index,
        prompt_tokens=prompt,
        requested_tokens=requested,
        output_tokens=output,
        start_ns=start,
        token_ns=list(tokens),
        chunk_tokens=list(chunks),
        end_ns=end,
        error=error,
        due_ns=due,
        turn=turn,
        prompt_counted=counted,
    )


def merge_parts(
    parts: Sequence[Mapping[str, Any]],
    agents: Sequence[str | None],
    settings: GenerationSettings,
    load: LoadSettings,
    measure: MeasureSettings,
    *,
    remote: bool,
) -> dict[str, Any]:
    """The measurement of every request of every part: the whole schedule's point, reduced as one
    agent's would be, with `load.agents` saying who issued what.

    Args:
        parts: each part's `generation.part` document, in part order.
        agents: the agent that ran each part (None where unknown).
    """
    records = sorted((_record(row) for part in parts for row in part["records"]), key=lambda r: r.index)
    scheduled = np.sort(np.asarray([v for part in parts for v in part["scheduled_ns"]], dtype=np.int64))
    sent = np.sort(np.asarray([v for part in parts for v in part["sent_ns"]], dtype=np.int64))
    count = int(scheduled.size)
    zeros = np.zeros(count, dtype=np.int64)
    issued = IssueRecord(0, 1, scheduled, sent, zeros, zeros.copy(), zeros.copy(), issued=count)
    environment = busiest(parts)
    wall_ns = max(int(part["wall_ns"]) for part in parts)
    point = Point(records, wall_ns, load.qps, environment, issued if count else None)
    measurement = reduce_records(point, settings, load, measure, remote=remote)
    late = late_reasons(parts, agents)
    if late:
        validity = measurement["validity"]
        validity["valid"] = False
        validity["reasons"] = [*late, *validity["reasons"]]
    counts = [len(part["records"]) for part in parts]
    measurement.setdefault("load", {})["agents"] = agent_rows(parts, agents, load, counts)
    return measurement
