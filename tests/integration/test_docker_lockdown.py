"""Locked-down predictor containers, on the real Docker engine: while a real evaluation measures, its
container is inspected (`docker inspect`: user, read-only root, capabilities, privileges, pids and
memory limits, network) and probed from inside (`docker exec` as the container's user); and a real
evaluation succeeds in the locked-down container of every framework image there is, traced at
FRAMEWORK level so the frameworks' profilers write their temporary files too; and llama.cpp generates
there from the GGUF file its admission wrote on the host (the image has no transformers or gguf).

The worker side runs as whoever runs the tests: as root (as here) the containers run as nobody,
which is the case that matters. Without an engine or the image these tests skip locally and fail in
CI (env CI=true); images CI does not build (PyTorch's: ops/images/README.md) only skip.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlscope.contract.request import parse_request
from mlscope.contract.settings import Settings
from mlscope.registry.models import ModelRegistry
from mlscope.store import open_store
from mlscope.workers.admission import admit
from mlscope.workers.pipeline import evaluate
from mlscope.workers.runners.container import CONTAINER_SCRATCH, EVALUATION_LABEL
from tests.conftest import RUNTIME_MANIFESTS
from tests.fixtures.docker_engine import unavailable as _unavailable
from tests.integration.farm import wait_until

pytestmark = pytest.mark.slow

# The images ops/ci/images.sh builds: in CI a missing one is a failure, any other only skips.
CI_IMAGES = ("onnxruntime", "openvino", "tensorflow", "mxnet", "litert", "llamacpp")
# Frameworks whose FRAMEWORK pass records no layers, by design (docs/litert.md: no per-operator times).
NO_FRAMEWORK_PROFILER = ("litert",)
QUICK = {"warmup_count": 2, "warmup_seconds": 0.0, "min_count": 10, "min_seconds": 0.2, "max_seconds": 5}
# What the predictor's user finds inside the container, printed as JSON by `docker exec`.
PROBE = """
import json, os, pathlib
def writes(path):
    try:
        pathlib.Path(path).write_text("x")
        return True
    except OSError:
        return False
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "home": os.environ.get("HOME"),
    "writes_root": writes("/probe"), "writes_venv": writes("/opt/mlscope/probe"),
    "writes_etc": writes("/etc/probe"), "writes_scratch": writes("/tmp/probe"),
    "writes_cache": writes("/mlscope/cache/probe"),
    "cap_eff": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
}))
"""


@pytest.fixture(scope="module")
def engine(docker_engine: Any) -> Any:
    return docker_engine


def _need_image(engine: Any, framework: str) -> None:
    from mlscope.workers.images import image_for, image_name

    if image_for(framework, engine) is None:
        message = f"no image {image_name(framework)}: run `mlscope image build {framework}`"
        _unavailable(message) if framework in CI_IMAGES else pytest.skip(message)


@pytest.fixture
def local(tmp_path: Path, shared_cache: Path) -> Iterator[tuple[Settings, Any]]:
    """This test's settings (the defaults' limits, the session's model cache) and SQLite store."""
    settings = Settings(store_url=f"sqlite:///{tmp_path / 'store.db'}", cache_dir=shared_cache)
    store = open_store(settings.store_url)
    yield settings, store
    store.close()


def _evaluate(
    settings: Settings, store: Any, emit: Any, *, model: str, framework: str, **changes: Any
) -> Any:
    registry = ModelRegistry.load([RUNTIME_MANIFESTS])
    document = {"model": model, "framework": framework, "runner": "docker", "measure": QUICK, **changes}
    admitted = admit(parse_request(document), registry, here=settings)
    return evaluate(admitted, store=store, settings=settings, emit=emit)


def _containers_of(engine: Any, evaluation_id: str) -> list[Any]:
    found: list[Any] = engine.containers.list(
        all=True, filters={"label": f"{EVALUATION_LABEL}={evaluation_id}"}
    )
    return found


def test_a_measuring_predictor_container_is_locked_down(engine: Any, local: tuple[Settings, Any]) -> None:
    _need_image(engine, "onnxruntime")
    settings, store = local
    seen: dict[str, Any] = {}
    ids: list[str] = []

    def inspect_while_measuring(event: dict[str, Any]) -> None:
        if event.get("event") == "created":
            ids.append(event["id"])
        elif event.get("event") == "phase" and event.get("phase") == "measure" and "inspect" not in seen:
            [container] = wait_until(lambda: _containers_of(engine, ids[0]), 30, "the container")
            seen["inspect"] = engine.api.inspect_container(container.id)
            seen["probe"] = container.exec_run(["python", "-c", PROBE])

    # When a tiny model measures for a few seconds in a container, with the default limits
    result = _evaluate(
        settings,
        store,
        inspect_while_measuring,
        model="test_tiny_mlp",
        framework="onnxruntime",
        measure={**QUICK, "min_seconds": 5, "max_seconds": 10},
        timeout_s=300,
    )

    # Then the evaluation succeeded, and the container it ran in was, by `docker inspect`: not root,
    # read-only but for a scratch tmpfs, without capabilities or new privileges, limited in
    # processes and memory, and offline
    assert result["status"] == "succeeded", result["error"]
    config, host = seen["inspect"]["Config"], seen["inspect"]["HostConfig"]
    uid, _, gid = config["User"].partition(":")
    assert uid not in ("", "0", "root") and gid not in ("", "0", "root")
    assert host["ReadonlyRootfs"] is True
    assert CONTAINER_SCRATCH in host["Tmpfs"]
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] == settings.docker_pids_limit > 0
    assert host["Memory"] == settings.predictor_memory_mb * 2**20 > 0
    assert host["NetworkMode"] == "none"
    # And from inside, its user is that uid, writes only to the scratch tmpfs (and the io dir), and
    # holds no effective capability
    assert seen["probe"].exit_code == 0, seen["probe"].output
    inside = json.loads(seen["probe"].output)
    assert (inside["uid"], inside["gid"]) == (int(uid), int(gid))
    assert inside["home"] == CONTAINER_SCRATCH and inside["writes_scratch"] is True
    assert not any(inside[f"writes_{where}"] for where in ("root", "venv", "etc", "cache"))
    assert int(inside["cap_eff"], 16) == 0 and inside["no_new_privs"] == "1"
    assert _containers_of(engine, result["id"]) == []


@pytest.mark.parametrize(
    ("framework", "model"),
    [
        ("onnxruntime", "test_tiny_mlp"),
        ("openvino", "test_tiny_mlp"),
        ("pytorch", "test_tiny_mlp"),
        ("tensorflow", "mobilenet_v2"),
        ("mxnet", "resnet18"),
        ("litert", "digits_cnn"),
    ],
)
def test_a_traced_evaluation_succeeds_in_a_locked_down_container(
    engine: Any, local: tuple[Settings, Any], framework: str, model: str
) -> None:
    """Frameworks write to ~ (Keras), to their caches and to their profilers' temporary directories:
    all of that must land in the scratch tmpfs, since the root filesystem is read-only."""
    _need_image(engine, framework)
    settings, store = local

    # When the model runs in its framework's container, traced at FRAMEWORK level
    result = _evaluate(
        settings,
        store,
        lambda event: None,
        model=model,
        framework=framework,
        trace_level="FRAMEWORK",
        timeout_s=900,
    )

    # Then it succeeded with its measurements and the framework's own trace, and left no container
    assert result["status"] == "succeeded", result["error"]
    assert result["runner"] == "docker" and result["system"]["container"] is True
    assert result["measurements"] and result["measurements"][0]["latency_ms"]["median"] > 0
    spans = store.get_spans(result["id"], limit=100_000)
    if framework in NO_FRAMEWORK_PROFILER:
        # its FRAMEWORK pass ran in the container and says why it recorded no layers
        passes = [span for span in spans if span["name"] == "profile FRAMEWORK"]
        assert passes and all(span["attributes"]["supported"] is False for span in passes)
    else:
        assert any(span["level"] == "FRAMEWORK" for span in spans)
    assert _containers_of(engine, result["id"]) == []


def test_llamacpp_generates_in_a_locked_down_container_from_the_gguf_admission_wrote(
    engine: Any, local: tuple[Settings, Any]
) -> None:
    """The image has llama-cpp-python and numpy but no transformers, torch or gguf: the request's
    admission, on the host, writes the GGUF file and its record into the cache the container mounts
    read-only, and the predictor only finds them there."""
    _need_image(engine, "llamacpp")
    settings, store = local

    # When the catalogue's tiny Llama (two layers) generates a few requests from its q8_0 GGUF file
    # in llama.cpp's container
    result = _evaluate(
        settings,
        store,
        lambda event: None,
        model="hf:llama",
        framework="llamacpp",
        scenarios=["generate"],
        model_options={"config": {"num_hidden_layers": 2}},
        options={"gguf_type": "q8_0"},
        generation={"prompt_tokens": 16, "output_tokens": 8, "requests": 10},
        timeout_s=600,
    )

    # Then it succeeded in the container, on the image's llama.cpp, from the file the host wrote with
    # its gguf and transformers (the container has neither)
    assert result["status"] == "succeeded", result["error"]
    assert result["runner"] == "docker" and result["system"]["container"] is True
    facts = result["framework"]
    assert facts["gguf_type"] == "q8_0" and facts["gguf_bytes"] > 0
    assert facts["gguf_writer"]["gguf"] and facts["gguf_writer"]["transformers"]
    # And every request got every token, timed in process
    (point,) = result["measurements"]
    generation = point["generation"]
    assert generation["via"] == "in_process" and generation["failed_requests"]["count"] == 0
    assert generation["per_request"]["output_tokens"] == [8] * generation["requests"]
    assert generation["ttft_ms"]["median"] > 0 and generation["tpot_ms"]["median"] > 0
    assert _containers_of(engine, result["id"]) == []
