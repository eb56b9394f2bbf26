"""The ONNX Runtime predictor image on a real Docker engine: built (or found up to date) the way
`make test` builds it, found by `image_for`, listed by `mlscope image list`, and holding the
framework and the predictor runtime but no farm code and no CA bundle; and rebuilt after a change of
the predictor runtime's source on the same deps image, without reinstalling the framework.

Needs a Docker engine and the offline base image (ops/ci/docker.sh); without them the tests skip
locally and fail in CI (env CI=true).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.request import parse_request
from mlscope.contract.settings import Settings
from mlscope.registry.models import ModelRegistry
from mlscope.store import open_store
from mlscope.workers.admission import admit
from mlscope.workers.image_contexts import pinned_version
from mlscope.workers.images import (
    LABEL_DEPS,
    LABEL_DEPS_OF,
    LABEL_INPUTS,
    ImageInfo,
    build_image,
    docker_client,
    image_for,
    image_name,
)
from mlscope.workers.pipeline import evaluate
from tests.conftest import REPO, RUNTIME_MANIFESTS
from tests.integration.conftest import _unavailable

# The engine is reached without the docker_engine fixture: the module carries its marker itself.
pytestmark = [pytest.mark.slow, pytest.mark.docker]

BASE_IMAGE = "mlscope-base:bookworm"
# The same arguments as ops/ci/images.sh, so the image `make test` built is found up to date.
CA_BUNDLE = Path(os.environ.get("MLSCOPE_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"))
FARM_MODULES = ("torch", "celery", "flask", "sqlalchemy", "redis", "pymongo", "opentelemetry")
PROBE = f"""
import json, sys, onnxruntime, mlscope.runtime.execute
print(json.dumps({{"onnxruntime": onnxruntime.__version__,
                  "farm": [m for m in {FARM_MODULES!r} if m in sys.modules]}}))
"""


@pytest.fixture(scope="module")
def client() -> Any:
    try:
        engine = docker_client()
    except UserError as exc:
        _unavailable(str(exc))
    from docker.errors import ImageNotFound

    try:
        engine.images.get(BASE_IMAGE)
    except ImageNotFound:
        _unavailable(f"the base image {BASE_IMAGE} is missing: run ops/ci/docker.sh")
    return engine


def _build(**kwargs: Any) -> ImageInfo:
    """The ONNX Runtime image built with ops/ci/images.sh's arguments (found up to date when it is)."""
    return build_image(
        "onnxruntime",
        base=BASE_IMAGE,
        ca_bundle=CA_BUNDLE if CA_BUNDLE.is_file() else None,
        network="host",
        **kwargs,
    )


@pytest.fixture(scope="module")
def ort_image(client: Any) -> ImageInfo:
    """The ONNX Runtime image, built here unless `make test` already built it (about a minute)."""
    return _build()


def _mlscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlscope", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_image_for_finds_the_built_image_with_its_pinned_version(client: Any, ort_image: ImageInfo) -> None:
    # When the image is looked up by framework
    found = image_for("onnxruntime", client)
    # Then it is the built one, named for this mlscope version, labelled with the pinned version
    assert found is not None and found.id == ort_image.id
    assert found.name == image_name("onnxruntime") and found.framework == "onnxruntime"
    assert found.framework_version == pinned_version("onnxruntime") and found.inputs
    assert found.size > 0 and found.created


def test_an_image_with_the_same_inputs_is_not_built_again(client: Any, ort_image: ImageInfo) -> None:
    # Given the image just built; when it is built again with the same inputs
    lines: list[str] = []
    again = build_image(
        "onnxruntime",
        base=BASE_IMAGE,
        ca_bundle=CA_BUNDLE if CA_BUNDLE.is_file() else None,
        network="host",
        log=lines.append,
    )
    # Then nothing is built: the same image, no build step ran
    assert again.id == ort_image.id
    assert not [line for line in lines if line.startswith("Step ")], lines


def test_the_image_runs_the_predictor_runtime_offline_without_farm_code(
    client: Any, ort_image: ImageInfo
) -> None:
    # When a container without network imports the predictor runtime and the framework, then lists
    # what is left of the build (one container: on the vfs storage driver each one copies the image)
    script = (
        'python -c "$PROBE"; echo "$MARK"; ls /tmp/build 2>&1; '
        "find / -xdev -name 'build-ca*' 2>/dev/null; id -u"
    )
    output = client.containers.run(
        ort_image.id,
        ["sh", "-c", script],
        environment={"PROBE": PROBE, "MARK": "--- listing ---"},
        network_mode="none",
        remove=True,
        stderr=False,
    ).decode()
    probed, _, listing = output.partition("--- listing ---")
    seen = json.loads(probed.strip().splitlines()[-1])
    # Then the framework is the labelled version and nothing of the farm (or torch) was imported
    assert seen["onnxruntime"] == ort_image.framework_version
    assert seen["farm"] == []
    # ... and the image has no trace of the build context (the CA bundle stayed in the build stage)
    assert "No such file" in listing and "build-ca" not in listing
    assert listing.split()[-1] != "0"  # not root


def test_image_list_json_shows_the_image(ort_image: ImageInfo) -> None:
    done = _mlscope("image", "list", "--json")
    assert done.returncode == 0, done.stderr
    listed = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    mine = [row for row in listed if row["name"] == ort_image.name]
    assert len(mine) == 1
    assert mine[0]["id"] == ort_image.id and mine[0]["framework_version"] == ort_image.framework_version


def test_building_an_unknown_framework_exits_2_in_one_line() -> None:
    done = _mlscope("image", "build", "nosuchfw")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "unknown framework 'nosuchfw'" in lines[0]


# Alone: it replaces the shared ONNX Runtime image, which docker tests on the other worker run in.
@pytest.mark.quiet
def test_a_source_only_change_rebuilds_the_image_on_the_same_deps_image(
    client: Any, ort_image: ImageInfo, tmp_path: Path, shared_cache: Path
) -> None:
    """Last in the module: it replaces the image the tests above hold, and puts the checkout's back."""
    from docker.errors import ImageNotFound

    # Given the image and the deps image it was built on
    deps_name = client.images.get(ort_image.id).labels[LABEL_DEPS]
    deps = client.images.get(deps_name)
    assert deps.labels[LABEL_DEPS_OF] == "onnxruntime" and deps.labels[LABEL_INPUTS]
    # ... and a copy of the checkout whose predictor runtime has one more line
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "ops" / "images", checkout / "ops" / "images")
    shutil.copytree(REPO / "mlscope", checkout / "mlscope", ignore=shutil.ignore_patterns("__pycache__"))
    marker = f"# a source-only change made by {__name__} at {time.time_ns()}"
    execute = checkout / "mlscope" / "runtime" / "execute.py"
    execute.write_text(execute.read_text() + marker + "\n")
    try:
        # When the image is built from that copy
        lines: list[str] = []
        changed = _build(checkout=checkout, log=lines.append)
        # Then the deps image was reused as it was (no pip install from the index), and a new
        # predictor image was built on it, replacing the old one
        assert f"deps image {deps_name} is up to date ({deps.short_id.removeprefix('sha256:')[:12]})" in lines
        assert not [line for line in lines if line.startswith("building deps image")], lines
        assert client.images.get(deps_name).id == deps.id
        assert changed.id != ort_image.id and changed.inputs != ort_image.inputs
        assert client.images.get(changed.id).labels[LABEL_DEPS] == deps_name
        with pytest.raises(ImageNotFound):
            client.images.get(ort_image.id)
        # ... which holds the changed source
        shown = client.containers.run(
            changed.id,
            ["python", "-c", "import mlscope.runtime.execute as e; print(open(e.__file__).read())"],
            network_mode="none",
            remove=True,
        ).decode()
        assert shown.rstrip().splitlines()[-1] == marker
        # ... and runs an evaluation in a container of the docker runner
        result = _evaluate_in_docker(tmp_path, shared_cache)
        assert result["status"] == "succeeded", result["error"]
        assert result["framework"]["image"]["id"] == changed.id
    finally:
        # The checkout's own image again (a source-only rebuild too), for the tests after this module
        restored = _build()
    assert restored.id != changed.id and client.images.get(deps_name).id == deps.id


def test_a_new_deps_image_replaces_the_frameworks_others(client: Any, ort_image: ImageInfo) -> None:
    from docker.errors import ImageNotFound

    from mlscope.workers.images import _remove_other_deps

    # Given the deps image in use (the image's now: a test above may have replaced ort_image), and
    # another deps tag of the framework (as an older deps image leaves it) on the same image
    image = image_for("onnxruntime", client)
    assert image is not None
    current = client.images.get(image.id).labels[LABEL_DEPS]
    stale = current.rsplit(":", 1)[0] + ":0000000000000000"
    client.images.get(current).tag(stale)
    # When the framework's other deps images are removed
    _remove_other_deps(client, "onnxruntime", keep=current)
    # Then the stale tag is gone and the current deps image stays
    with pytest.raises(ImageNotFound):
        client.images.get(stale)
    assert client.images.get(current).tags == [current]


def _evaluate_in_docker(tmp_path: Path, cache: Path) -> dict[str, Any]:
    """A short evaluation of a tiny model with the docker runner, stored in a SQLite store of its own."""
    settings = Settings(store_url=f"sqlite:///{tmp_path / 'store.db'}", cache_dir=cache)
    store = open_store(settings.store_url)
    try:
        document = {
            "model": "test_tiny_mlp",
            "framework": "onnxruntime",
            "runner": "docker",
            "measure": {"warmup_count": 2, "min_count": 10, "min_seconds": 0.2, "max_seconds": 5},
            "timeout_s": 300,
        }
        admitted = admit(parse_request(document), ModelRegistry.load([RUNTIME_MANIFESTS]), here=settings)
        return evaluate(admitted, store=store, settings=settings, emit=lambda event: None)
    finally:
        store.close()
