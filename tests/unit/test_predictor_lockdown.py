"""Locked-down predictors without an engine: the container the docker runner asks for (never root,
read-only root, no capabilities, no new privileges, limits), the settings behind the limits, and
which memory limit each runner applies. The real container is inspected in
tests/integration/test_docker_lockdown.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlscope.contract.errors import UserError
from mlscope.contract.job import Job
from mlscope.contract.manifest import parse_manifest
from mlscope.contract.settings import DEFAULT_DOCKER_PIDS_LIMIT, Settings, load_settings
from mlscope.workers.runners import DockerRunner, ProcessRunner, get_runner
from mlscope.workers.runners import container as container_module
from mlscope.workers.runners.container import (
    CONTAINER_SCRATCH,
    UNPRIVILEGED_USER,
    container_options,
    container_user,
)
from tests.conftest import RUNTIME_MANIFESTS

TINY_ORT = RUNTIME_MANIFESTS / "tiny_mlp-onnxruntime.yaml"


def _job() -> Job:
    manifest = parse_manifest(yaml.safe_load(TINY_ORT.read_text()), origin=str(TINY_ORT))
    return Job(
        evaluation_id="e-1",
        manifest=manifest.to_dict(),
        origin=manifest.origin,
        framework="onnxruntime",
        device="cpu",
        batch_sizes=(1,),
        scenarios=("single_stream",),
        measure={"warmup_count": 1, "min_count": 5, "min_seconds": 0.05, "max_seconds": 2},
    )


def _env(tmp_path: Path, **values: str) -> dict[str, str]:
    return {"MLSCOPE_SETTINGS": str(tmp_path / "none.toml"), **{f"MLSCOPE_{k}": v for k, v in values.items()}}


# --- the container asked for ---------------------------------------------------------------------


def test_every_container_is_locked_down_whatever_its_limits(tmp_path: Path) -> None:
    # When the options of a container with no limits set are made
    options = container_options(_job(), image="img:1", io_dir=tmp_path, cache_dir=tmp_path)
    # Then it runs as nobody, on a read-only root with a scratch tmpfs that ~, TMPDIR and the XDG
    # caches point into, with no capabilities, no new privileges and no network
    assert options["user"] == UNPRIVILEGED_USER
    assert options["read_only"] is True
    assert set(options["tmpfs"]) == {CONTAINER_SCRATCH}
    assert "mode=1777" in options["tmpfs"][CONTAINER_SCRATCH]
    environment = options["environment"]
    assert environment["HOME"] == environment["TMPDIR"] == CONTAINER_SCRATCH
    assert all(
        environment[name].startswith(CONTAINER_SCRATCH + "/")
        for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME")
    )
    assert options["cap_drop"] == ["ALL"]
    assert options["security_opt"] == ["no-new-privileges"]
    assert options["network_mode"] == "none"


def test_the_pids_and_memory_limits_are_asked_for_when_set(tmp_path: Path) -> None:
    options = container_options(
        _job(), image="img:1", io_dir=tmp_path, cache_dir=tmp_path, memory_mb=700, pids_limit=256
    )
    assert options["pids_limit"] == 256
    assert options["mem_limit"] == options["memswap_limit"] == "700m"


@pytest.mark.parametrize("user", ["0:0", "0", "root", "1000:0", ""])
def test_a_container_is_never_asked_to_run_as_root(tmp_path: Path, user: str) -> None:
    with pytest.raises(ValueError, match="never runs as root"):
        container_options(_job(), image="img:1", io_dir=tmp_path, cache_dir=tmp_path, user=user)


@pytest.mark.parametrize(
    ("uid", "gid", "expected"),
    [(0, 0, UNPRIVILEGED_USER), (1000, 1000, "1000:1000"), (1000, 0, "1000:65534")],
)
def test_a_container_runs_as_the_worker_unless_the_worker_is_root(
    monkeypatch: pytest.MonkeyPatch, uid: int, gid: int, expected: str
) -> None:
    monkeypatch.setattr(container_module.os, "getuid", lambda: uid)
    monkeypatch.setattr(container_module.os, "getgid", lambda: gid)
    assert container_user() == expected


# --- settings and precedence ---------------------------------------------------------------------


def test_by_default_a_predictor_may_use_three_quarters_of_the_machine_and_4096_processes() -> None:
    import psutil

    settings = Settings()
    machine_mb = psutil.virtual_memory().total / 2**20
    assert settings.predictor_memory_mb == pytest.approx(0.75 * machine_mb, rel=0.01)
    assert settings.docker_pids_limit == DEFAULT_DOCKER_PIDS_LIMIT == 4096


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"PREDICTOR_MEMORY_MB": "3000"}, 3000),
        ({"PREDICTOR_MEMORY_MB": "3000", "DOCKER_MEMORY_MB": "2000"}, 2000),
        ({"PREDICTOR_MEMORY_MB": "0"}, None),
        ({"PREDICTOR_MEMORY_MB": "0", "DOCKER_MEMORY_MB": "2000"}, 2000),
    ],
)
def test_a_container_s_default_memory_limit_is_docker_memory_mb_else_predictor_memory_mb(
    tmp_path: Path, values: dict[str, str], expected: int | None
) -> None:
    runner = get_runner("docker", load_settings(_env(tmp_path, **values)))
    assert isinstance(runner, DockerRunner)
    assert runner.memory_mb == expected


def test_a_child_process_s_default_memory_limit_is_predictor_memory_mb(tmp_path: Path) -> None:
    runner = get_runner("process", load_settings(_env(tmp_path, PREDICTOR_MEMORY_MB="3000")))
    assert isinstance(runner, ProcessRunner) and runner.memory_mb == 3000
    unlimited = get_runner("process", load_settings(_env(tmp_path, PREDICTOR_MEMORY_MB="0")))
    assert isinstance(unlimited, ProcessRunner) and unlimited.memory_mb is None


def test_the_pids_limit_comes_from_the_environment_and_0_lifts_it(tmp_path: Path) -> None:
    limited = get_runner("docker", load_settings(_env(tmp_path, DOCKER_PIDS_LIMIT="128")))
    unlimited = get_runner("docker", load_settings(_env(tmp_path, DOCKER_PIDS_LIMIT="0")))
    assert isinstance(limited, DockerRunner) and isinstance(unlimited, DockerRunner)
    assert (limited.pids_limit, unlimited.pids_limit) == (128, None)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("PREDICTOR_MEMORY_MB", "lots", "predictor_memory_mb='lots': expected a whole number of MB"),
        ("PREDICTOR_MEMORY_MB", "10", "predictor_memory_mb=10: expected a whole number of MB >= 64, or 0"),
        ("PREDICTOR_MEMORY_MB", "-1", "predictor_memory_mb=-1"),
        ("DOCKER_PIDS_LIMIT", "1.5", "docker_pids_limit='1.5': expected a whole number"),
        ("DOCKER_PIDS_LIMIT", "-3", "docker_pids_limit=-3: expected a whole number >= 1, or 0"),
    ],
)
def test_bad_predictor_limits_name_the_setting(tmp_path: Path, name: str, value: str, words: str) -> None:
    with pytest.raises(UserError, match=words) as raised:
        load_settings(_env(tmp_path, **{name: value}))
    assert raised.value.field == name.lower()


def test_a_settings_file_sets_the_limits_too(tmp_path: Path) -> None:
    (tmp_path / "settings.toml").write_text("predictor_memory_mb = 1024\ndocker_pids_limit = 64\n")
    settings: Any = load_settings({"MLSCOPE_SETTINGS": str(tmp_path / "settings.toml")})
    assert (settings.predictor_memory_mb, settings.docker_pids_limit) == (1024, 64)
