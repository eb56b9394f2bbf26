"""What this machine can serve, as dotted capabilities from general to specific.

    cpu, cpu.x86_64, cpu.x86_64.avx512        (the widest vector extension the CPU has)
    gpu, gpu.nvidia, gpu.nvidia.sm90, gpu.nvidia.h100-80gb

A worker consumes `<framework>@<prefix>` for every prefix of these (broker.queues), so a job aimed at
`cpu` reaches any CPU worker and one aimed at `cpu.x86_64.avx512` only those with AVX-512. A worker
describes only the GPUs its predictors may use (CUDA_VISIBLE_DEVICES), and may serve capabilities the
hardware does not say (a Slurm partition: `slurm.a100`) besides the detected ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "cpu_capability",
    "detect_capabilities",
    "gpu_capabilities",
    "serving_capabilities",
    "visible_gpus",
]

# The widest vector extension names the CPU's level; checked from widest to narrowest.
_X86_LEVELS = (("avx512", "avx512f"), ("avx2", "avx2"), ("avx", "avx"), ("sse4", "sse4_2"))
_ARM_LEVELS = (("sve", "sve"), ("asimd", "asimd"), ("neon", "neon"))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:63] or "unknown"


def cpu_capability(cpu: Mapping[str, Any]) -> str:
    """`cpu.<arch>.<widest vector extension>`, or `cpu.<arch>` when none is known."""
    arch = _slug(str(cpu.get("arch") or "unknown")).replace("-", "_")
    flags = set(cpu.get("flags") or ())
    levels = _X86_LEVELS if arch in ("x86_64", "amd64", "i686") else _ARM_LEVELS
    for name, flag in levels:
        if flag in flags:
            return f"cpu.{arch}.{name}"
    return f"cpu.{arch}"


def gpu_capabilities(gpus: Sequence[Mapping[str, Any]]) -> list[str]:
    """`gpu.nvidia.sm<major><minor>` and `gpu.nvidia.<model>-<memory>gb` for each distinct GPU."""
    found: list[str] = []
    for gpu in gpus:
        cc = str(gpu.get("compute_capability") or "").replace(".", "")
        if cc:
            found.append(f"gpu.nvidia.sm{cc}")
        name = _slug(str(gpu.get("name") or "").replace("NVIDIA", ""))
        memory = gpu.get("memory_bytes")
        if name != "unknown":
            suffix = f"-{round(memory / 2**30)}gb" if isinstance(memory, int) and memory > 0 else ""
            found.append(f"gpu.nvidia.{name}{suffix}")
    return list(dict.fromkeys(found)) or (["gpu.nvidia"] if gpus else [])


def detect_capabilities(cpu: Mapping[str, Any], gpus: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every capability of a machine with this CPU and these GPUs (the most specific of each kind)."""
    return [cpu_capability(cpu), *gpu_capabilities(gpus)]


def visible_gpus(
    gpus: Sequence[Mapping[str, Any]], cuda_visible_devices: str | None
) -> list[Mapping[str, Any]]:
    """The GPUs of `gpus` (NVML's, in its order) that a process with this CUDA_VISIBLE_DEVICES may use.

    Read as CUDA reads it: unset, every GPU; a comma-separated list of indices or `GPU-<uuid>`
    prefixes, up to the first entry that names none (so "", "-1" and Slurm's "NoDevFiles" hide them
    all). Indices are NVML's order, which is CUDA's under CUDA_DEVICE_ORDER=PCI_BUS_ID.
    """
    if cuda_visible_devices is None:
        return list(gpus)
    visible: list[Mapping[str, Any]] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        if entry.isdigit():
            found = [g for i, g in enumerate(gpus) if g.get("index", i) == int(entry)]
        elif entry.startswith("GPU-"):
            found = [g for g in gpus if str(g.get("uuid") or "").startswith(entry)]
        else:
            found = []
        if len(found) != 1 or found[0] in visible:
            break
        visible.append(found[0])
    return visible


def serving_capabilities(
    cpu: Mapping[str, Any],
    gpus: Sequence[Mapping[str, Any]],
    *,
    explicit: Sequence[str] = (),
    extra: Sequence[str] = (),
    cuda_visible_devices: str | None = None,
) -> list[str]:
    """What a worker serves: `explicit` (instead of detecting), else the CPU's and the visible GPUs',
    then `extra` (capabilities the hardware does not say, e.g. `slurm.<partition>`), each once."""
    base = list(explicit) or detect_capabilities(cpu, visible_gpus(gpus, cuda_visible_devices))
    return list(dict.fromkeys([*base, *extra]))
