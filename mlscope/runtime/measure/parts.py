"""A generator's part of a schedule split across agents, and the merge of the parts (docs/farm.md,
"Load from many hosts"): what every split scenario shares.

A part ships its generator's record whole (`ship`): each sample's due, hand-over, start and end
times, on the clock of the shared start (every part's generator started its clock at the same
instant, so the parts' times compare directly). `merged_record` lays the parts' samples back into
one record of the whole schedule, as one generator would have recorded it, and the scenario's own
report runs on it: percentiles and certificates of every query, never a combination of summaries.

The server scenario's parts run until their own stopping rule ends them, so they end at different
times; the merge keeps the whole schedule's queries due before the first part stopped issuing,
which all parts issued: the superposition of the parts is the requested process exactly there.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from mlscope.contract.load import LoadSettings, Shard
from mlscope.runtime.measure.generator import IssueRecord
from mlscope.runtime.measure.load_report import report
from mlscope.runtime.measure.load_run import outcome_of
from mlscope.runtime.measure.loop import NS_PER_S
from mlscope.runtime.measure.scenario_base import measurement_of
from mlscope.runtime.measure.settings import MeasureSettings

__all__ = [
    "agent_rows",
    "busiest",
    "late_reasons",
    "merge_server_parts",
    "merged_record",
    "ship",
    "start_instant_ns",
]

_NS_PER_MS = 1_000_000
_ARRAYS = ("scheduled", "sent", "started", "ended")
_PRIORITIES = ("normal", "nice -10", "realtime")


def start_instant_ns(shard: Shard) -> int:
    """The shared start instant on this process's perf_counter_ns clock: the reference clock's
    `start_at`, less the offset the worker measured to it (0 where it could not)."""
    local_s = shard.start_at - (shard.clock_offset_s or 0.0)
    return time.perf_counter_ns() + int((local_s - time.time()) * NS_PER_S)


def ship(record: IssueRecord, shard: Shard, ready_late_s: float) -> dict[str, Any]:
    """A part's record as the merge needs it: its identity and clock, and every sample's times (ns
    after its generator's start, which every part shares). The part's environment travels in its
    measurement."""
    shipped: dict[str, Any] = {
        **shard.to_dict(),
        "ready_late_s": round(ready_late_s, 6),
        "samples_per_query": record.samples_per_query,
        "issue_end_ns": int(record.issue_end_ns),
        "issuer_cpu_ns": int(record.issuer_cpu_ns),
        "issuer_priority": record.issuer_priority,
        "stop_reason": record.stop_reason,
    }
    for name in _ARRAYS:
        shipped[f"{name}_ns"] = [int(v) for v in getattr(record, name).tolist()]
    shipped["idle_start_ns"] = (
        None if record.idle_start is None else [int(v) for v in record.idle_start.tolist()]
    )
    return shipped


def merged_record(parts: Sequence[Mapping[str, Any]]) -> IssueRecord:
    """One record of the whole schedule from its parts' (see the module's docstring for the cut)."""
    per_query = int(parts[0]["samples_per_query"])
    issued = [part for part in parts if part["scheduled_ns"]]
    cut = min((part["scheduled_ns"][-1] for part in issued), default=-1)
    columns = {name: _joined(parts, f"{name}_ns") for name in _ARRAYS}
    idle = _joined(parts, "idle_start_ns", fill=-1)
    order = np.argsort(columns["scheduled"], kind="stable")
    keep = order[columns["scheduled"][order] <= cut]
    count = int(keep.size) - int(keep.size) % per_query
    keep = keep[:count]
    record = IssueRecord(
        0,
        per_query,
        columns["scheduled"][keep],
        columns["sent"][keep],
        columns["started"][keep],
        columns["ended"][keep],
        np.zeros(count, dtype=np.int64),
        issued=count,
        stop_reason=_stop_reason(parts),
        issue_end_ns=min((int(part["issue_end_ns"]) for part in issued), default=0),
        issuer_cpu_ns=sum(int(part["issuer_cpu_ns"]) for part in parts),
        issuer_priority=min((str(part["issuer_priority"]) for part in parts), key=_PRIORITIES.index),
        idle_start=idle[keep],
    )
    record.fill_in_flight()
    return record


def _joined(parts: Sequence[Mapping[str, Any]], key: str, fill: int = 0) -> npt.NDArray[np.int64]:
    arrays = []
    for part in parts:
        values = part.get(key)
        size = len(part["scheduled_ns"])
        arrays.append(
            np.full(size, fill, dtype=np.int64) if values is None else np.asarray(values, dtype=np.int64)
        )
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)


def _stop_reason(parts: Sequence[Mapping[str, Any]]) -> str:
    """The merged run's stop: every part's own when they agree, else the first part's that is not
    "certified" (the merge is only as certified as its least certified part)."""
    reasons = [str(part["stop_reason"]) for part in parts]
    return next((reason for reason in reasons if reason != "certified"), reasons[0])


def busiest(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The environment of the part whose machine was busiest with other work: one busy agent delays
    its part, so it speaks for the merged run."""
    return max(
        (dict(part["environment"]) for part in parts), key=lambda env: env.get("other_cpu_share") or 0.0
    )


def late_reasons(parts: Sequence[Mapping[str, Any]], agents: Sequence[str | None]) -> list[str]:
    """One line per part that began after the shared start: the merged point does not hold the
    load it promised, so it is not valid."""
    return [
        f"agent {agent or index} began {part['ready_late_s']:.3f} s after the shared start"
        for index, (part, agent) in enumerate(zip(parts, agents, strict=True))
        if part["ready_late_s"] > 0
    ]


def agent_rows(
    parts: Sequence[Mapping[str, Any]],
    agents: Sequence[str | None],
    load: LoadSettings,
    counts: Sequence[int],
) -> list[dict[str, Any]]:
    """Each agent's share of a merged run: what it issued (`counts`), how late, and its clock."""
    rows = []
    for part, agent, count in zip(parts, agents, counts, strict=True):
        scheduled = np.asarray(part["scheduled_ns"], dtype=np.int64)
        sent = np.asarray(part["sent_ns"], dtype=np.int64)
        lateness = (sent - scheduled).astype(np.float64) / _NS_PER_MS
        span_s = (int(scheduled[-1]) - int(scheduled[0])) / NS_PER_S if scheduled.size > 1 else 0.0
        offset, rtt = part.get("clock_offset_s"), part.get("clock_rtt_s")
        rows.append(
            {
                "agent": agent,
                "part": part["index"],
                "requests": count,
                "target_qps": (load.qps or 0.0) / part["count"],
                "scheduled_qps": (scheduled.size - 1) / span_s if span_s > 0 else None,
                "issue_lateness_ms": {
                    "p50": float(np.percentile(lateness, 50)),
                    "p99": float(np.percentile(lateness, 99)),
                    "max": float(lateness.max()),
                }
                if lateness.size
                else None,
                "ready_late_s": part["ready_late_s"],
                "clock_offset_ms": None if offset is None else offset * 1e3,
                "clock_rtt_ms": None if rtt is None else rtt * 1e3,
            }
        )
    return rows


def merge_server_parts(
    parts: Sequence[Mapping[str, Any]],
    agents: Sequence[str | None],
    load: LoadSettings,
    settings: MeasureSettings,
    batch_size: int,
    warmup_count: int,
) -> dict[str, Any]:
    """The server scenario's measurement of every query of every part, reported as one generator's
    run of the whole schedule would be, with `load.agents` saying who issued what."""
    record = merged_record(parts)
    result = report(record, "server", load, batch_size, load.qps, load.latency_bound_ms)
    outcome = outcome_of(record, result, warmup_count, False)
    outcome.invalid[:0] = late_reasons(parts, agents)
    # The most contended agent's machine speaks for the run: one busy agent delays its part.
    environment = max(
        (dict(part["environment"]) for part in parts), key=lambda env: env.get("other_cpu_share") or 0.0
    )
    measurement: dict[str, Any] = dict(
        measurement_of("server", outcome, batch_size, settings, environment).to_dict()
    )
    cut = int(record.scheduled[-1]) if record.issued else -1
    kept = [int((np.asarray(part["scheduled_ns"]) <= cut).sum()) for part in parts]
    load_section: dict[str, Any] = dict(measurement.get("load") or {})
    load_section["agents"] = agent_rows(parts, agents, load, kept)
    measurement["load"] = load_section
    return measurement
