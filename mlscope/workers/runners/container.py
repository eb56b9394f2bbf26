"""What the docker runner asks the engine for: one predictor container, locked down.

A predictor runs code that came with a model (a Python factory, a framework's own loaders), so its
container is given as little as measuring needs: no network, a user that is never root, a read-only
root filesystem with a tmpfs for scratch, no capabilities, no way to gain privileges (setuid files),
and limits on memory, processes and CPUs. The job goes in and the result comes out through one
bind-mounted io directory; the model cache is mounted read-only. Nothing here talks to the engine,
so the options can be checked without one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.job import Job

__all__ = [
    "CONTAINER_CACHE",
    "CONTAINER_IO",
    "CONTAINER_SCRATCH",
    "EVALUATION_LABEL",
    "UNPRIVILEGED_USER",
    "container_options",
    "container_user",
    "docker_sdk",
]

CONTAINER_CACHE = "/mlscope/cache"
CONTAINER_IO = "/mlscope/io"
# The one writable place besides the io directory: a tmpfs, so what a framework keeps in ~ or in its
# cache dies with the container. Its pages count against the container's memory limit. exec, because
# some frameworks compile kernels into their temporary directory and load them from there.
CONTAINER_SCRATCH = "/tmp"
_SCRATCH_OPTIONS = "rw,exec,nosuid,nodev,mode=1777"
# Where frameworks and Python libraries put their caches and configuration (~, XDG, tempfile): all
# in the scratch tmpfs, since the root filesystem cannot be written.
_SCRATCH_ENVIRONMENT = {
    "HOME": CONTAINER_SCRATCH,
    "TMPDIR": CONTAINER_SCRATCH,
    "XDG_CACHE_HOME": f"{CONTAINER_SCRATCH}/.cache",
    "XDG_CONFIG_HOME": f"{CONTAINER_SCRATCH}/.config",
    "XDG_DATA_HOME": f"{CONTAINER_SCRATCH}/.local/share",
    # The image's bytecode cannot be written next to its sources; do not try on every import.
    "PYTHONDONTWRITEBYTECODE": "1",
}
# Every container carries the evaluation it runs, so an operator (or a test) can find leftovers.
EVALUATION_LABEL = "org.mlscope.evaluation"
# Who a container runs as when the worker is root: nobody:nogroup, which owns no file in the image.
UNPRIVILEGED_USER = "65534:65534"


def docker_sdk() -> Any:
    """The Docker SDK for Python, imported when a runner first needs it."""
    try:
        import docker
    except ImportError:
        raise UserError(
            "the docker runner needs the Docker SDK for Python: pip install 'mlscope[docker]'", field="runner"
        ) from None
    return docker


def container_user() -> str:
    """`uid:gid` a container runs as: this worker's own, so what the container writes in the io dir is
    the worker's to remove and it reads the cache the worker wrote; but never root (uid or gid 0): a
    worker running as root gets UNPRIVILEGED_USER, which reads the cache only because the cache's
    files are world-readable (the writers see to it)."""
    if not hasattr(os, "getuid") or os.getuid() == 0:
        return UNPRIVILEGED_USER
    gid = os.getgid() or int(UNPRIVILEGED_USER.partition(":")[2])
    return f"{os.getuid()}:{gid}"


def _is_root(user: str) -> bool:
    uid, _, gid = user.partition(":")
    return uid in ("", "0", "root") or gid in ("0", "root")


def container_options(
    job: Job,
    *,
    image: str,
    io_dir: Path,
    cache_dir: Path,
    cpus: float | None = None,
    memory_mb: int | None = None,
    pids_limit: int | None = None,
    read_only_files: tuple[Path, ...] = (),
    user: str = UNPRIVILEGED_USER,
    lifetime_s: float | None = None,
) -> dict[str, Any]:
    """The keyword arguments of `containers.create` for one job (engine-free, so it can be checked).

    Args:
        job: the job (its device decides the GPU request; its id labels the container).
        image: the image to run.
        io_dir: the host directory mounted read-write at CONTAINER_IO (job.json in, result.json out);
            `user` must be able to write it.
        cache_dir: the host's model cache, mounted read-only at CONTAINER_CACHE.
        cpus: CPUs the container may use (fractions allowed); None: all.
        memory_mb: memory limit in MB, swap included (so the limit is not dodged by swapping); None: none.
        pids_limit: processes (threads included) the container may hold; None: no limit.
        read_only_files: host files the manifest names (a local ONNX graph), mounted read-only at
            the same path, so the manifest reads the same inside.
        user: `uid:gid` to run as (see `container_user`); never root.
        lifetime_s: the container kills itself (coreutils `timeout`, its PID 1) after this long: a
            worker that is SIGKILLed cannot remove its container, and an orphan must not measure on
            beside the job's next delivery for ever. None: no limit of its own.

    Raises:
        ValueError: `user` is root.
    """
    if _is_root(user):
        raise ValueError(f"a predictor container never runs as root, not as {user!r}")
    volumes = {
        str(cache_dir): {"bind": CONTAINER_CACHE, "mode": "ro"},
        str(io_dir): {"bind": CONTAINER_IO, "mode": "rw"},
        **{str(path): {"bind": str(path), "mode": "ro"} for path in read_only_files},
    }
    options: dict[str, Any] = {
        "image": image,
        "command": [
            *(["timeout", "--signal=KILL", f"{int(lifetime_s) + 1}"] if lifetime_s is not None else []),
            "python",
            "-m",
            "mlscope.runtime.execute",
            "--job",
            f"{CONTAINER_IO}/job.json",
            "--result",
            f"{CONTAINER_IO}/result.json",
        ],
        "network_mode": "none",
        "user": user,
        "read_only": True,
        "tmpfs": {CONTAINER_SCRATCH: _SCRATCH_OPTIONS},
        "environment": dict(_SCRATCH_ENVIRONMENT),
        "working_dir": CONTAINER_SCRATCH,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "volumes": volumes,
        "labels": {EVALUATION_LABEL: job.evaluation_id},
        "auto_remove": False,  # its exit state (OOMKilled, exit code) is read before it is removed
        "detach": True,
    }
    if memory_mb is not None:
        options["mem_limit"] = f"{memory_mb}m"
        options["memswap_limit"] = f"{memory_mb}m"
    if pids_limit is not None:
        options["pids_limit"] = pids_limit
    if cpus is not None:
        options["nano_cpus"] = round(cpus * 1e9)
    if job.device.startswith("cuda"):
        index = job.device.partition(":")[2] or "0"
        options["device_requests"] = [
            docker_sdk().types.DeviceRequest(device_ids=[index], capabilities=[["gpu"]])
        ]
    return options
