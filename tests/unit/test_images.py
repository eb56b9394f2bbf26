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


def _host_built(checkout: Path, pins: str) -> image_contexts.HostBuild:
    """The host build that the llamacpp pins file of `checkout`, rewritten to `pins`, declares."""
    (checkout / "ops" / "images" / "llamacpp.requirements.txt").write_text(pins)
    build = image_contexts.host_build("llamacpp", checkout)
    assert build is not None
    return build


def _wheel(directory: Path, name: str) -> Path:
    """A file named as a wheel: what `check_host_wheels` reads of one is its name."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip archive
    return path


def test_the_llamacpp_deps_context_installs_the_wheel_built_on_the_host_and_never_builds_it(
    tmp_path: Path, checkout: Path
) -> None:
    pins = (REPO / "ops" / "images" / "llamacpp.requirements.txt").read_text()
    # Given the llamacpp pins, which have llama-cpp-python built on the host with CMake flags
    build = image_contexts.host_build("llamacpp")
    assert build is not None and build.requirements == (f"llama-cpp-python=={pinned_version('llamacpp')}",)
    assert "-DGGML_NATIVE=OFF" in build.env["CMAKE_ARGS"]
    # When its deps context is assembled
    context = assemble_deps_context("llamacpp", tmp_path / "deps", checkout=checkout)
    # Then it has an empty folder for the wheel, and its copy of the pins ends with the options that
    # install llama-cpp-python from there and from no source distribution
    assert context.wheels.is_dir() and not list(context.wheels.iterdir())
    copied = (context.path / "build" / "requirements" / "llamacpp.requirements.txt").read_text()
    assert copied.startswith(pins)
    assert copied.splitlines()[-2:] == ["--find-links /tmp/build/wheels", "--only-binary llama-cpp-python"]
    # ... and the checkout's pins are unchanged (`mlscope env create llamacpp` reads them)
    assert (checkout / "ops" / "images" / "llamacpp.requirements.txt").read_text() == pins
    # When the wheel is in the context, the inputs are the same: the pins and flags say what it is
    _wheel(context.wheels, "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl")
    assert image_contexts._hash_tree(context.path, exclude=("build/ca", "build/wheels")) == context.inputs
    # ... but other CMake flags are other inputs
    _host_built(checkout, pins.replace("-DGGML_NATIVE=OFF", "-DGGML_NATIVE=ON"))
    other = assemble_deps_context("llamacpp", tmp_path / "deps2", checkout=checkout)
    assert other.inputs != context.inputs
    # And a framework whose pins build nothing on the host has its pins copied as they are, and no
    # wheels folder: its deps image's inputs are what they were before host builds existed
    plain = assemble_deps_context("onnxruntime", tmp_path / "plain", checkout=checkout)
    assert image_contexts.host_build("onnxruntime", checkout) is None and not plain.wheels.exists()
    assert (plain.path / "build" / "requirements" / "onnxruntime.requirements.txt").read_bytes() == (
        REPO / "ops" / "images" / "onnxruntime.requirements.txt"
    ).read_bytes()


def test_the_wheel_built_on_the_host_is_found_or_refused_in_one_line(tmp_path: Path, checkout: Path) -> None:
    pins = "# built on the host: llama-cpp-python\nllama_cpp_python==0.3.36\nnumpy==2.4.6\n"
    build = _host_built(checkout, pins)
    wheels = tmp_path / "wheels"
    wheels.mkdir()

    def refusal(build: image_contexts.HostBuild) -> str:
        with pytest.raises(UserError) as refused:
            image_contexts.check_host_wheels(wheels, build)
        message = str(refused.value)
        assert len(message.splitlines()) == 1 and "llamacpp.requirements.txt" in message, message
        return message

    # When no wheel was built, or only one of another version: refused, naming the pin
    assert "no wheel of llama-cpp-python==0.3.36" in refusal(build)
    _wheel(wheels, "llama_cpp_python-0.3.35-py3-none-linux_x86_64.whl")
    assert "no wheel of llama-cpp-python==0.3.36" in refusal(build)
    # When the pinned version's py3 wheel is there (llama-cpp-python's: ctypes, any Python 3): found
    found = _wheel(wheels, "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl")
    assert image_contexts.check_host_wheels(wheels, build) == [found]
    # When it is a CPython 3.12 wheel and the image runs Python 3.11: refused, naming both
    found.unlink()
    _wheel(wheels, "llama_cpp_python-0.3.36-cp312-cp312-linux_x86_64.whl")
    pinned = _host_built(checkout, "# python: 3.11\n" + pins)
    assert pinned.python == "3.11"
    message = refusal(pinned)
    assert "cp312" in message and "Python 3.11" in message
    # ... and, the pins naming no Python for the image, a wheel for one CPython version is refused too
    assert "name no Python" in refusal(build)
    # When it is the image's CPython: found
    cp311 = _wheel(wheels, "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl")
    (wheels / "llama_cpp_python-0.3.36-cp312-cp312-linux_x86_64.whl").unlink()
    assert image_contexts.check_host_wheels(wheels, pinned) == [cp311]


def test_a_host_build_of_an_unpinned_distribution_is_refused(checkout: Path) -> None:
    (checkout / "ops" / "images" / "llamacpp.requirements.txt").write_text(
        "# built on the host: llama-cpp-python, gguf\nllama_cpp_python==0.3.36\n"
    )
    with pytest.raises(UserError) as refused:
        image_contexts.host_build("llamacpp", checkout)
    assert str(refused.value) == (
        "ops/images/llamacpp.requirements.txt builds gguf on the host but pins no version of it"
    )


def test_pip_builds_the_host_wheel_with_the_pins_environment(tmp_path: Path, checkout: Path) -> None:
    """pip for real, offline: the environment the pins set (here PIP_NO_INDEX and PIP_FIND_LINKS; for
    llama.cpp CMAKE_ARGS) is the one pip runs in."""
    # Given a wheelhouse with one small pure-Python wheel, built offline here
    package = tmp_path / "tinypkg"
    (package / "tinypkg").mkdir(parents=True)
    (package / "tinypkg" / "__init__.py").write_text("")
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tinypkg"\nversion = "1.0"\n'
    )
    house = tmp_path / "house"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--wheel-dir", str(house), str(package)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    # And pins that have it built on the host, reaching the wheelhouse only through their environment
    pins = (
        "# built on the host: tinypkg\n# host build env: PIP_NO_INDEX=1\n"
        f"# host build env: PIP_FIND_LINKS={house}\n"
    )
    build = _host_built(checkout, pins + "tinypkg==1.0\n")
    assert build.env == {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house)}
    # When its wheel is built into a context's wheels folder
    lines: list[str] = []
    wheels = images.build_host_wheels(build, tmp_path / "context" / "wheels", log=lines.append)
    # Then it is there, and the log said what was built
    assert [w.name for w in wheels] == ["tinypkg-1.0-py3-none-any.whl"] and wheels[0].is_file()
    assert lines[0].startswith("building on the host: tinypkg==1.0")
    # And a pin pip cannot find fails as a build, with pip's last lines
    missing = _host_built(checkout, pins + "tinypkg==2.0\n")
    with pytest.raises(images.ImageBuildError) as failed:
        images.build_host_wheels(missing, tmp_path / "context2" / "wheels")
    assert "pip wheel tinypkg==2.0 failed" in str(failed.value)
    assert any("tinypkg==2.0" in line for line in failed.value.tail)


def test_jobs_builds_images_side_by_side_and_a_failure_stops_no_other(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mlscope image build --jobs 2`'s scheduling, with the engine's build replaced by a function
    that logs a step and waits for the other build to be under way too (a barrier: it times out
    unless two builds run at once). The real builds take minutes each; `make docker` runs them with
    --jobs 2 (ops/ci/images.sh)."""
    import threading
    from types import SimpleNamespace

    from mlscope.cli.image import build_command

    both_running = threading.Barrier(2, timeout=30)

    def fake_build(name: str, **kwargs: object) -> object:
        kwargs["log"](f"Step 1/16 : ARG BASE={name}")  # type: ignore[operator]
        both_running.wait()
        if name == "litert":
            raise images.ImageBuildError(f"the {name} build failed", ["pip: no space left"])
        return SimpleNamespace(
            name=f"mlscope-predictor-{name}:x", short_id="abc", framework_version="1", size=1e6
        )

    monkeypatch.setattr(images, "build_image", fake_build)
    monkeypatch.setattr(images, "docker_client", lambda: None)
    # Given two frameworks built two at a time, one of whose builds fails
    code = build_command(
        ["onnxruntime", "litert"], base=None, ca_bundle=None, network=None, rebuild=False, jobs=2
    )
    out, err = capsys.readouterr()
    # Then both ran at once (the barrier let them through), the command exits 1 naming the failed one,
    # the other is built, and each progress line names its framework
    assert code == 1
    assert "image onnxruntime: mlscope-predictor-onnxruntime:x abc built in" in out
    assert "image litert: the litert build failed; the build's last lines:" in err
    assert "  | pip: no space left" in err and "1 image build(s) failed: litert" in err
    assert "  onnxruntime: Step 1/16 : ARG BASE=onnxruntime" in err.splitlines()
    assert "  litert: Step 1/16 : ARG BASE=litert" in err.splitlines()
