"""System capture: what the machine is, and an id that names the machine and its stack."""

from __future__ import annotations

import copy

from mlscope.contract.system_ids import machine_id, stack_id, system_ids
from mlscope.runtime.system import capture_system, system_id


def test_the_capture_describes_this_machine() -> None:
    system = capture_system()
    cpu = system["cpu"]
    assert cpu["logical_cores"] >= 1 and cpu["arch"]
    assert isinstance(cpu["flags"], list) and cpu["flags"] == sorted(cpu["flags"])
    assert system["memory_bytes"] > 0
    assert system["python"]["version"].count(".") == 2
    assert "numpy" in system["software"]
    assert isinstance(system["gpus"], list)  # empty here: no GPU; NVML fills it where there is one


def test_the_id_is_stable_and_changes_with_the_stack() -> None:
    # Given two captures of this machine
    first, second = capture_system(), capture_system()
    # Then they are the same system
    assert first["id"] == second["id"] == system_id(first)
    # And another library version makes it another system
    upgraded = copy.deepcopy(first)
    upgraded["software"]["numpy"] = "0.0.1"
    assert system_id(upgraded) != first["id"]


# A system as a local run records it, with the id the store has kept for it since before machine and
# stack ids: the split must not change it.
LOCAL = {
    "hostname": "laptop",
    "cpu": {"model": "Xeon", "flags": ["avx2"], "physical_cores": 4, "logical_cores": 8, "affinity": 8},
    "gpus": [],
    "memory_bytes": 1 << 34,
    "os": {"system": "Linux", "release": "6.1", "version": "#1"},
    "python": {"version": "3.11.7", "implementation": "CPython"},
    "software": {"numpy": "2.0.0"},
    "container": False,
}


def test_system_ids_keep_their_values() -> None:
    assert system_id(LOCAL) == "6b1aab8c030f7b0c"
    with_agent = {**LOCAL, "agent": {"id": "a-1"}, "instance_type": "c7i.large"}
    assert system_id(with_agent) == "dd9175b882a0f052"
    # the new keys of a capture are not among what the system id hashes
    assert system_id({**LOCAL, "machine_id": "x", "stack_id": "y"}) == system_id(LOCAL)


def test_one_machine_has_one_machine_id_whoever_measured_it() -> None:
    # Given the same hardware captured by `mlscope run`, by a farm agent, in a container limited to two
    # CPUs, and by a worker restarted under another name
    captures = [
        LOCAL,
        {**LOCAL, "hostname": "worker-1", "agent": {"id": "agent-1", "capabilities": {"gpus": 0}}},
        {**LOCAL, "hostname": "3f2a9c", "container": True, "cpu": {**LOCAL["cpu"], "affinity": 2}},
        {**LOCAL, "hostname": "worker-1", "agent": {"id": "agent-1b", "capabilities": {"gpus": 0}}},
    ]
    # Then they are four systems on one machine and one stack
    assert len({system_id(system) for system in captures}) == 4
    assert len({machine_id(system) for system in captures}) == 1
    assert len({stack_id(system) for system in captures}) == 1
    assert all(len(machine_id(s)) == len(stack_id(s)) == 16 for s in captures)


def test_a_library_upgrade_changes_the_stack_not_the_machine() -> None:
    upgraded = {**LOCAL, "software": {"numpy": "2.1.0"}}
    assert machine_id(upgraded) == machine_id(LOCAL)
    assert stack_id(upgraded) != stack_id(LOCAL)
    # and so does the image a container runner measured in
    image = {"image": {"name": "mlscope/onnxruntime", "id": "sha256:ab", "digest": "sha256:cd"}}
    assert system_ids(LOCAL, image) == (machine_id(LOCAL), stack_id(LOCAL, "sha256:cd"))
    assert system_ids(LOCAL, image)[1] != stack_id(LOCAL)


def test_the_hardware_and_the_instance_type_change_the_machine() -> None:
    gpu = {"index": 0, "name": "A100", "uuid": "GPU-1", "memory_bytes": 1 << 35, "driver": "550.54"}
    with_gpu = {**LOCAL, "gpus": [gpu]}
    assert machine_id(with_gpu) != machine_id(LOCAL)
    assert machine_id({**LOCAL, "gpus": [{**gpu, "driver": "560.1"}]}) != machine_id(with_gpu)
    assert machine_id({**LOCAL, "memory_bytes": 1 << 35}) != machine_id(LOCAL)
    assert machine_id({**LOCAL, "instance_type": "c7i.large"}) != machine_id(LOCAL)
    assert stack_id({**LOCAL, "instance_type": "c7i.large"}) == stack_id(LOCAL)


def test_a_capture_records_its_machine_and_stack_ids() -> None:
    system = capture_system()
    assert (system["machine_id"], system["stack_id"]) == system_ids(system)


def test_the_pipeline_ids_a_farm_agents_system_by_its_machine() -> None:
    # Given a capture described as a farm worker stores it: with its agent, and in an image
    from mlscope.contract.settings import Settings
    from mlscope.workers.pipeline import _described_system

    captured = {**LOCAL, "id": system_id(LOCAL), "machine_id": machine_id(LOCAL), "stack_id": stack_id(LOCAL)}
    image = {"name": "mlscope/onnxruntime", "id": "sha256:ab", "digest": "sha256:cd"}
    stored = _described_system(captured, Settings(), {"agent": {"id": "agent-1"}}, {"image": image})
    # Then its system id is the agent's, its machine the local run's, its stack the image's
    assert stored["id"] == system_id({**LOCAL, "agent": {"id": "agent-1"}}) != captured["id"]
    assert stored["machine_id"] == captured["machine_id"]
    assert stored["stack_id"] == stack_id(LOCAL, "sha256:cd")


def test_a_group_measured_by_several_machines_is_the_set_of_them() -> None:
    other = {**LOCAL, "memory_bytes": 1 << 35}
    group = {"id": "g", "parts": ["a", "b"], "machines": [machine_id(other), machine_id(LOCAL)]}
    assert machine_id(group) == machine_id({**group, "machines": [machine_id(LOCAL), machine_id(other)]})
    assert machine_id(group) not in (machine_id(LOCAL), machine_id(other))
    assert machine_id(group) != machine_id({**group, "machines": [machine_id(LOCAL)]})
