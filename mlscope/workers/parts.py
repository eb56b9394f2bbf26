"""A worker's side of load split across agents (docs/farm.md, "Load from many hosts"): the clock
measured before a part runs, and the merge once every part has ended.

    API: one group evaluation (queued, on no queue) + one part per agent, pinned to agent:<id>,
         each carrying load.shard {group, index, count, start_at, ids}
    worker: offset to the registry's clock ─▶ the part runs (runtime/generate/parts.py) ─▶ stored
         ─▶ `complete_group`: when every part has ended, the merged point is stored on the group

Whichever worker stores the last part merges; two finishing at once both merge the same records to
the same point, and the store keeps the first (finishing an ended evaluation changes nothing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
from datetime import datetime, timezone
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.generation import GenerationSettings
from mlscope.contract.load import LoadSettings, Shard
from mlscope.contract.system_ids import machine_id
from mlscope.registry.agents import AgentRegistry
from mlscope.store import Store
from mlscope.store.errors import EvaluationNotFound, InvalidTransition
from mlscope.workers.admission import Admission

__all__ = ["complete_group", "with_clock"]

log = logging.getLogger("mlscope.worker")

_ENDED = ("succeeded", "failed", "cancelled")


def with_clock(admitted: Admission, registry: AgentRegistry) -> Admission:
    """The admission with its part's clock offset to the registry measured and recorded (unchanged
    for an evaluation that is not a part; without an offset where the registry cannot be read)."""
    request = admitted.request
    shard_doc = (request.load or {}).get("shard")
    if not shard_doc:
        return admitted
    shard = Shard.from_dict(shard_doc)
    try:
        offset_s, rtt_s = registry.clock_offset()
    except UserError as exc:
        log.warning(
            "part %d of %s: the registry's clock could not be read: %s", shard.index, shard.group, exc
        )
        return admitted
    timed = dataclasses.replace(shard, clock_offset_s=offset_s, clock_rtt_s=rtt_s)
    load = {**request.load, "shard": timed.to_dict()}
    return dataclasses.replace(admitted, request=dataclasses.replace(request, load=load))


def complete_group(store: Store, request_load: dict[str, Any]) -> str | None:
    """Store the merged point on the group of the part `request_load` belongs to, when every part has
    ended; returns the group's status when it ended here, else None (not a part, parts running, or
    already merged)."""
    shard_doc = (request_load or {}).get("shard")
    if not shard_doc:
        return None
    shard = Shard.from_dict(shard_doc)
    try:
        group: dict[str, Any] = dict(store.get_evaluation(shard.group))
        if group["status"] in _ENDED:
            return None
        parts: list[dict[str, Any]] = [dict(store.get_evaluation(part_id)) for part_id in shard.ids]
    except EvaluationNotFound as exc:
        log.warning("split load %s: %s", shard.group, exc)
        return None
    if any(part["status"] not in _ENDED for part in parts):
        return None
    broken = [(index, part) for index, part in enumerate(parts) if part["status"] != "succeeded"]
    if broken:
        index, part = broken[0]
        reason = (part.get("error") or {}).get("message") or part["status"]
        store.fail_evaluation(
            shard.group,
            error={
                "type": "PartFailed",
                "message": f"{len(broken)} of {len(parts)} parts did not succeed; part {index} "
                f"({_agent(part) or 'no agent'}): {reason}",
                "phase": "merge",
            },
        )
        return "failed"
    try:
        merged = _merged(group, parts)
    except Exception as exc:  # stored as the group's failure, so it never waits for a merge forever
        log.exception("split load %s: the parts could not be merged", shard.group)
        store.fail_evaluation(
            shard.group,
            error={
                "type": type(exc).__name__,
                "message": f"the parts could not be merged: {exc}",
                "phase": "merge",
            },
        )
        return "failed"
    # The group ran from its first part's start (the parts' own starts are theirs).
    starts = [part["started_at"] for part in parts if part.get("started_at")]
    with contextlib.suppress(InvalidTransition):  # another worker's merge ended it meanwhile
        store.start_evaluation(shard.group, started_at=_aware(min(starts)) if starts else None)
    store.finish_evaluation(shard.group, **merged)
    return "succeeded"


def _aware(value: Any) -> datetime:
    """A stored start as an aware datetime (the API's results carry ISO 8601 text)."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _agent(evaluation: dict[str, Any]) -> str | None:
    return ((evaluation.get("system") or {}).get("agent") or {}).get("id")


def _merged(group: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    """finish_evaluation's arguments for the group: one merged measurement per point (scenario and
    batch size) the parts measured, and the parts' systems."""
    request = group["request"]
    agents = [_agent(part) for part in parts]
    load = LoadSettings.from_dict({k: v for k, v in (request.get("load") or {}).items() if k != "shard"})
    points = [part["measurements"] for part in parts]
    if len({len(measured) for measured in points}) != 1:
        raise UserError(f"the parts measured different points: {[len(measured) for measured in points]}")
    merged = [_merged_point(list(same), agents, request, load) for same in zip(*points, strict=True)]
    for measurement in merged:
        for row, part in zip(measurement["load"]["agents"], parts, strict=True):
            row["evaluation"] = part["id"]
    systems = [part["system"] for part in parts]
    ids = sorted({system["id"] for system in systems})
    system = {
        "id": hashlib.sha256(",".join(ids).encode()).hexdigest()[:16],
        "hostname": f"{len(parts)} agents",
        "parts": ids,
        "agents": agents,
        # The machines it ran on (contract.system_ids): the group's machine id is of the set.
        "machines": sorted({s.get("machine_id") or machine_id(s) for s in systems}),
        "cpu": systems[0].get("cpu"),
        "software": systems[0].get("software"),
    }
    return {
        "system": system,
        "framework": parts[0]["framework"],
        "cold_start": parts[0].get("cold_start") or {},
        "measurements": merged,
    }


def _merged_point(
    measurements: list[dict[str, Any]], agents: list[str | None], request: dict[str, Any], load: LoadSettings
) -> dict[str, Any]:
    """One point of every part merged, by its scenario's merge."""
    # Imported here: only a worker that stores the last part of a split load needs numpy's reduction.
    from mlscope.runtime.measure.settings import MeasureSettings

    first = measurements[0]
    measure = MeasureSettings.from_dict(dict(first["settings"]))
    if first["scenario"] == "server":
        from mlscope.runtime.measure.parts import merge_server_parts

        docs = [{**m["load"]["part"], "environment": m.get("environment") or {}} for m in measurements]
        return merge_server_parts(
            docs, agents, load, measure, int(first["batch_size"]), int(first["warmup_count"])
        )
    from mlscope.runtime.generate.parts import PART_KEY, merge_parts

    generation = GenerationSettings.from_dict(request.get("generation") or {})
    merged = merge_parts(
        [m["generation"][PART_KEY] for m in measurements],
        agents,
        generation,
        load,
        measure,
        remote=generation.endpoint is not None,
    )
    for key in ("endpoint", "api", "via"):
        if key in first["generation"]:
            merged["generation"][key] = first["generation"][key]
    return merged
