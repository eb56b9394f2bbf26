"""`mlscope bricks --on TARGETS`: bricks measured on the farm, one system (agent) at a time.

A brick measured on one machine says nothing of another, so each live agent a target names is a
system of its own: its bricks are looked up among the results it stored, those it has not measured
yet are uploaded and sent to it as one batch with `bricks` (ordinary evaluations, measured together
in one predictor job by the brick method), and the model is measured whole on it the ordinary way.

    REF ─▶ decomposed here (the graph ONNX Runtime optimises on this machine) ─▶ per agent:
        stored bricks (GET /evaluations, its own results) ─▶ the missing ones uploaded and queued on
        agent:<id> as one job ─▶ the model whole on agent:<id> ─▶ compose, as `mlscope bricks` does

`FarmBrickRuns` is `BrickRuns` with the farm behind it: `BrickBench` composes and reports the same
way whichever measured the bricks. It needs the HTTP client, which the bricks service may not
import, so it lives here and the verb passes one maker of it per agent to `run_bricks(runs=...)`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlscope.cli.remote import upload_local_models
from mlscope.contract.errors import UserError
from mlscope.contract.queues import AGENT_PREFIX, parse_target
from mlscope.workers.bricks import BrickJobReport, BrickResult, BrickRuns, brick_result

if TYPE_CHECKING:
    from mlscope.client import Client

__all__ = ["FarmBrickRuns", "farm_agents"]

# How long one agent's brick job, or its whole-model evaluation, may take before the verb gives up.
_WAIT_S = 3600.0
# The most bricks one batch submission carries (the api accepts at most 500 evaluations a batch).
_PER_BATCH = 200


def farm_agents(client: Client, targets: Sequence[str], framework: str) -> list[dict[str, Any]]:
    """The live agents `targets` name (capabilities or agent:<id>) that have `framework`, each once.

    Raises:
        UserError: a target no live agent with the framework matches (field `on`).
    """
    live = client.agents()
    chosen: dict[str, dict[str, Any]] = {}
    for text in targets:
        target = parse_target(text)
        matching = [
            agent
            for agent in live
            if framework in (agent.get("frameworks") or {})
            and target.matches(agent["id"], tuple(agent.get("capabilities") or ()))
        ]
        if not matching:
            have = ", ".join(sorted(agent["id"] for agent in live)) or "none"
            raise UserError(
                f"no live agent with {framework} matches {text} (live agents: {have}); start "
                f"`mlscope worker` on such a machine, or name another target",
                field="on",
            )
        for agent in matching:
            chosen.setdefault(agent["id"], agent)
    return list(chosen.values())


@dataclass
class FarmBrickRuns(BrickRuns):
    """Bricks and models measured by one farm agent, through the API.

    Attributes:
        client: the API's client.
        agent: the agent (as GET /agents gives it) every measurement runs on.
        whole_runner: the runner the agent measures each whole model with.
    """

    client: Client | None = None
    agent: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()  # the framework installed here: the model is decomposed here
        version = (self.agent.get("frameworks") or {}).get(self.framework)
        if not version:
            raise UserError(f"agent {self.agent.get('id')} has no {self.framework}", field="on")
        # What the agent runs, not what is installed here: its bricks are reused by its version.
        self.version = str(version)
        self.agent_id = str(self.agent["id"])
        self.target = f"{AGENT_PREFIX}{self.agent_id}"

    @property
    def api(self) -> Client:
        assert self.client is not None
        return self.client

    def stored(self, name: str, batch_size: int) -> BrickResult | None:
        """The newest result of brick `name` this agent stored at its framework version."""
        page = self.api.evaluations(model=name, framework=self.framework, status="succeeded", limit=20)
        for row in page["items"]:
            agent = ((row.get("system") or {}).get("agent") or {}).get("id")
            version = str((row.get("framework") or {}).get("version") or "")
            if agent == self.agent_id and version.split("+")[0] == self.version.split("+")[0]:
                found = brick_result(row, batch_size, measured_now=False)
                if found is not None:
                    return found
        return None

    def measure(self, bricks: Sequence[tuple[str, str, Any, int]]) -> BrickJobReport:
        """Upload `bricks` ((key, name, onnx ModelProto, batch size) each; one given k times is
        measured once) and have the agent measure them: one batch with `bricks` per batch size, so
        one predictor job each. Returns each brick's result by key, and the seconds spent (build:
        saved and uploaded; job: queued to ended)."""
        report = BrickJobReport()
        began = time.perf_counter()
        refs: dict[int, dict[str, list[str]]] = {}  # batch size → upload ref → keys (one file each)
        seen: set[str] = set()
        for key, name, model, batch_size in bricks:
            if key in seen:
                continue
            seen.add(key)
            try:
                ref = self.api.upload_model(self.save_brick(key, name, model))["ref"]
            except Exception as exc:  # the brick cannot be saved or uploaded
                report.results[key] = f"{type(exc).__name__}: {exc}"[:200]
                continue
            refs.setdefault(batch_size, {}).setdefault(ref, []).append(key)
        report.seconds["build"] = time.perf_counter() - began
        began = time.perf_counter()
        queued: dict[str, tuple[list[str], int]] = {}  # evaluation id → (brick keys, batch size)
        leads = []  # each job's first brick: the others end with it
        for batch_size, by_ref in refs.items():
            names = list(by_ref)
            for start in range(0, len(names), _PER_BATCH):
                job = self._queue(names[start : start + _PER_BATCH], batch_size, by_ref)
                leads.append(next(iter(job)))
                queued.update(job)
        # Only the leads are polled while the jobs run: polling every brick (82 GETs every half second
        # for MobileNetV3-Small) kept the API busy beside the measurement on a shared host.
        self.api.wait(leads, timeout_s=_WAIT_S, poll_s=1.0)
        ended = self.api.wait(list(queued), timeout_s=_WAIT_S) if queued else []
        for result in ended:
            keys, batch_size = queued[result["id"]]
            found: BrickResult | str
            if result["status"] != "succeeded":
                error = result.get("error") or {}
                found = f"{error.get('type', result['status'])}: {error.get('message', '')}"[:200]
            else:
                found = brick_result(result, batch_size, measured_now=True) or "no single_stream measurement"
            for key in keys:
                report.results[key] = found
        report.seconds["job"] = time.perf_counter() - began
        return report

    def _queue(
        self, refs: list[str], batch_size: int, keys: Mapping[str, list[str]]
    ) -> dict[str, tuple[list[str], int]]:
        """Queue the uploaded bricks `refs` on the agent as one batch with `bricks` (one predictor job
        per 200, the api's MAX_BRICKS_PER_JOB); returns evaluation id → (brick key, batch size)."""
        answer = self.api.submit_batch(
            {
                "models": refs,
                "frameworks": [self.framework],
                "targets": [self.target],
                "bricks": True,
                "batch_sizes": [batch_size],
                "scenarios": ["single_stream"],
                "measure": dict(self.brick_measure),
                "options": self._options(graph_optimization_level="disable"),
            }
        )
        return {item["id"]: (keys[item["model"]], batch_size) for item in answer["evaluations"]}

    def whole(self, ref: str, fields: Mapping[str, Any]) -> tuple[dict[str, Any], float]:
        """Model `ref` (an .onnx file here is uploaded first) measured whole on the agent the ordinary
        way (single_stream, batch 1), and the seconds from submission to its end."""
        started = time.perf_counter()
        (model,) = upload_local_models(self.api, [ref])
        document = {
            **{name: value for name, value in fields.items() if name != "device"},
            "model": model,
            "framework": self.framework,
            "target": self.target,
            "batch_sizes": [1],
            "scenarios": ["single_stream"],
            "options": self._options(**(fields.get("options") or {})),
        }
        answer = self.api.submit(document)
        (result,) = self.api.wait([answer["id"]], timeout_s=_WAIT_S)
        return result, time.perf_counter() - started

    def place(self) -> dict[str, Any]:
        """The agent every measurement ran on."""
        return {"agent": self.agent_id}

    def close(self) -> None:
        """Nothing to close: the client's session is the verb's."""
