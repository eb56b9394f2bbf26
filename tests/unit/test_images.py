"""Predictor images without an engine: names, pins, the build context and its inputs hash, the
Dockerfiles' shape, and the one-line errors when the Docker SDK or engine is missing."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mlscope
from mlscope.contract.errors import UserError
from mlscope.workers import images
from mlscope.workers.images import (
    BUILT_BY_DEFAULT,
    assemble_context,
    docker_frameworks,
    image_name,
    pinned_version,
    source_checkout,
)
from tests.conftest import REPO

CA_MARKER = (
    "-----BEGIN CERTIFICATE-----\nmlscope-test-ca-in-the-build-context-only\n-----END CERTIFICATE-----\n"
)


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _package_folders() -> list[str]:
    """The package's folders an image is built from: mlscope itself, and each part beneath the
    predictor runtime and the runtime (what `python -m mlscope.runtime.execute` imports)."""
    return ["mlscope", *(f"mlscope/{part}" for part in ("contract", "runtime"))]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the parts of the checkout an image is built from, to change without touching the repo."""
    copy = tmp_path / "checkout"
    copy.mkdir()
    shutil.copy2(REPO / "pyproject.toml", copy / "pyproject.toml")
    shutil.copy2(REPO / "README.md", copy / "README.md")
    shutil.copytree(REPO / "ops" / "images", copy / "ops" / "images")
    shutil.copytree(REPO / "mlscope", copy / "mlscope", ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_image_name_is_the_framework_and_mlscope_version() -> None:
    assert image_name("onnxruntime") == f"mlscope-predictor-onnxruntime:{mlscope.__version__}"
    with pytest.raises(UserError, match="unknown framework 'nosuchfw'"):
        image_name("nosuchfw")


def test_the_checkout_is_found_from_the_package_and_has_the_default_images() -> None:
    assert source_checkout() == REPO
    buildable = docker_frameworks()
    assert set(BUILT_BY_DEFAULT) <= set(buildable)
    assert "pytorch" in buildable  # written, built only when asked for
    assert "pytorch" not in BUILT_BY_DEFAULT


def test_pins_are_exact_and_name_the_framework_version(checkout: Path) -> None:
    # Given every requirements file under ops/images/: each line is a comment or name==version,
    # perhaps with an environment marker
    for path in sorted((REPO / "ops" / "images").glob("*.requirements.txt")):
        for line in path.read_text().splitlines():
            entry = line.split("#", 1)[0].strip()
            assert not entry or re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+!-]+(;.+)?", entry), line
    # ... every image's pins name its framework's version
    for framework in docker_frameworks():
        assert pinned_version(framework), framework
    # When a pin is written with another spelling of the distribution (tensorflow_cpu)
    pins = checkout / "ops" / "images" / "tensorflow.requirements.txt"
    pins.write_text(re.sub(r"(?m)^tensorflow-cpu==.*$", "Tensorflow_CPU==9.8.7  # pinned", pins.read_text()))
    # Then it is still the framework's version
    assert pinned_version("tensorflow", checkout) == "9.8.7"
    (checkout / "ops" / "images" / "mxnet.requirements.txt").unlink()
    assert pinned_version("mxnet", checkout) is None


def test_the_runtime_pins_agree_with_each_frameworks_pins() -> None:
    def pins(path: Path) -> dict[str, set[str]]:
        """name -> the versions pinned for it (one per environment marker)."""
        found: dict[str, set[str]] = {}
        for line in path.read_text().splitlines():
            name, sep, version = line.split("#", 1)[0].split(";", 1)[0].strip().partition("==")
            if sep:
                found.setdefault(name.lower(), set()).add(version)
        return found

    runtime = pins(REPO / "ops" / "images" / "runtime.requirements.txt")
    assert runtime and "numpy" not in runtime  # each framework picks its numpy
    for framework in docker_frameworks():
        own = pins(REPO / "ops" / "images" / f"{framework}.requirements.txt")
        clashes = {name for name in runtime.keys() & own.keys() if not own[name] <= runtime[name]}
        assert not clashes, (framework, clashes)


def test_the_context_holds_the_dockerfile_pins_source_and_ca_only_in_build_ca(
    tmp_path: Path, checkout: Path
) -> None:
    # Given a CA bundle outside the checkout
    ca = tmp_path / "proxy-ca.pem"
    ca.write_text(CA_MARKER)
    before = _files(checkout)
    # When the onnxruntime context is assembled with and without it
    with_ca = assemble_context("onnxruntime", tmp_path / "with-ca", ca_bundle=ca, checkout=checkout)
    without = assemble_context("onnxruntime", tmp_path / "without", checkout=checkout)
    # Then the context has the Dockerfile, both pins files and the source the package is built from
    files = _files(with_ca.path)
    assert with_ca.dockerfile == "onnxruntime.Dockerfile" and with_ca.dockerfile in files
    assert {
        "build/requirements/runtime.requirements.txt",
        "build/requirements/onnxruntime.requirements.txt",
    } <= files
    assert "build/src/pyproject.toml" in files
    for folder in _package_folders():
        assert f"build/src/{folder}/__init__.py" in files, folder
    # ... and none of the parts the predictor never imports (api, cli, store, workers, ...)
    assert not [f for f in files if f.startswith(("build/src/mlscope/api/", "build/src/mlscope/cli/"))]
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)
    assert not any("tensorflow.requirements" in f for f in files)  # another framework's pins
    # ... the CA bundle sits in build/ca/ of the temporary context only, and is not an input
    assert with_ca.ca_name and (with_ca.path / "build" / "ca" / with_ca.ca_name).read_text() == CA_MARKER
    assert [f for f in files if f.startswith("build/ca/")] == [f"build/ca/{with_ca.ca_name}"]
    assert without.ca_name is None and not list((without.path / "build" / "ca").iterdir())
    assert with_ca.inputs == without.inputs
    # ... and nothing was written into the checkout
    assert _files(checkout) == before


def test_no_ca_bundle_is_in_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not [f for f in tracked if f.endswith((".crt", ".pem")) or "/build-ca" in f]
    ignored = (REPO / ".dockerignore").read_text().split()
    assert "*.crt" in ignored and "*.pem" in ignored


def test_the_inputs_hash_follows_what_the_image_is_built_from(tmp_path: Path, checkout: Path) -> None:
    def inputs(name: str) -> str:
        return assemble_context("onnxruntime", tmp_path / name, checkout=checkout).inputs

    first = inputs("first")
    assert inputs("again") == first  # deterministic
    # When only the README, byte-code, the project's dependencies or a part the predictor never
    # imports changes, the image would be the same: same hash
    (checkout / "README.md").write_text("rewritten\n")
    (checkout / "pyproject.toml").write_text((checkout / "pyproject.toml").read_text() + "\n# edited\n")
    (checkout / "mlscope" / "api" / "app.py").write_text(
        (checkout / "mlscope" / "api" / "app.py").read_text() + "\n"
    )
    cache = checkout / "mlscope" / "runtime" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "stray.cpython-311.pyc").write_bytes(b"\0")
    assert inputs("readme") == first
    # When the Dockerfile changes: another hash
    dockerfile = checkout / "ops" / "images" / "onnxruntime.Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "# changed\n")
    after_dockerfile = inputs("dockerfile")
    assert after_dockerfile != first
    # ... and again when the pins or the mlscope source change
    runtime = checkout / "ops" / "images" / "runtime.requirements.txt"
    runtime.write_text(runtime.read_text() + "six==1.17.0\n")
    after_pins = inputs("pins")
    assert after_pins != after_dockerfile
    (checkout / "mlscope" / "runtime" / "execute.py").write_text(
        (checkout / "mlscope" / "runtime" / "execute.py").read_text() + "\n"
    )
    assert inputs("source") != after_pins


def test_a_framework_without_a_dockerfile_is_refused(tmp_path: Path, checkout: Path) -> None:
    (checkout / "ops" / "images" / "mxnet.Dockerfile").unlink()
    with pytest.raises(UserError, match=r"no predictor image for 'mxnet'.*: .*onnxruntime"):
        assemble_context("mxnet", tmp_path / "context", checkout=checkout)
    assert "mxnet" not in docker_frameworks(checkout)
    (checkout / "ops" / "images" / "runtime.requirements.txt").unlink()
    with pytest.raises(UserError, match=r"runtime\.requirements\.txt is missing"):
        assemble_context("onnxruntime", tmp_path / "context2", checkout=checkout)


@pytest.mark.parametrize("framework", docker_frameworks())
def test_each_dockerfile_has_a_base_argument_and_keeps_the_ca_in_the_build_stage(framework: str) -> None:
    text = (REPO / "ops" / "images" / f"{framework}.Dockerfile").read_text()
    instructions = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    assert re.fullmatch(r"ARG BASE=python:3\.\d+-slim", instructions[0])  # a public Python image
    stages = [i for i, line in enumerate(instructions) if line.startswith("FROM ")]
    assert [instructions[i] for i in stages] == ["FROM ${BASE} AS build", "FROM ${BASE}"]
    final = "\n".join(instructions[stages[1] :])
    # The final stage takes only the venv from the build stage (no CA bundle, no build context), in
    # its last step: every step after it would copy the venv once more under vfs
    assert re.findall(r"^(COPY|ADD|RUN)\b.*", final, re.M) == ["COPY"]
    assert instructions[-1] == "COPY --from=build /opt/mlscope /opt/mlscope"
    assert re.search(rf"^LABEL .*\borg\.mlscope\.framework={framework}\b", final, re.M)
    assert "CA_BUNDLE" not in final and "build/" not in final
    assert not [line for line in instructions if line.startswith(("ENTRYPOINT", "CMD"))]
    assert re.search(r"^USER \d+", final, re.M)  # not root


def test_a_missing_docker_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK is installed here: its absence is simulated by hiding the module."""
    monkeypatch.setitem(sys.modules, "docker", None)
    with pytest.raises(UserError, match=r"pip install 'mlscope\[docker\]'"):
        images.docker_client()


def test_no_engine_is_one_line_naming_docker_host(tmp_path: Path, mlscope_env: dict[str, str]) -> None:
    # Given DOCKER_HOST naming a socket nothing listens on (a real, failing connection)
    env = {**mlscope_env, "DOCKER_HOST": f"unix://{tmp_path / 'no-engine.sock'}"}
    for args in (["image", "build", "onnxruntime"], ["image", "list"]):
        # When the image commands run
        done = subprocess.run(
            [sys.executable, "-m", "mlscope", *args], env=env, capture_output=True, text=True, timeout=60
        )
        # Then they exit 2 with one line naming DOCKER_HOST and how to start an engine
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "no Docker engine answers" in lines[0] and "DOCKER_HOST" in lines[0]
        assert "no-engine.sock" in lines[0] and "ops/ci/docker.sh" in lines[0]
