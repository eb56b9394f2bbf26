"""Queue names from capabilities.

A capability is a dotted path from general to specific: `cpu`, `cpu.x86_64`, `cpu.x86_64.avx512`;
`gpu`, `gpu.nvidia`, `gpu.nvidia.sm90`, `gpu.nvidia.h100-80gb`. A worker consumes
`<framework>@<prefix>` for every framework it runs and every prefix of every capability it has, plus
`agent@<agent-id>` for jobs pinned to it. A request names a target: any prefix (`cpu.x86_64`) or
one agent (`agent:<id>`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from mlscope.contract.errors import UserError

__all__ = [
    "AGENT_PREFIX",
    "CAPABILITY_PATTERN",
    "TARGET_PATTERN",
    "Target",
    "agent_queue",
    "capability_prefixes",
    "framework_queue",
    "parse_target",
    "queues_for",
]

# Lower-case words of letters, digits, '_' and '-', joined by dots: `gpu.nvidia.h100-80gb`.
CAPABILITY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}(\.[a-z0-9][a-z0-9_-]{0,62}){0,7}$")
AGENT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
AGENT_PREFIX = "agent:"
# What parse_target accepts, as one pattern (the request schemas document it).
TARGET_PATTERN = (
    f"^(?:{AGENT_PREFIX}{AGENT_ID_PATTERN.pattern.strip('^$')}|{CAPABILITY_PATTERN.pattern.strip('^$')})$"
)


def check_capability(capability: str, field: str = "target") -> str:
    """The capability, when it is a well-formed dotted path.

    Raises:
        UserError: naming `field` and the expected form.
    """
    if not isinstance(capability, str) or not CAPABILITY_PATTERN.match(capability):
        raise UserError(
            f"{field}: {capability!r} is not a capability: expected dotted lower-case words "
            "from general to specific, e.g. cpu, cpu.x86_64, gpu.nvidia.sm90",
            field=field,
        )
    return capability


def check_agent_id(agent_id: str, field: str = "agent_id") -> str:
    """The agent id, when it is letters, digits, '.', '_' and '-' (at most 128).

    Raises:
        UserError: naming `field`.
    """
    if not isinstance(agent_id, str) or not AGENT_ID_PATTERN.match(agent_id):
        raise UserError(
            f"{field}: {agent_id!r} is not an agent id: expected letters, digits, '.', '_' and '-'",
            field=field,
        )
    return agent_id


def capability_prefixes(capability: str) -> list[str]:
    """`cpu.x86_64.avx2` → [`cpu`, `cpu.x86_64`, `cpu.x86_64.avx2`]."""
    parts = capability.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def framework_queue(framework: str, capability: str) -> str:
    """The queue of jobs for `framework` on any machine with `capability`: `onnxruntime@cpu.x86_64`."""
    return f"{framework}@{capability}"


def agent_queue(agent_id: str) -> str:
    """The queue of jobs pinned to one agent: `agent@<id>`."""
    return f"agent@{agent_id}"


def queues_for(frameworks: Iterable[str], capabilities: Iterable[str], agent_id: str) -> list[str]:
    """Every queue a worker with these frameworks and capabilities serves, sorted, its own queue last."""
    prefixes = {prefix for capability in capabilities for prefix in capability_prefixes(capability)}
    named = sorted({framework_queue(f, p) for f in frameworks for p in prefixes})
    return [*named, agent_queue(agent_id)]


@dataclass(frozen=True)
class Target:
    """Where a job may run: machines with a capability, or one agent."""

    capability: str | None = None
    agent_id: str | None = None

    def queue(self, framework: str) -> str:
        if self.agent_id is not None:
            return agent_queue(self.agent_id)
        assert self.capability is not None
        return framework_queue(framework, self.capability)

    def __str__(self) -> str:
        return f"{AGENT_PREFIX}{self.agent_id}" if self.agent_id is not None else str(self.capability)

    def matches(self, agent_id: str, capabilities: Iterable[str]) -> bool:
        """Whether an agent with these capabilities serves this target."""
        if self.agent_id is not None:
            return agent_id == self.agent_id
        return any(self.capability in capability_prefixes(c) for c in capabilities)


def parse_target(text: str, field: str = "target") -> Target:
    """`cpu.x86_64` → Target(capability=...); `agent:<id>` → Target(agent_id=...).

    Raises:
        UserError: naming `field` and the expected forms.
    """
    if isinstance(text, str) and text.startswith(AGENT_PREFIX):
        return Target(agent_id=check_agent_id(text[len(AGENT_PREFIX) :], field))
    return Target(capability=check_capability(text, field))
