"""System capture: what the machine is, and an id that names the machine and its stack."""

from __future__ import annotations

import copy

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
