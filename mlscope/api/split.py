"""One evaluation's load split across agents (`load.agents` > 1 with a target; docs/farm.md, "Load
from many hosts"): the agents chosen, the shared start stamped on the registry's clock, a part per
agent pinned to `agent:<id>`, and the group that receives the merged point (workers/parts.py).

    request (load.agents = N, target T) ─▶ N live agents matching T with the framework
        ─▶ group evaluation: queued on no queue, the request as submitted
        ─▶ part i: the request pinned to agent:<id i>, load.shard {group, i, N, start_at, ids}
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from dataclasses import dataclass

from mlscope.api.context import ApiContext
from mlscope.api.problems import ApiProblem
from mlscope.api.submit import LiveAgents, PlannedJob, TracedSubmit, enqueue_with_ids
from mlscope.contract.errors import UserError
from mlscope.contract.generation import GenerationSettings
from mlscope.contract.load import LoadSettings, Shard
from mlscope.contract.queues import AGENT_PREFIX, parse_target
from mlscope.contract.request import EvaluationRequest
from mlscope.registry.agents import AgentRegistry
from mlscope.registry.models import ModelRegistry
from mlscope.workers.admission import Admission, admit

__all__ = ["SplitPlan", "enqueue_split", "plan_split", "split_requested"]

# How long after the submission the parts start (MLSCOPE_SPLIT_LEAD_S): time for every agent to take
# its part, start its predictor and warm up. A part ready later starts late, and the merged point
# says so (invalid).
_LEAD_ENV = "MLSCOPE_SPLIT_LEAD_S"
_DEFAULT_LEAD_S = 10.0


def split_requested(request: EvaluationRequest) -> bool:
    """Whether the request asks for its load split across agents.

    Raises:
        UserError: the client gave a part's `load.shard`, which only the API sets.
    """
    load = request.load or {}
    if load.get("shard") is not None:
        raise UserError(
            "load.shard is set by the API on each part of a split load: give load.agents instead",
            field="load.shard",
        )
    return int(load.get("agents", 1)) > 1


@dataclass(frozen=True)
class SplitPlan:
    """The group and its parts, ready to record and send.

    Attributes:
        group_id: the evaluation that receives the merged point.
        group: the request as submitted, admitted.
        parts: one job per agent, in part order.
    """

    group_id: str
    group: Admission
    parts: list[PlannedJob]


def plan_split(
    request: EvaluationRequest, models: ModelRegistry, live: LiveAgents, registry: AgentRegistry
) -> SplitPlan:
    """Choose the agents and make the parts.

    Raises:
        UserError: no target, a target no live agent matches, fewer live agents than asked, a
            shard given by the client, or requests too few to give every agent one.
        ApiProblem: 503 when the agent registry cannot be read.
    """
    load = LoadSettings.from_dict(request.load)
    count = load.agents
    if request.target is None:
        raise UserError(
            f"load.agents={count} splits the load across the agents a target names: give target "
            "(--on cpu, or a capability the agents share)",
            field="target",
        )
    if live.error is not None:
        raise ApiProblem(503, f"cannot choose agents for a split load: {live.error}")
    target = parse_target(request.target)
    matching = sorted(
        live.matching(target, request.framework), key=lambda agent: (agent.current_job is not None, agent.id)
    )
    have = ", ".join(sorted(agent.id for agent in matching)) or "none"
    if not matching:
        everyone = ", ".join(sorted(agent.id for agent in live.agents)) or "none"
        raise UserError(
            f"no live agent with {request.framework} matches {request.target} (live agents: {everyone}): "
            "start `mlscope worker` on such machines, or name another target",
            field="target",
        )
    if len(matching) < count:
        raise UserError(
            f"load.agents={count}, but {len(matching)} live agent(s) with {request.framework} match "
            f"{request.target}: {have}; ask for at most {len(matching)}, or start more workers",
            field="load.agents",
        )
    _check_shareable(request, load, count)
    admission = admit(request, models)
    group_id = uuid.uuid4().hex
    ids = Shard.part_ids(group_id, count)
    start_at = registry.reference_time() + float(os.environ.get(_LEAD_ENV) or _DEFAULT_LEAD_S)
    parts = []
    for index, agent in enumerate(matching[:count]):
        shard = Shard(group_id, index, count, start_at, ids)
        pinned = dataclasses.replace(
            request, target=f"{AGENT_PREFIX}{agent.id}", load={**request.load, "shard": shard.to_dict()}
        )
        part = dataclasses.replace(admission, request=pinned)
        queue = parse_target(pinned.target or "").queue(request.framework)
        parts.append(PlannedJob(part, queue, (), (agent.id,)))
    return SplitPlan(group_id, admission, parts)


def _check_shareable(request: EvaluationRequest, load: LoadSettings, count: int) -> None:
    """A generate run's requests are dealt out by the split: fewer than the agents leaves some
    without any.

    Raises:
        UserError: generation.requests below the agents (field generation.requests).
    """
    if "generate" not in request.scenarios:
        return
    generation = GenerationSettings.from_dict(request.generation)
    if generation.requests < count:
        raise UserError(
            f"generation.requests={generation.requests} cannot be shared by load.agents={count}: give at "
            f"least {count} requests, or fewer agents",
            field="generation.requests",
        )


def enqueue_split(ctx: ApiContext, plan: SplitPlan, traced: TracedSubmit | None = None) -> list[str]:
    """Record the group, then each part, and send each part to its agent's queue.

    Returns:
        The parts' evaluation ids, in part order.

    Raises:
        BrokerUnavailable: the broker did not take a part; the group and the parts are failed.
    """
    ctx.store.create_evaluation(id=plan.group_id, **plan.group.record(), queue=None)
    ids = Shard.part_ids(plan.group_id, len(plan.parts))
    try:
        for part_id, job in zip(ids, plan.parts, strict=True):
            enqueue_with_ids(ctx, [job], [part_id], traced)
    except Exception as exc:
        ctx.store.fail_evaluation(
            plan.group_id,
            error={
                "type": type(exc).__name__,
                "message": f"a part could not be queued: {exc}",
                "phase": "queue",
            },
        )
        raise
    return list(ids)
