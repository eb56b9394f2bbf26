"""The hardware and software stack an evaluation runs on, captured in the process that runs it.

Captured where the predictor runs (a child process now, a container later) because that is the
stack the figures belong to. The id is a content hash: the same machine with the same software
is the same system; upgrade a library and it becomes another. The machine id and the stack id
(contract.system_ids) split it into the hardware and the software, whoever measured.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import socket
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from mlscope.contract.system_ids import machine_id, stack_id
from mlscope.runtime.frameworks import FRAMEWORKS

__all__ = ["capture_system", "cpu_facts", "gpu_facts", "system_id"]

# Libraries whose version changes the figures, recorded when installed: numpy, and what each
# framework names (`FrameworkSpec.system_distributions`).
_TRACKED_DISTRIBUTIONS = tuple(
    dict.fromkeys(["numpy", *(name for spec in FRAMEWORKS.values() for name in spec.system_distributions)])
)
# Facts that identify a system; the rest (load, free memory) describe the moment.
_IDENTITY_KEYS = ("hostname", "cpu", "gpus", "memory_bytes", "os", "python", "software", "container")


def _proc_cpuinfo() -> dict[str, str]:
    path = Path("/proc/cpuinfo")
    facts: dict[str, str] = {}
    if not path.is_file():
        return facts
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if facts:  # the first processor's block is enough
                break
            continue
        facts.setdefault(key.strip(), value.strip())
    return facts


@lru_cache(maxsize=1)
def cpu_facts() -> dict[str, Any]:
    """CPU model, vendor, architecture, instruction-set flags and core counts."""
    info = _proc_cpuinfo()
    model = info.get("model name") or platform.processor() or platform.machine()
    flags = sorted(set((info.get("flags") or info.get("Features") or "").split()))
    frequency = psutil.cpu_freq()
    return {
        "model": model,
        "vendor": info.get("vendor_id"),
        "arch": platform.machine(),
        "flags": flags,
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "max_mhz": round(frequency.max, 1) if frequency and frequency.max else None,
    }


@lru_cache(maxsize=1)
def gpu_facts() -> list[dict[str, Any]]:
    """NVIDIA GPUs through NVML (nvidia-ml-py); empty where there is no driver or no GPU."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                {
                    "index": index,
                    "name": pynvml.nvmlDeviceGetName(handle),
                    "uuid": pynvml.nvmlDeviceGetUUID(handle),
                    "memory_bytes": int(memory.total),
                    "compute_capability": f"{major}.{minor}",
                    "driver": driver,
                }
            )
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _software() -> dict[str, str]:
    return dict(_software_once())


@functools.lru_cache(maxsize=1)
def _software_once() -> dict[str, str]:
    """The tracked libraries' versions, read once per process (a worker's inline jobs share them)."""
    versions = {}
    for name in _TRACKED_DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    with contextlib.suppress(metadata.PackageNotFoundError):
        versions["mlscope"] = metadata.version("mlscope")
    return versions


def _in_container() -> bool:
    return Path("/.dockerenv").exists() or Path("/run/.containerenv").exists()


def system_id(system: dict[str, Any]) -> str:
    """The content hash of a system's identifying facts."""
    identity = {key: system.get(key) for key in _IDENTITY_KEYS}
    # A farm worker adds who it is and what it claims (its capabilities); a local run has no agent, and
    # leaving the key out keeps the ids of systems stored before agents existed.
    if system.get("agent"):
        identity["agent"] = system["agent"]
    # Likewise the user's name for the machine (MLSCOPE_INSTANCE_TYPE), when one is given.
    if system.get("instance_type"):
        identity["instance_type"] = system["instance_type"]
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def capture_system() -> dict[str, Any]:
    """Everything known of this machine and this process's software stack."""
    uname = platform.uname()
    software: dict[str, Any] = _software()
    system: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu": cpu_facts(),
        "gpus": gpu_facts(),
        "memory_bytes": psutil.virtual_memory().total,
        "os": {"system": uname.system, "release": uname.release, "version": uname.version},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
        "software": software,
        "container": _in_container(),
    }
    system["id"] = system_id(system)
    system["machine_id"] = machine_id(system)
    system["stack_id"] = stack_id(system)
    return system
