"""The compose stack (ops/compose.host.yaml: Redis, PostgreSQL, the API and a worker, each in a
container of its own) started with docker-compose on the real Docker engine, and one evaluation sent
through it over HTTP: upload an ONNX file, submit, wait, read the result back from the stack's store.

The engine here has no bridge network, so the test runs the host-network file, on free ports and
under a project name of its own; `down -v` removes its containers and volumes whatever happens. The
images come from ops/ci/compose.sh (`make test` runs it). The bridge file, ops/compose.yaml, is
checked to stay in step with it. Without an engine, docker-compose or the images these tests skip
locally and fail in CI (env CI=true).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlscope.client import Client
from tests.fixtures.onnx_graphs import onnx_model
from tests.integration.conftest import _unavailable
from tests.integration.farm import free_port, wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BRIDGE_FILE = REPO / "ops" / "compose.yaml"
HOST_FILE = REPO / "ops" / "compose.host.yaml"
IMAGES = ("mlscope-farm", "mlscope-redis", "mlscope-postgres")
TOKEN = "compose-test-token"
# Enough measuring to be a real evaluation, short enough for a test on a shared 2-core machine.
QUICK = {"warmup_count": 2, "warmup_seconds": 0.0, "min_count": 10, "min_seconds": 0.2, "max_seconds": 5}
UP_TIMEOUT_S = 300
DOWN_TIMEOUT_S = 180


class Stack:
    """One docker-compose project of HOST_FILE on ports of its own."""

    def __init__(self, compose: str) -> None:
        self.project = f"mlscope-test-{uuid.uuid4().hex[:8]}"
        self.agent_id = f"{self.project}-worker"
        self.api_port = free_port()
        self.postgres_port = free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.command = [compose, "--project-name", self.project, "--file", str(HOST_FILE)]
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("MLSCOPE_", "COMPOSE_"))},
            "MLSCOPE_REDIS_PORT": str(free_port()),
            "MLSCOPE_POSTGRES_PORT": str(self.postgres_port),
            "MLSCOPE_API_PORT": str(self.api_port),
            "MLSCOPE_API_TOKENS": TOKEN,
            "MLSCOPE_AGENT_ID": self.agent_id,
        }
        self.client = Client(self.api_url, TOKEN, timeout_s=30)

    def run(self, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def logs(self) -> str:
        """The last lines each service wrote, for a failure's message."""
        answer = self.run("logs", "--no-color", "--tail", "40", timeout_s=60)
        return answer.stdout + answer.stderr

    def up(self) -> None:
        # --no-build: the images are ops/ci/compose.sh's; the engine has no registry to pull from.
        answer = self.run("up", "--detach", "--no-build", timeout_s=UP_TIMEOUT_S)
        assert answer.returncode == 0, f"up failed:\n{answer.stderr[-3000:]}\n{self.logs()[-4000:]}"

    def down(self) -> None:
        answer = self.run("down", "--volumes", "--timeout", "30", timeout_s=DOWN_TIMEOUT_S)
        assert answer.returncode == 0, f"down failed:\n{answer.stderr[-3000:]}"

    def leftovers(self) -> list[str]:
        """Containers and volumes of this project the engine still has."""
        label = f"label=com.docker.compose.project={self.project}"
        found = []
        for kind in (["ps", "--all"], ["volume", "ls"]):
            listed = subprocess.run(
                ["docker", *kind, "--quiet", "--filter", label], capture_output=True, text=True, timeout=60
            )
            found += listed.stdout.split()
        return found


@pytest.fixture(scope="module")
def compose(docker_engine: Any) -> str:
    """docker-compose's path, once the engine answers and has the stack's images."""
    compose = shutil.which("docker-compose")
    if compose is None:
        _unavailable("docker-compose is not installed: run `bash ops/ci/compose.sh`")
    missing = [name for name in IMAGES if not docker_engine.images.list(name=name)]
    if missing:
        _unavailable(f"no image {', '.join(missing)}: run `bash ops/ci/compose.sh`")
    assert compose is not None
    return compose


@pytest.fixture
def stack(compose: str) -> Iterator[Stack]:
    """The stack, up and answering; taken down with its volumes afterwards, whatever happened."""
    made = Stack(compose)
    try:
        made.up()
        try:
            wait_until(made.client.health, 60, "the stack's api to answer /api/v1/health", poll_s=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{made.logs()[-4000:]}") from None
        yield made
    finally:
        made.down()
        assert made.leftovers() == []


def test_an_uploaded_model_is_evaluated_through_the_compose_stack(stack: Stack, tmp_path: Path) -> None:
    # Given the stack's api, on its own store and broker
    health = stack.client.health()
    assert health["status"] == "ok", health
    assert health["store"]["url"] == f"postgresql://mlscope@127.0.0.1:{stack.postgres_port}/mlscope"

    # When a tiny ONNX model (no torch needed in the container) is uploaded and submitted with a token
    uploaded = stack.client.upload_model(onnx_model(tmp_path / "tiny-net.onnx"), filename="tiny-net.onnx")
    accepted = stack.client.submit({"model": uploaded["ref"], "framework": "onnxruntime", "measure": QUICK})
    [result] = stack.client.wait([accepted["id"]], timeout_s=180)

    # Then the stack's worker fetched it from the api, measured it and the api serves the result
    assert result["status"] == "succeeded", (result["error"], stack.logs()[-4000:])
    assert result["id"] == accepted["id"]
    assert result["model"]["name"] == "tiny-net"
    assert result["framework"]["name"] == "onnxruntime" and result["framework"]["version"]
    assert result["system"]["agent"]["id"] == stack.agent_id
    assert result["runner"] in ("process", "inline")
    assert result["measurements"]
    for measurement in result["measurements"]:
        latency = measurement["latency_ms"]
        assert latency["count"] > 0 and latency["median"] > 0, measurement
        assert measurement["throughput"] > 0
    # ... and lists it among the store's evaluations
    listed = stack.client.evaluations()
    assert accepted["id"] in [row["id"] for row in listed["items"]]


def _shape(path: Path) -> dict[str, Any]:
    """What both compose files must agree on: per service its image, its build (less the network)
    and its volumes, and the named volumes."""
    document = yaml.safe_load(path.read_text())
    services = {}
    for name, service in document["services"].items():
        if "profiles" in service:  # opt-in services (Jaeger, MongoDB) live in the bridge file only
            continue
        build = dict(service.get("build") or {})
        build.pop("network", None)
        services[name] = {"image": service["image"], "build": build, "volumes": service.get("volumes")}
    return {"services": services, "volumes": sorted(set(document["volumes"]) - {"mongo-data"})}


def test_the_bridge_and_host_compose_files_describe_the_same_stack() -> None:
    # Given the bridge file and its host-network twin
    # When their services, images, builds and volumes are read
    bridge, host = _shape(BRIDGE_FILE), _shape(HOST_FILE)

    # Then they are the same stack
    assert host == bridge
