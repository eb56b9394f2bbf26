"""The ONNX Runtime predictor image on a real Docker engine: built (or found up to date) the way
`make test` builds it, found by `image_for`, listed by `mlscope image list`, and holding the
framework and the predictor runtime but no farm code and no CA bundle.

Needs a Docker engine and the offline base image (ops/ci/docker.sh); without them the tests skip
locally and fail in CI (env CI=true).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.workers.images import (
    ImageInfo,
    build_image,
    docker_client,
    image_for,
    image_name,
    pinned_version,
)
from tests.integration.conftest import _unavailable

pytestmark = pytest.mark.slow

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


@pytest.fixture(scope="module")
def ort_image(client: Any) -> ImageInfo:
    """The ONNX Runtime image, built here unless `make test` already built it (about a minute)."""
    return build_image(
        "onnxruntime",
        base=BASE_IMAGE,
        ca_bundle=CA_BUNDLE if CA_BUNDLE.is_file() else None,
        network="host",
    )


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
    # When a container without network imports the predictor runtime and the framework
    output = client.containers.run(
        ort_image.id, ["python", "-c", PROBE], network_mode="none", remove=True, stderr=False
    )
    seen = json.loads(output.decode().strip().splitlines()[-1])
    # Then the framework is the labelled version and nothing of the farm (or torch) was imported
    assert seen["onnxruntime"] == ort_image.framework_version
    assert seen["farm"] == []
    # ... and the image has no trace of the build context (the CA bundle stayed in the build stage)
    listing = client.containers.run(
        ort_image.id,
        ["sh", "-c", "ls /tmp/build 2>&1; find / -xdev -name 'build-ca*' 2>/dev/null; id -u"],
        network_mode="none",
        remove=True,
    ).decode()
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
