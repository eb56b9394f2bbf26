"""One machine, one id: a system description split into the machine it ran on and the software stack.

A system's id (runtime.system.system_id) hashes everything that names it, the host's name and the farm
agent included, so one machine measured by `mlscope run`, by a farm worker and in each framework's
container gets several ids, and a worker restarted under another name a new one. History series and
same-system checks group by these two instead (docs/history.md):

- the machine id: the hardware and the user's name for it (MLSCOPE_INSTANCE_TYPE): CPU model, flags
  and cores, memory, GPUs with their driver. Not the hostname, the container flag or the agent.
- the stack id: the operating system, Python, the tracked libraries' versions (`software`, the
  framework's among them) and the image a container runner measured in, where one is recorded.

Both are 16 hexadecimal digits of a SHA-256 of canonical JSON, like the system id. Pure functions of
the stored facts, free of heavy imports: the store's migration fills stored rows with them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["image_digest", "machine_id", "stack_id", "system_ids"]

# Facts of the process, not the hardware: the CPUs it may use (a container's limit would make the
# machine another) and where a GPU was listed.
_CPU_PROCESS_KEYS = frozenset({"affinity"})
_GPU_PROCESS_KEYS = frozenset({"index"})


def _without(facts: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    return {key: value for key, value in facts.items() if key not in keys}


def _hash(identity: Mapping[str, Any]) -> str:
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def machine_id(system: Mapping[str, Any]) -> str:
    """The hash of the machine's hardware and instance type in a system description; of a group
    measured by several machines at once (a split load: its `machines`, their ids), of the set."""
    if isinstance(system.get("machines"), list):
        return _hash({"machines": sorted(str(machine) for machine in system["machines"])})
    cpu, gpus = system.get("cpu"), system.get("gpus")
    gpus = gpus if isinstance(gpus, list) else []
    return _hash(
        {
            "cpu": _without(cpu, _CPU_PROCESS_KEYS) if isinstance(cpu, Mapping) else cpu,
            "gpus": [_without(gpu, _GPU_PROCESS_KEYS) if isinstance(gpu, Mapping) else gpu for gpu in gpus],
            "memory_bytes": system.get("memory_bytes"),
            "instance_type": system.get("instance_type") or None,
        }
    )


def stack_id(system: Mapping[str, Any], image: str | None = None) -> str:
    """The hash of the software stack in a system description: OS, Python, the tracked libraries and
    `image`, the digest of the container image it ran in (None: not in a recorded image)."""
    return _hash(
        {
            "os": system.get("os"),
            "python": system.get("python"),
            "software": system.get("software"),
            "image": image or None,
        }
    )


def image_digest(framework: Mapping[str, Any] | None) -> str | None:
    """The image digest a container runner recorded with a result's framework (`framework.image`,
    or the `image` of a stored evaluation's framework details); None where it recorded none."""
    image = (framework or {}).get("image")
    digest = image.get("digest") if isinstance(image, Mapping) else None
    return digest if isinstance(digest, str) and digest else None


def system_ids(system: Mapping[str, Any], framework: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """(machine id, stack id) of an evaluation that ran on `system` with `framework` (its result's
    framework or its stored framework details, where the image is recorded)."""
    return machine_id(system), stack_id(system, image_digest(framework))
