"""The docker runner against the real Docker engine and the real ONNX Runtime predictor image.

End to end through the farm (a real `mlscope worker --runner docker`, the api over HTTP, Redis,
PostgreSQL), and the two ways a container can fail — it hangs, or it dies — through the pipeline
into a real SQLite store. Every test checks that no container of its evaluation is left behind.
Without an engine or the image these tests skip locally and fail in CI (env CI=true).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlscope.contract.job import PHASES
from mlscope.contract.request import parse_request
from mlscope.contract.settings import Settings
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.predictors.onnxruntime.export import exported_graph
from mlscope.store import open_store
from mlscope.workers.admission import admit
from mlscope.workers.pipeline import evaluate
from mlscope.workers.runners.docker import EVALUATION_LABEL
from tests.conftest import RUNTIME_MANIFESTS
from tests.fixtures.docker_engine import unavailable as _unavailable
from tests.integration.farm import Farm, wait_until

pytestmark = pytest.mark.slow

FRAMEWORK = "onnxruntime"
TINY = "test_tiny_mlp"
# Enough measuring to be a real evaluation, short enough for a test on a shared 2-core machine.
QUICK = {"warmup_count": 2, "warmup_seconds": 0.0, "min_count": 10, "min_seconds": 0.2, "max_seconds": 5}


@pytest.fixture(scope="module")
def engine(docker_engine: Any) -> Any:
    """The Docker engine's client, once the ONNX Runtime predictor image is there."""
    from mlscope.workers.images import image_for, image_name

    if image_for(FRAMEWORK, docker_engine) is None:
        _unavailable(f"no image {image_name(FRAMEWORK)}: run `mlscope image build {FRAMEWORK}`")
    return docker_engine


def _containers_of(engine: Any, evaluation_id: str) -> list[Any]:
    found: list[Any] = engine.containers.list(
        all=True, filters={"label": f"{EVALUATION_LABEL}={evaluation_id}"}
    )
    return found


@pytest.mark.parametrize("farm", ["redis"], indirect=True)
def test_a_farm_worker_runs_resnet18_in_the_onnxruntime_image(farm: Farm, engine: Any) -> None:
    from mlscope.workers.images import image_for

    image = image_for(FRAMEWORK, engine)
    assert image is not None
    # Given a worker that runs evaluations in containers only
    farm.start_api()
    capability = farm.capability("docker")
    farm.start_worker("agent-docker", capability, extra=("--runner", "docker"))

    # When ResNet-18 on ONNX Runtime is submitted over HTTP, asking for the docker runner, with its
    # accuracy on 16 digits (materialised by the worker, read by the container from the cache)
    answer = farm.client.submit(
        {
            "model": "resnet18",
            "framework": FRAMEWORK,
            "target": capability,
            "runner": "docker",
            "measure": QUICK,
            "timeout_s": 600,
            "dataset": "digits",
            "limit": 16,
        }
    )
    [result] = farm.client.wait([answer["id"]], timeout_s=600)

    # Then it succeeded inside a container of the image it records, and left no container behind
    assert result["status"] == "succeeded", (result["error"], farm.log("agent-docker")[-3000:])
    assert result["runner"] == "docker"
    recorded = result["framework"]["image"]
    assert recorded["id"] == image.id and recorded["name"] == image.name
    assert recorded["digest"].startswith("sha256:")
    assert result["framework"]["version"] == image.framework_version
    assert result["system"]["container"] is True
    assert result["measurements"] and all(m["latency_ms"]["median"] > 0 for m in result["measurements"])
    assert result["accuracy"]["dataset"] == "digits" and result["accuracy"]["count"] == 16
    assert _containers_of(engine, answer["id"]) == []


@pytest.fixture
def local(tmp_path: Path, shared_cache: Path) -> Iterator[tuple[Settings, Any]]:
    """Settings and a SQLite store of this test's own; the session's model cache, holding the tiny
    model's ONNX graph already (so a time limit is spent in the container, not exporting)."""
    settings = Settings(store_url=f"sqlite:///{tmp_path / 'store.db'}", cache_dir=shared_cache)
    exported_graph(ModelRegistry.load([RUNTIME_MANIFESTS]).get(TINY, FRAMEWORK), shared_cache)
    store = open_store(settings.store_url)
    yield settings, store
    store.close()


def _evaluate_tiny(
    settings: Settings, store: Any, emit: Any, *, measure: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    request = parse_request(
        {
            "model": TINY,
            "framework": FRAMEWORK,
            "runner": "docker",
            "measure": measure,
            "timeout_s": timeout_s,
        }
    )
    admitted = admit(request, ModelRegistry.load([RUNTIME_MANIFESTS]), here=settings)
    return evaluate(admitted, store=store, settings=settings, emit=emit)


def test_a_container_past_its_time_limit_is_ended_and_removed(
    engine: Any, local: tuple[Settings, Any]
) -> None:
    """The hang is made by measuring for far longer (min_seconds 120, with max_seconds above it)
    than the evaluation's time limit allows (25 s)."""
    settings, store = local
    running: list[Any] = []

    def note_the_container(event: dict[str, Any]) -> None:
        if event.get("event") == "created":
            threading.Thread(
                target=_note_when_running, args=(engine, event["id"], running), daemon=True
            ).start()

    # When a tiny model must measure for two minutes within a 25-second limit
    started = time.monotonic()
    result = _evaluate_tiny(
        settings,
        store,
        note_the_container,
        measure={**QUICK, "min_seconds": 120, "max_seconds": 150},
        timeout_s=25,
    )

    # Then the evaluation fails as a timeout near the limit, in a phase of the predictor's, and the
    # container that the engine had running is gone
    assert result["status"] == "failed"
    assert result["error"]["type"] == "Timeout"
    assert "25 s" in result["error"]["message"]
    assert result["error"]["phase"] in PHASES
    assert time.monotonic() - started < 90
    assert running, "no container was seen running the predictor"
    assert _containers_of(engine, result["id"]) == []


def _note_when_running(engine: Any, evaluation_id: str, running: list[str]) -> None:
    """Polls the engine until a container of the evaluation is running (on a loaded machine with the
    vfs storage driver the predictor may take most of the limit to report its first phase, so the
    engine's own state is the evidence, not the predictor's events)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not running:
        for container in _containers_of(engine, evaluation_id):
            if container.status == "running":
                running.append(container.id)
        time.sleep(0.2)


def test_a_container_killed_from_outside_is_a_crash_naming_the_signal(
    engine: Any, local: tuple[Settings, Any]
) -> None:
    """The crash is made from outside: once the predictor reports the measure phase, the test
    kills its container with the Docker SDK (SIGKILL), as the kernel or an operator would."""
    settings, store = local
    killed: list[str] = []

    def kill_when_measuring(event: dict[str, Any]) -> None:
        if event.get("event") == "created":
            killed.append(event["id"])
        if event.get("event") == "phase" and event.get("phase") == "measure" and len(killed) == 1:
            threading.Thread(target=_kill_containers, args=(engine, killed), daemon=True).start()

    # When the container is killed while it measures (for up to a minute)
    result = _evaluate_tiny(
        settings,
        store,
        kill_when_measuring,
        measure={**QUICK, "min_seconds": 60, "max_seconds": 90},
        timeout_s=300,
    )

    # Then the evaluation failed as a crash in the measure phase, naming exit code 137 = SIGKILL,
    # and the container is gone
    assert len(killed) == 2, "the container was never killed"
    assert result["status"] == "failed"
    assert result["error"]["type"] == "PredictorCrashed"
    assert result["error"]["phase"] == "measure"
    assert "137" in result["error"]["message"] and "SIGKILL" in result["error"]["message"]
    assert _containers_of(engine, result["id"]) == []


def _kill_containers(engine: Any, killed: list[str]) -> None:
    evaluation_id = killed[0]
    containers = wait_until(lambda: _containers_of(engine, evaluation_id), 30, "the evaluation's container")
    for container in containers:
        container.kill()
    killed.append(container.id)


@pytest.mark.parametrize("farm", ["redis"], indirect=True)
def test_a_farm_workers_brick_job_runs_in_the_onnxruntime_image(
    farm: Farm, engine: Any, tmp_path: Path
) -> None:
    from tests.fixtures.brick_graphs import mlp

    # Given a worker that runs evaluations in containers only, and two uploaded one-layer graphs
    farm.start_api()
    capability = farm.capability("docker-bricks")
    farm.start_worker("agent-docker-bricks", capability, extra=("--runner", "docker"))
    refs = [
        farm.client.upload_model(mlp(tmp_path / f"b{n}.onnx", [32 * n, 16], seed=n))["ref"] for n in (1, 2)
    ]
    # When they are submitted as bricks (one job) asking for the docker runner
    answer = farm.client.submit_batch(
        {
            "models": refs,
            "frameworks": [FRAMEWORK],
            "targets": [capability],
            "bricks": True,
            "runner": "docker",
            "measure": {"warmup_count": 3, "min_count": 15, "min_seconds": 0.0, "max_seconds": 0.25},
        }
    )
    ids = [item["id"] for item in answer["evaluations"]]
    ended = farm.client.wait(ids, timeout_s=300)
    # Then both are measured in the one container job, each an evaluation of its own
    assert [e["status"] for e in ended] == ["succeeded", "succeeded"], [e["error"] for e in ended]
    assert all(e["runner"] == "docker" for e in ended)
    first, second = (e["measurements"][0] for e in ended)
    assert first["environment"] == second["environment"]
    assert first["hot_min_ms"] <= first["latency_ms"]["median"]
    for evaluation_id in ids:
        assert _containers_of(engine, evaluation_id) == []
