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
from mlscope.workers import image_contexts, images
from mlscope.workers.image_contexts import (
    assemble_context,
    assemble_deps_context,
    deps_inputs,
    docker_frameworks,
    image_inputs,
    pinned_version,
    source_checkout,
)
from mlscope.workers.images import BUILT_BY_DEFAULT, deps_image_name, image_name
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


def test_the_deps_context_holds_the_pins_and_the_ca_only_in_build_ca(tmp_path: Path, checkout: Path) -> None:
    # Given a CA bundle outside the checkout
    ca = tmp_path / "proxy-ca.pem"
    ca.write_text(CA_MARKER)
    before = _files(checkout)
    # When the onnxruntime deps context is assembled with and without it
    with_ca = assemble_deps_context("onnxruntime", tmp_path / "with-ca", ca_bundle=ca, checkout=checkout)
    without = assemble_deps_context("onnxruntime", tmp_path / "without", checkout=checkout)
    # Then it has the one deps Dockerfile and both pins files, and no source
    files = _files(with_ca.path)
    assert with_ca.dockerfile == "deps.Dockerfile"
    assert files == {
        "deps.Dockerfile",
        "build/requirements/runtime.requirements.txt",
        "build/requirements/onnxruntime.requirements.txt",
        f"build/ca/{with_ca.ca_name}",
    }
    # ... the CA bundle sits in build/ca/ of the temporary context only, and is not an input
    assert with_ca.ca_name and (with_ca.path / "build" / "ca" / with_ca.ca_name).read_text() == CA_MARKER
    assert without.ca_name is None and not list((without.path / "build" / "ca").iterdir())
    assert with_ca.inputs == without.inputs
    # ... and nothing was written into the checkout
    assert _files(checkout) == before


def test_the_image_context_holds_the_dockerfile_and_the_runtime_source_only(
    tmp_path: Path, checkout: Path
) -> None:
    before = _files(checkout)
    # When the onnxruntime image's context is assembled
    context = assemble_context("onnxruntime", tmp_path / "context", checkout=checkout)
    # Then it has the Dockerfile and the source the package is built from
    files = _files(context.path)
    assert context.dockerfile == "onnxruntime.Dockerfile" and context.dockerfile in files
    assert "build/src/pyproject.toml" in files
    for folder in _package_folders():
        assert f"build/src/{folder}/__init__.py" in files, folder
    # ... and none of the parts the predictor never imports (api, cli, store, workers, ...)
    assert not [f for f in files if f.startswith(("build/src/mlscope/api/", "build/src/mlscope/cli/"))]
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)
    # ... no pins (they are the deps image's) and no CA bundle (it installs offline)
    assert not [f for f in files if f.startswith(("build/requirements/", "build/ca/"))]
    assert context.ca_name is None
    assert _files(checkout) == before


def test_no_ca_bundle_is_in_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not [f for f in tracked if f.endswith((".crt", ".pem")) or "/build-ca" in f]
    ignored = (REPO / ".dockerignore").read_text().split()
    assert "*.crt" in ignored and "*.pem" in ignored


def test_the_inputs_hashes_follow_what_each_image_is_built_from(tmp_path: Path, checkout: Path) -> None:
    made = 0

    def hashes(base: str = "mlscope-base:bookworm@sha256:0") -> tuple[str, str]:
        """(the deps image's inputs, the predictor image's inputs) of onnxruntime."""
        nonlocal made
        made += 1
        deps = assemble_deps_context("onnxruntime", tmp_path / f"deps{made}", checkout=checkout)
        image = assemble_context("onnxruntime", tmp_path / f"image{made}", checkout=checkout)
        deps_hash = deps_inputs(deps, base)
        return deps_hash, image_inputs(image, deps_hash)

    first_deps, first = hashes()
    assert hashes() == (first_deps, first)  # deterministic
    assert first_deps != first
    tag = first_deps[:16]
    assert deps_image_name("onnxruntime", first_deps) == f"mlscope-predictor-onnxruntime-deps:{tag}"
    # When only the README, byte-code, the project's dependencies or a part the predictor never
    # imports changes, the images would be the same: same hashes
    (checkout / "README.md").write_text("rewritten\n")
    (checkout / "pyproject.toml").write_text((checkout / "pyproject.toml").read_text() + "\n# edited\n")
    (checkout / "mlscope" / "api" / "app.py").write_text(
        (checkout / "mlscope" / "api" / "app.py").read_text() + "\n"
    )
    cache = checkout / "mlscope" / "runtime" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "stray.cpython-311.pyc").write_bytes(b"\0")
    # ... nor another framework's files
    (checkout / "ops" / "images" / "tensorflow.requirements.txt").write_text("six==1.17.0\n")
    (checkout / "ops" / "images" / "tensorflow.Dockerfile").write_text("# changed\n")
    assert hashes() == (first_deps, first)
    # When the predictor runtime's source changes: the same deps image, another predictor image
    execute = checkout / "mlscope" / "runtime" / "execute.py"
    execute.write_text(execute.read_text() + "\n")
    source_deps, after_source = hashes()
    assert source_deps == first_deps and after_source != first
    # ... and likewise when the predictor image's Dockerfile changes
    dockerfile = checkout / "ops" / "images" / "onnxruntime.Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "# changed\n")
    dockerfile_deps, after_dockerfile = hashes()
    assert dockerfile_deps == first_deps and after_dockerfile not in (first, after_source)
    # When a pins file, the deps Dockerfile or the base changes: both change
    seen_deps, seen = {first_deps}, {first, after_source, after_dockerfile}
    for path, addition in (
        ("runtime.requirements.txt", "six==1.17.0\n"),
        ("onnxruntime.requirements.txt", "six==1.17.0\n"),
        ("deps.Dockerfile", "# changed\n"),
    ):
        pins = checkout / "ops" / "images" / path
        pins.write_text(pins.read_text() + addition)
        deps_hash, image_hash = hashes()
        assert deps_hash not in seen_deps and image_hash not in seen, path
        seen_deps.add(deps_hash)
        seen.add(image_hash)
    deps_hash, image_hash = hashes(base="mlscope-base:bookworm@sha256:1")
    assert deps_hash not in seen_deps and image_hash not in seen


def test_a_framework_without_a_dockerfile_is_refused(tmp_path: Path, checkout: Path) -> None:
    (checkout / "ops" / "images" / "mxnet.Dockerfile").unlink()
    with pytest.raises(UserError, match=r"no predictor image for 'mxnet'.*: .*onnxruntime"):
        assemble_context("mxnet", tmp_path / "context", checkout=checkout)
    assert "mxnet" not in docker_frameworks(checkout)
    (checkout / "ops" / "images" / "runtime.requirements.txt").unlink()
    with pytest.raises(UserError, match=r"runtime\.requirements\.txt is missing"):
        assemble_deps_context("onnxruntime", tmp_path / "context2", checkout=checkout)
    (checkout / "ops" / "images" / "deps.Dockerfile").unlink()
    with pytest.raises(UserError, match=r"deps\.Dockerfile is missing"):
        assemble_deps_context("onnxruntime", tmp_path / "context3", checkout=checkout)


def _instructions(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith((" ", "#"))]


@pytest.mark.parametrize("framework", docker_frameworks())
def test_each_dockerfile_builds_on_its_deps_image_offline_and_ends_on_the_base(framework: str) -> None:
    instructions = _instructions(REPO / "ops" / "images" / f"{framework}.Dockerfile")
    assert re.fullmatch(r"ARG BASE=python:3\.\d+-slim", instructions[0])  # a public Python image
    assert instructions[1] == "ARG DEPS"  # no default: `mlscope image build` names the deps image
    stages = [i for i, line in enumerate(instructions) if line.startswith("FROM ")]
    assert [instructions[i] for i in stages] == ["FROM ${DEPS} AS build", "FROM ${BASE}"]
    build = "\n".join(instructions[stages[0] : stages[1]])
    text = (REPO / "ops" / "images" / f"{framework}.Dockerfile").read_text()
    # The build stage installs the source only, from the context: no index, no pins, no CA
    assert "--no-index --no-deps --no-build-isolation" in text and "-r " not in text
    assert "CA_BUNDLE" not in text and "PIP_CERT" not in text
    assert re.findall(r"^(COPY|ADD|RUN)\b", build, re.M) == ["COPY", "RUN"]
    final = "\n".join(instructions[stages[1] :])
    # The final stage takes only the venv from the build stage (no build context), in its last
    # step: every step after it would copy the venv once more under vfs
    assert re.findall(r"^(COPY|ADD|RUN)\b.*", final, re.M) == ["COPY"]
    assert instructions[-1] == "COPY --from=build /opt/mlscope /opt/mlscope"
    assert re.search(rf"^LABEL .*\borg\.mlscope\.framework={framework}\b", final, re.M)
    assert "org.mlscope.deps=$MLSCOPE_DEPS" in text
    assert "build/" not in final
    assert not [line for line in instructions if line.startswith(("ENTRYPOINT", "CMD"))]
    assert re.search(r"^USER \d+", final, re.M)  # not root


def test_the_deps_dockerfile_keeps_the_ca_in_its_build_stage() -> None:
    text = (REPO / "ops" / "images" / "deps.Dockerfile").read_text()
    instructions = _instructions(REPO / "ops" / "images" / "deps.Dockerfile")
    assert re.fullmatch(r"ARG BASE=python:3\.\d+-slim", instructions[0])
    stages = [i for i, line in enumerate(instructions) if line.startswith("FROM ")]
    assert [instructions[i] for i in stages] == ["FROM ${BASE} AS build", "FROM ${BASE}"]
    build, final = text.split("\nFROM ${BASE}\n")
    # The build stage installs both pins files and setuptools (the predictor image builds its source
    # without build isolation), trusting the CA bundle when one is given
    assert 'PIP_CERT="/tmp/build/ca/$CA_BUNDLE"' in build
    assert '"$pins/runtime.requirements.txt"' in build and '"$pins/$FRAMEWORK.requirements.txt"' in build
    assert '"setuptools>=77"' in build
    # The final stage is the base and the venv only, labelled as no predictor image
    venv = "COPY --from=build /opt/mlscope /opt/mlscope"
    assert re.findall(r"^((?:COPY|ADD|RUN)\b.*)", final, re.M) == [venv] and instructions[-1] == venv
    assert "CA_BUNDLE" not in final and "build/" not in final.replace("--from=build", "")
    assert re.search(r"^LABEL org\.mlscope\.deps-of=\$FRAMEWORK org\.mlscope\.inputs=", final, re.M)
    assert "org.mlscope.framework" not in final


def test_the_runtimes_stand_in_pyproject_builds_with_the_deps_images_setuptools() -> None:
    """--no-build-isolation uses the venv's setuptools: the deps image installs what the stand-in
    pyproject requires."""
    required = re.search(r'requires = \["setuptools>=(\d+)"\]', image_contexts._IMAGE_PYPROJECT)
    assert required is not None
    assert f'"setuptools>={required.group(1)}"' in (REPO / "ops" / "images" / "deps.Dockerfile").read_text()


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


def test_the_build_progress_shows_the_deps_images_line(capsys: pytest.CaptureFixture[str]) -> None:
    from mlscope.cli.image import _Progress

    # Given the lines a build logs: the deps image's, pip's chatter, a step
    progress = _Progress("onnxruntime", "base mlscope-base:bookworm")
    for line in (
        "deps image mlscope-predictor-onnxruntime-deps:0123456789abcdef is up to date (43d782de5cfe)",
        "Processing /tmp/build/src",
        "Step 1/16 : ARG BASE=python:3.11-slim",
    ):
        progress(line)
    # Then the build is announced once, before the deps image's line, and the chatter is left out
    assert capsys.readouterr().err.splitlines() == [
        "image onnxruntime: building (base mlscope-base:bookworm)",
        "  deps image mlscope-predictor-onnxruntime-deps:0123456789abcdef is up to date (43d782de5cfe)",
        "  Step 1/16 : ARG BASE=python:3.11-slim",
    ]
    assert progress.building
