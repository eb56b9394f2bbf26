"""The docker runner's parts that need no container run: the container it would ask for, its
settings, the predictor runtime's file protocol (`--job`/`--result`), and what it says about
images (against the real engine, which skips locally and fails in CI when none answers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlscope.contract.errors import UserError
from mlscope.contract.job import Job
from mlscope.contract.manifest import parse_manifest
from mlscope.contract.request import parse_request
from mlscope.contract.settings import Settings, load_settings
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.frameworks import FRAMEWORKS, FrameworkSpec, get_framework
from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.onnxruntime.export import exported_graph
from mlscope.workers.admission import admit
from mlscope.workers.runners import get_runner
from mlscope.workers.runners.docker import (
    CONTAINER_CACHE,
    CONTAINER_IO,
    EVALUATION_LABEL,
    DockerRunner,
    container_options,
)
from tests.conftest import REPO, RUNTIME_MANIFESTS
from tests.fixtures.docker_engine import unavailable as _unavailable

TINY_ORT = RUNTIME_MANIFESTS / "tiny_mlp-onnxruntime.yaml"


def _job(device: str = "cpu", framework: str = "onnxruntime", **changes: Any) -> Job:
    manifest = parse_manifest(yaml.safe_load(TINY_ORT.read_text()), origin=str(TINY_ORT))
    values: dict[str, Any] = {
        "evaluation_id": "e-1",
        "manifest": manifest.to_dict(),
        "origin": manifest.origin,
        "framework": framework,
        "device": device,
        "batch_sizes": (1,),
        "scenarios": ("single_stream",),
        "measure": {"warmup_count": 1, "min_count": 5, "min_seconds": 0.05, "max_seconds": 2},
        **changes,
    }
    return Job(**values)


# --- the container asked for ---------------------------------------------------------------------


def test_a_cpu_container_is_offline_labelled_limited_and_mounts_the_cache_read_only(tmp_path: Path) -> None:
    # Given a CPU job, 1.5 CPUs and 512 MB
    options = container_options(
        _job(), image="img:1", io_dir=tmp_path / "io", cache_dir=tmp_path / "cache", cpus=1.5, memory_mb=512
    )
    # Then the container has no network, carries the evaluation's id, runs the predictor runtime on
    # the io dir's files, and is limited with swap counted in the memory
    assert options["network_mode"] == "none"
    assert options["labels"] == {EVALUATION_LABEL: "e-1"}
    assert options["command"][-4:] == [
        "--job",
        f"{CONTAINER_IO}/job.json",
        "--result",
        f"{CONTAINER_IO}/result.json",
    ]
    assert options["volumes"][str(tmp_path / "cache")] == {"bind": CONTAINER_CACHE, "mode": "ro"}
    assert options["volumes"][str(tmp_path / "io")] == {"bind": CONTAINER_IO, "mode": "rw"}
    assert options["nano_cpus"] == 1_500_000_000
    assert options["mem_limit"] == options["memswap_limit"] == "512m"
    assert options["auto_remove"] is False
    assert "device_requests" not in options


def test_no_limit_is_asked_for_when_none_is_set(tmp_path: Path) -> None:
    options = container_options(_job(), image="img:1", io_dir=tmp_path, cache_dir=tmp_path)
    assert not {"nano_cpus", "mem_limit", "memswap_limit", "pids_limit"} & set(options)


@pytest.mark.parametrize(("device", "host_gpu"), [("cuda", "0"), ("cuda:1", "1")])
def test_a_gpu_job_asks_for_its_gpu_by_device_request(tmp_path: Path, device: str, host_gpu: str) -> None:
    """No GPU here: this checks the request the engine would get, not a container on a GPU."""
    options = container_options(_job(device), image="img:1", io_dir=tmp_path, cache_dir=tmp_path)
    [request] = options["device_requests"]
    assert request["DeviceIDs"] == [host_gpu]
    assert request["Capabilities"] == [["gpu"]]


def test_a_local_graph_the_manifest_names_is_mounted_read_only_at_its_own_path(tmp_path: Path) -> None:
    graph = tmp_path / "model.onnx"
    options = container_options(
        _job(), image="img:1", io_dir=tmp_path / "io", cache_dir=tmp_path / "c", read_only_files=(graph,)
    )
    assert options["volumes"][str(graph)] == {"bind": str(graph), "mode": "ro"}


# --- the read-only model cache ------------------------------------------------------------------


def test_a_cached_graph_is_read_without_writing_to_the_cache(tmp_path: Path) -> None:
    manifest = parse_manifest(yaml.safe_load(TINY_ORT.read_text()), origin=str(TINY_ORT))
    cached = tmp_path / "onnx" / f"{manifest.sha256}-seed0.onnx"
    cached.parent.mkdir()
    cached.write_bytes(b"a graph")
    assert exported_graph(manifest, tmp_path) == cached
    assert [p.name for p in cached.parent.iterdir()] == [cached.name]  # no lock file


def test_a_graph_missing_from_a_cache_that_cannot_be_written_says_so(tmp_path: Path) -> None:
    """A file where the cache directory should be stands in for a read-only mount (this test may
    run as root, whom permissions do not stop)."""
    manifest = parse_manifest(yaml.safe_load(TINY_ORT.read_text()), origin=str(TINY_ORT))
    (tmp_path / "cache").write_text("not a directory")
    with pytest.raises(PredictorError, match=r"has no exported ONNX graph .* the cache cannot be written"):
        exported_graph(manifest, tmp_path / "cache")


# --- settings ------------------------------------------------------------------------------------


def test_the_docker_limits_come_from_the_environment(tmp_path: Path) -> None:
    env = {
        "MLSCOPE_SETTINGS": str(tmp_path / "none.toml"),
        "MLSCOPE_DOCKER_CPUS": "0.5",
        "MLSCOPE_DOCKER_MEMORY_MB": "2048",
        "MLSCOPE_CACHE_DIR": str(tmp_path / "cache"),
    }
    runner = get_runner("docker", load_settings(env))
    assert isinstance(runner, DockerRunner)
    assert (runner.cpus, runner.memory_mb, runner.cache_dir) == (0.5, 2048, tmp_path / "cache")


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("DOCKER_CPUS", "many", "docker_cpus='many'"),
        ("DOCKER_CPUS", "0", "docker_cpus=0.0: expected a number of CPUs > 0"),
        ("DOCKER_CPUS", "inf", "docker_cpus=inf"),
        ("DOCKER_MEMORY_MB", "1.5", "docker_memory_mb='1.5': expected a whole number of MB"),
        ("DOCKER_MEMORY_MB", "2", "docker_memory_mb=2: expected a whole number of MB >= 6"),
    ],
)
def test_bad_docker_limits_name_the_setting(tmp_path: Path, name: str, value: str, words: str) -> None:
    with pytest.raises(UserError, match=words) as raised:
        load_settings({"MLSCOPE_SETTINGS": str(tmp_path / "none.toml"), f"MLSCOPE_{name}": value})
    assert raised.value.field == name.lower()


# --- the predictor runtime's file protocol -------------------------------------------------------


def _execute(tmp_path: Path, job: Job) -> tuple[subprocess.CompletedProcess[str], Path]:
    (tmp_path / "job.json").write_text(json.dumps(job.to_dict()))
    result = tmp_path / "out" / "result.json"
    result.parent.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlscope.runtime.execute",
            "--job",
            str(tmp_path / "job.json"),
            "--result",
            str(result),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    return completed, result


def test_a_failed_job_writes_its_error_to_the_result_file_only(tmp_path: Path) -> None:
    # Given a job for a framework nobody registered
    completed, result = _execute(tmp_path, _job(framework="no_such_framework"))
    # Then the error is in the result file, with its phase, and the process says it failed
    assert completed.returncode == 1
    error = json.loads(result.read_text())
    assert (error["event"], error["type"], error["phase"]) == ("error", "UserError", "import")
    assert "no_such_framework" in error["message"]
    assert not any('"error"' in line for line in completed.stdout.splitlines())
    assert [p.name for p in result.parent.iterdir()] == ["result.json"]  # no partial file left


@pytest.mark.slow
def test_a_job_read_from_a_file_streams_events_and_writes_its_result_to_a_file(tmp_path: Path) -> None:
    completed, result = _execute(tmp_path, _job(cache_dir=str(tmp_path / "cache")))
    assert completed.returncode == 0, completed.stderr[-2000:]
    final = json.loads(result.read_text())
    assert final["event"] == "result"
    assert final["result"]["measurements"][0]["batch_size"] == 1
    events = [json.loads(line)["event"] for line in completed.stdout.splitlines()]
    assert "measurement" in events and "result" not in events


# --- images, on the real engine ------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(docker_engine: Any) -> Any:
    return docker_engine


@pytest.fixture
def imageless(monkeypatch: pytest.MonkeyPatch) -> FrameworkSpec:
    """A framework registered for this test only, so no image of it can exist."""
    spec = FrameworkSpec(
        name="imageless",
        display="Imageless",
        import_name="json",
        distributions=(),
        predictor="mlscope.runtime.predictors.onnxruntime.predictor:OnnxRuntimePredictor",
        sources=frozenset({"python"}),
        install_hint="nothing to install",
    )
    monkeypatch.setitem(FRAMEWORKS, spec.name, spec)
    return spec


def test_the_runner_reports_the_image_s_framework_version(engine: Any) -> None:
    from mlscope.workers.images import image_for, image_name

    spec = get_framework("onnxruntime")
    image = image_for(spec.name, engine)
    if image is None:
        _unavailable(f"no image {image_name(spec.name)}: run `mlscope image build onnxruntime`")
    runner = DockerRunner.from_settings(Settings())
    assert runner.framework_version(spec) == image.framework_version
    assert runner.where(spec) == f"in image {image.name}"


def test_a_framework_without_an_image_is_not_runnable_and_says_how_to_build_it(
    engine: Any, imageless: FrameworkSpec
) -> None:
    runner = DockerRunner.from_settings(Settings())
    assert runner.framework_version(imageless) is None
    assert "`mlscope image build imageless`" in runner.where(imageless)


def test_preparing_a_docker_request_for_a_framework_without_an_image_names_the_build_command(
    engine: Any, imageless: FrameworkSpec, tmp_path: Path
) -> None:
    # Given a model for the imageless framework
    document = {**yaml.safe_load(TINY_ORT.read_text()), "framework": {"name": "imageless", "version": "*"}}
    registry = ModelRegistry([parse_manifest(document, origin="test")])
    request = parse_request({"model": "test_tiny_mlp", "framework": "imageless", "runner": "docker"})
    # When it is prepared for the docker runner
    with pytest.raises(UserError) as raised:
        admit(request, registry, here=Settings(cache_dir=tmp_path))
    # Then the answer names the image and the command that builds it
    assert "mlscope-predictor-imageless" in str(raised.value)
    assert "`mlscope image build imageless`" in str(raised.value)


def test_running_without_an_image_is_an_image_missing_error(
    engine: Any, imageless: FrameworkSpec, tmp_path: Path
) -> None:
    outcome = DockerRunner(tmp_path).run(_job(framework="imageless"), lambda event: None, timeout_s=30)
    assert outcome.result is None and outcome.error is not None
    assert outcome.error["type"] == "ImageMissing"
    assert "mlscope image build imageless" in outcome.error["message"]


def test_a_container_has_a_lifetime_of_its_own_past_the_job_limit(tmp_path: Path) -> None:
    # An orphan (its worker SIGKILLed) must end by itself: `timeout` is the container's PID 1.
    options = container_options(_job(), image="img:1", io_dir=tmp_path, cache_dir=tmp_path, lifetime_s=90.5)
    assert options["command"][:3] == ["timeout", "--signal=KILL", "91"]
    assert options["command"][3:6] == ["python", "-m", "mlscope.runtime.execute"]
    unlimited = container_options(_job(), image="img:1", io_dir=tmp_path, cache_dir=tmp_path)
    assert unlimited["command"][0] == "python"
