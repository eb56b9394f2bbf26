"""Queue names from capabilities, targets, capability detection and the task message."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlscope.broker.app import TIME_LIMIT_MARGIN_S, make_celery, visibility_timeout_s
from mlscope.broker.tasks import EvaluationMessage
from mlscope.contract.errors import UserError
from mlscope.contract.queues import Target, capability_prefixes, parse_target, queues_for
from mlscope.contract.request import MAX_TIMEOUT_S, parse_request
from mlscope.contract.settings import load_settings
from mlscope.workers.capabilities import (
    cpu_capability,
    detect_capabilities,
    gpu_capabilities,
    serving_capabilities,
    visible_gpus,
)


def test_a_worker_serves_every_prefix_of_every_capability_for_each_framework() -> None:
    queues = queues_for(["onnxruntime", "pytorch"], ["cpu.x86_64.avx2", "gpu.nvidia.sm90"], "box-1")

    assert queues[-1] == "agent@box-1"
    assert set(queues[:-1]) == {
        f"{framework}@{prefix}"
        for framework in ("onnxruntime", "pytorch")
        for prefix in ("cpu", "cpu.x86_64", "cpu.x86_64.avx2", "gpu", "gpu.nvidia", "gpu.nvidia.sm90")
    }
    assert capability_prefixes("gpu.nvidia.h100-80gb") == ["gpu", "gpu.nvidia", "gpu.nvidia.h100-80gb"]


def test_targets_name_a_capability_prefix_or_one_agent() -> None:
    assert parse_target("cpu.x86_64").queue("pytorch") == "pytorch@cpu.x86_64"
    assert parse_target("agent:box-1").queue("pytorch") == "agent@box-1"
    assert str(parse_target("agent:box-1")) == "agent:box-1"
    assert Target(capability="cpu").matches("a", ["cpu.x86_64.avx2"])
    assert not Target(capability="cpu.x86_64.avx512").matches("a", ["cpu.x86_64.avx2"])
    assert not Target(capability="cpu.x86").matches("a", ["cpu.x86_64"])  # a prefix of parts, not text
    assert Target(agent_id="a").matches("a", []) and not Target(agent_id="a").matches("b", ["cpu"])


@pytest.mark.parametrize(
    "bad", ["", "CPU", "cpu..x86", "cpu.x86_64.", "cpu x86", "agent:", "agent:a b", "a@b"]
)
def test_a_malformed_target_is_refused_with_the_expected_form(bad: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_target(bad)
    assert caught.value.field == "target"
    assert "expected" in caught.value.message


def test_the_request_checks_its_target() -> None:
    with pytest.raises(UserError, match=r"target: .*expected"):
        parse_request({"model": "m", "framework": "f", "target": "CPU!"})
    assert parse_request({"model": "m", "framework": "f"}).effective_target == "cpu"
    assert parse_request({"model": "m", "framework": "f", "device": "cuda:1"}).effective_target == "gpu"


def test_cpu_capability_names_the_widest_vector_extension() -> None:
    assert cpu_capability({"arch": "x86_64", "flags": ["sse4_2", "avx", "avx2", "avx512f"]}) == (
        "cpu.x86_64.avx512"
    )
    assert cpu_capability({"arch": "x86_64", "flags": ["sse4_2", "avx", "avx2"]}) == "cpu.x86_64.avx2"
    assert cpu_capability({"arch": "aarch64", "flags": ["asimd"]}) == "cpu.aarch64.asimd"
    assert cpu_capability({"arch": "riscv64", "flags": []}) == "cpu.riscv64"


def test_gpu_capabilities_name_the_architecture_and_the_model() -> None:
    gpus = [{"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "memory_bytes": 85 * 2**30}]
    assert gpu_capabilities(gpus) == ["gpu.nvidia.sm90", "gpu.nvidia.h100-80gb-hbm3-85gb"]
    assert detect_capabilities({"arch": "x86_64", "flags": ["avx2"]}, []) == ["cpu.x86_64.avx2"]
    for capability in detect_capabilities({"arch": "x86_64", "flags": []}, gpus):
        parse_target(capability)  # every detected capability is a valid target


def test_the_task_message_round_trips_and_refuses_what_it_cannot_read() -> None:
    request = parse_request({"model": "m", "framework": "f", "batch_sizes": [1, 8], "target": "cpu"})
    message = EvaluationMessage("abc", request, "f@cpu", submitted_at=12.5)

    assert EvaluationMessage.from_dict(message.to_dict()) == message
    with pytest.raises(UserError, match="version"):
        EvaluationMessage.from_dict({**message.to_dict(), "version": 99})
    with pytest.raises(UserError, match="batch_sizes"):
        EvaluationMessage.from_dict(
            {**message.to_dict(), "request": {**request.to_dict(), "batch_sizes": [0]}}
        )


def test_farm_settings_are_checked_and_the_registry_follows_a_redis_broker(tmp_path: Path) -> None:
    base = {"MLSCOPE_SETTINGS": str(tmp_path / "none.toml")}
    redis_broker = load_settings({**base, "MLSCOPE_BROKER_URL": "redis://10.0.0.5:6379/3"})
    assert redis_broker.agent_registry_url == "redis://10.0.0.5:6379/3"
    amqp = load_settings({**base, "MLSCOPE_BROKER_URL": "amqp://guest:guest@10.0.0.5:5672//"})
    assert amqp.agent_registry_url == "redis://127.0.0.1:6379/0"
    explicit = {**base, "MLSCOPE_BROKER_URL": "amqp://h//", "MLSCOPE_REGISTRY_URL": "redis://r:6379/1"}
    assert load_settings(explicit).agent_registry_url == "redis://r:6379/1"
    for name, value, field in (
        ("MLSCOPE_REGISTRY_URL", "http://r", "registry_url"),
        ("MLSCOPE_VISIBILITY_TIMEOUT_S", "soon", "visibility_timeout_s"),
        ("MLSCOPE_VISIBILITY_TIMEOUT_S", "-1", "visibility_timeout_s"),
        ("MLSCOPE_API_READS", "closed", "api_reads"),
    ):
        with pytest.raises(UserError) as caught:
            load_settings({**base, name: value})
        assert caught.value.field == field


def test_redis_visibility_timeout_follows_the_longest_job_limit_unless_set(tmp_path: Path) -> None:
    # Given the settings with no visibility timeout, and with one
    base = {"MLSCOPE_SETTINGS": str(tmp_path / "none.toml")}
    unset = load_settings(base)
    explicit = load_settings({**base, "MLSCOPE_VISIBILITY_TIMEOUT_S": "600"})

    # When the broker's app is made from each
    unset_options = make_celery(unset).conf.broker_transport_options
    explicit_options = make_celery(explicit).conf.broker_transport_options

    # Then unset, no job within the longest allowed time limit is handed out twice (the old fixed two
    # hours gave a three-hour job a twin); set, the setting is the timeout
    assert unset.visibility_timeout_s is None
    assert unset_options["visibility_timeout"] == visibility_timeout_s(unset) > MAX_TIMEOUT_S
    assert visibility_timeout_s(unset) >= MAX_TIMEOUT_S + TIME_LIMIT_MARGIN_S
    assert explicit_options["visibility_timeout"] == 600.0
    assert explicit_options["unacked_restore_interval"] == 10


_TWO_GPUS = [
    {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-aaaa", "compute_capability": "8.0"},
    {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-bbbb", "compute_capability": "9.0"},
]


@pytest.mark.parametrize(
    ("cuda_visible_devices", "names"),
    [
        (None, ["A100", "H100"]),  # unset: every GPU
        ("1", ["H100"]),
        ("1,0", ["H100", "A100"]),  # CUDA's order, not NVML's
        ("GPU-bbbb", ["H100"]),  # a UUID, or a unique prefix of one
        ("GPU-b", ["H100"]),
        ("", []),  # CUDA then sees no device
        ("-1", []),
        ("NoDevFiles", []),  # what Slurm once set for a job without GPUs
        ("0,7,1", ["A100"]),  # an entry that names none ends the list, as in CUDA
        ("0,0", ["A100"]),
    ],
)
def test_a_process_sees_the_gpus_cuda_visible_devices_names(
    cuda_visible_devices: str | None, names: list[str]
) -> None:
    seen = visible_gpus(_TWO_GPUS, cuda_visible_devices)

    assert [g["name"].split()[1].split("-")[0] for g in seen] == names


def test_a_worker_serves_its_visible_gpus_plus_the_extra_capabilities() -> None:
    cpu = {"arch": "x86_64", "flags": ["avx2"]}

    one_gpu = serving_capabilities(cpu, _TWO_GPUS, extra=["slurm.a100"], cuda_visible_devices="1")
    no_gpu = serving_capabilities(cpu, _TWO_GPUS, extra=["slurm.cpu"], cuda_visible_devices="")
    explicit = serving_capabilities(cpu, _TWO_GPUS, explicit=["cpu.x86_64.avx512"], extra=["slurm.a"])

    assert one_gpu == [cpu_capability(cpu), *gpu_capabilities(_TWO_GPUS[1:]), "slurm.a100"]
    assert no_gpu == [cpu_capability(cpu), "slurm.cpu"]  # the node's GPUs are not this worker's
    assert explicit == ["cpu.x86_64.avx512", "slurm.a"]
    assert serving_capabilities(cpu, [], extra=["cpu.x86_64.avx2"]) == ["cpu.x86_64.avx2"]  # once
