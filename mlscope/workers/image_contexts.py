"""What a predictor image and its deps image are built from: the source checkout's ops/images/
(Dockerfiles, pins), the build contexts laid out from it, and the hashes of their inputs that decide
whether an image on the engine is up to date (`mlscope.workers.images` names, finds and builds the
images). Nothing here talks to a Docker engine.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from mlscope.contract.errors import UserError
from mlscope.runtime.frameworks import get_framework
from mlscope.workers import envs

__all__ = [
    "BuildContext",
    "HostBuild",
    "assemble_context",
    "assemble_deps_context",
    "check_host_wheels",
    "deps_inputs",
    "docker_frameworks",
    "host_build",
    "image_inputs",
    "pinned_version",
    "source_checkout",
]

_RUNTIME_REQUIREMENTS = "runtime.requirements.txt"
_DEPS_DOCKERFILE = "deps.Dockerfile"
# Inside the build contexts; the Dockerfiles COPY `build/` as one layer (vfs copies every layer).
_CONTEXT_REQUIREMENTS = "build/requirements"
_CONTEXT_SOURCE = "build/src"
_CONTEXT_CA = "build/ca"
_CONTEXT_WHEELS = "build/wheels"
# Where deps.Dockerfile's build stage finds the context's build/wheels/ (its `COPY build/ /tmp/build/`).
_CONTAINER_WHEELS = "/tmp/build/wheels"
# The pins file's lines that say what is built on the host (a source distribution the base image,
# which has no compiler, cannot build) and with what environment.
_HOST_BUILT = re.compile(r"^#\s*built on the host:\s*(\S.*?)\s*$", re.MULTILINE)
_HOST_BUILD_ENV = re.compile(r"^#\s*host build env:\s*([A-Za-z_][A-Za-z0-9_]*)=(.*?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class BuildContext:
    """A temporary build context made by `assemble_context`.

    Attributes:
        path: the directory sent to the engine.
        dockerfile: the Dockerfile's name inside it.
        inputs: the hash of the files in it (the deps context: the deps Dockerfile and the two pins
            files; the image's: its Dockerfile and the mlscope source), the CA bundle excepted: it
            only lets pip through a proxy.
        ca_name: the CA bundle's file name under `build/ca/`, or None.
    """

    path: Path
    dockerfile: str
    inputs: str
    ca_name: str | None

    @property
    def wheels(self) -> Path:
        """Where a deps context holds the wheels built on the host (`host_build`)."""
        return self.path / _CONTEXT_WHEELS


def source_checkout() -> Path:
    """The mlscope source checkout this installation runs from (an editable install of it).

    Raises:
        UserError: mlscope is installed from a wheel, without its source and ops/images/.
    """
    checkout = envs.source_checkout()
    if checkout is None:
        raise UserError(
            "predictor images are built from a source checkout of mlscope (pyproject.toml and "
            "ops/images/); this installation is not one: clone the repository and install it with "
            "`pip install -e .`"
        )
    return checkout


def _images_dir(checkout: Path | None) -> Path:
    return (checkout or source_checkout()) / "ops" / "images"


def docker_frameworks(checkout: Path | None = None) -> list[str]:
    """The frameworks that have a Dockerfile under ops/images/, sorted (deps.Dockerfile is every
    framework's, no framework's own)."""
    return sorted(
        p.name.removesuffix(".Dockerfile")
        for p in _images_dir(checkout).glob("*.Dockerfile")
        if p.name != _DEPS_DOCKERFILE
    )


def _canonical(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _pins(path: Path) -> dict[str, str]:
    """A pins file's `name==version` lines, by canonical name."""
    pins = {}
    for line in path.read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[_canonical(name.strip())] = version.strip()
    return pins


def pinned_version(framework: str, checkout: Path | None = None) -> str | None:
    """The framework version `ops/images/<framework>.requirements.txt` pins, or None."""
    path = _images_dir(checkout) / f"{framework}.requirements.txt"
    if not path.is_file():
        return None
    wanted = [_canonical(d) for d in get_framework(framework).distributions]
    pins = _pins(path)
    return next((pins[d] for d in wanted if d in pins), None)


@dataclass(frozen=True)
class HostBuild:
    """The distributions a pins file has built on the host into its deps image's build context.

    A line `# built on the host: NAME[, NAME...]` names them: source distributions that the base
    image, which has no compiler, cannot build (llama-cpp-python compiles llama.cpp). `mlscope image
    build` makes their wheels on the host with `pip wheel --no-deps` (pip's wheel cache makes that
    quick once an environment has built them) into the context's build/wheels/, and the deps image
    installs them from there, offline. Lines `# host build env: NAME=value` set pip's environment
    for that build (CMAKE_ARGS). A wheel for one CPython version (a `cpXY` tag) needs the line
    `# python: X.Y` naming the image's Python; a `py3` wheel (llama-cpp-python's: ctypes, no
    extension module) runs on any.

    Attributes:
        pins: the pins file.
        requirements: `name==version` of each, as the file pins it.
        env: the build's environment variables.
        python: the image's Python, X.Y, when the pins name one.
    """

    pins: Path
    requirements: tuple[str, ...]
    env: dict[str, str]
    python: str | None


def host_build(framework: str, checkout: Path | None = None) -> HostBuild | None:
    """What `ops/images/<framework>.requirements.txt` has built on the host, or None (nothing).

    Raises:
        UserError: a distribution it names is not pinned there.
    """
    path = _images_dir(checkout) / f"{framework}.requirements.txt"
    if not path.is_file():
        return None
    text = path.read_text()
    names = [name.strip() for line in _HOST_BUILT.findall(text) for name in line.split(",") if name.strip()]
    if not names:
        return None
    pins = _pins(path)
    unpinned = [name for name in names if _canonical(name) not in pins]
    if unpinned:
        raise UserError(
            f"ops/images/{path.name} builds {', '.join(unpinned)} on the host but pins no version of it"
        )
    return HostBuild(
        pins=path,
        requirements=tuple(f"{name}=={pins[_canonical(name)]}" for name in names),
        env=dict(_HOST_BUILD_ENV.findall(text)),
        python=envs.pinned_python(envs.PinsFiles(path, path)),
    )


def _wheel_tags(wheel: Path) -> tuple[str, str, set[str]] | None:
    """(canonical name, version, Python tags) of a wheel file, from its name; None for another file."""
    parts = wheel.name.removesuffix(".whl").split("-")
    if not wheel.name.endswith(".whl") or len(parts) not in (5, 6):
        return None
    return _canonical(parts[0]), parts[1], set(parts[-3].split("."))


def check_host_wheels(directory: Path, build: HostBuild) -> list[Path]:
    """The wheels in `directory` of each distribution `build` names, at its pinned version, each
    for the image's Python: a `py3` wheel, or, where the pins name the image's Python X.Y, one
    tagged `cpXY` or `pyXY`.

    Raises:
        UserError: one line: a distribution without a wheel there, or a wheel for another Python
            (or for one CPython version when the pins name none).
    """
    fitting = {"py3"}
    if build.python is not None:
        version = "".join(build.python.split(".")[:2])
        fitting |= {f"cp{version}", f"py{version}"}
    wheels = []
    for requirement in build.requirements:
        name, _, version = requirement.partition("==")
        found = [
            (path, tags[2])
            for path in sorted(directory.glob("*.whl"))
            if (tags := _wheel_tags(path)) is not None and tags[:2] == (_canonical(name), version)
        ]
        if not found:
            raise UserError(
                f"ops/images/{build.pins.name}: no wheel of {requirement} was built on the host "
                f"(none in {directory})"
            )
        for wheel, python_tags in found:
            if not python_tags & fitting:
                image = (
                    f"the image runs Python {build.python} (`# python: {build.python}`)"
                    if build.python is not None
                    else "the pins name no Python for the image (`# python: X.Y`)"
                )
                raise UserError(
                    f"ops/images/{build.pins.name}: the wheel built on the host, {wheel.name}, is for "
                    f"{'.'.join(sorted(python_tags))}, but {image}"
                )
            wheels.append(wheel)
    return wheels


# The parts of mlscope a predictor image holds: what `python -m mlscope.runtime.execute` imports (the
# runtime and the contract beneath it; lint-imports keeps them from importing anything above). Only
# they and this stand-in pyproject are inputs of the image, so an edit to the api, the CLI, the store
# or the project's dependencies rebuilds no image. The deps image's venv has setuptools, so pip
# builds this without build isolation, offline.
_IMAGE_PARTS = ("contract", "runtime")
_IMAGE_PYPROJECT = """\
# The predictor runtime's part of mlscope (made by mlscope.workers.image_contexts; not the project's own).
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "mlscope"
dynamic = ["version"]
description = "mlscope's predictor runtime"
requires-python = ">=3.10"

[tool.setuptools.dynamic]
version = { attr = "mlscope.__version__" }

[tool.setuptools.packages.find]
include = ["mlscope*"]

[tool.setuptools.package-data]
"mlscope" = ["py.typed"]
"""


def _copy_source(checkout: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    (dest / "pyproject.toml").write_text(_IMAGE_PYPROJECT)
    package, copy = checkout / "mlscope", dest / "mlscope"
    copy.mkdir()
    for name in ("__init__.py", "py.typed"):
        shutil.copy2(package / name, copy / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for part in _IMAGE_PARTS:
        shutil.copytree(package / part, copy / part, ignore=ignore)


def _hash_tree(root: Path, *, exclude: tuple[str, ...]) -> str:
    """sha256 over every file's relative path and bytes, in path order; the folders `exclude` names
    are skipped."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(tuple(folder + "/" for folder in exclude)):
            continue
        digest.update(relative.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _require(path: Path, message: str) -> Path:
    if not path.is_file():
        raise UserError(message)
    return path


def _dockerfile_of(framework: str, images: Path, checkout: Path) -> Path:
    return _require(
        images / f"{framework}.Dockerfile",
        f"no predictor image for '{framework}': ops/images/ has Dockerfiles for "
        f"{', '.join(docker_frameworks(checkout)) or 'no framework'}",
    )


def assemble_deps_context(
    framework: str, dest: Path, *, ca_bundle: Path | None = None, checkout: Path | None = None
) -> BuildContext:
    """Lay out the build context of `framework`'s deps image in the empty or missing directory
    `dest`: deps.Dockerfile, the runtime and framework requirements, and the CA bundle when one is
    given (under build/ca/, for pip in the build stage only).

    Where the framework's pins have distributions built on the host (`host_build`), the context has
    an empty build/wheels/ for them (`mlscope.workers.images` builds them there when the deps image
    is to be built), and its copy of the pins file ends with the pip options that install them from
    there and never from source: deps.Dockerfile stays every framework's, unchanged. The wheels are
    not inputs: the pins and their build lines are, and they say what is built.

    Raises:
        UserError: no Dockerfile, deps Dockerfile or requirements for `framework`, no source
            checkout, or a distribution built on the host that the pins do not pin.
    """
    checkout = checkout or source_checkout()
    images = _images_dir(checkout)
    _dockerfile_of(framework, images, checkout)
    dockerfile = _require(
        images / _DEPS_DOCKERFILE, f"ops/images/{_DEPS_DOCKERFILE} is missing: every image needs it"
    )
    requirements = [
        _require(images / name, f"ops/images/{name} is missing: the image of '{framework}' needs it")
        for name in (_RUNTIME_REQUIREMENTS, f"{framework}.requirements.txt")
    ]
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(dockerfile, dest / dockerfile.name)
    (dest / _CONTEXT_REQUIREMENTS).mkdir(parents=True)
    for path in requirements:
        shutil.copy2(path, dest / _CONTEXT_REQUIREMENTS / path.name)
    build = host_build(framework, checkout)
    if build is not None:
        (dest / _CONTEXT_WHEELS).mkdir(parents=True)
        # pip takes these options inside a requirements file (deps.Dockerfile installs it with -r).
        names = " ".join(r.partition("==")[0] for r in build.requirements)
        with (dest / _CONTEXT_REQUIREMENTS / build.pins.name).open("a") as pins:
            pins.write(
                "\n# Added by `mlscope image build`: the wheels it built on the host, never a build here.\n"
                f"--find-links {_CONTAINER_WHEELS}\n"
                f"--only-binary {names}\n"
            )
    (dest / _CONTEXT_CA).mkdir(parents=True)
    ca_name = None
    if ca_bundle is not None:
        ca_name = "build-ca.crt"
        shutil.copyfile(ca_bundle, dest / _CONTEXT_CA / ca_name)
    inputs = _hash_tree(dest, exclude=(_CONTEXT_CA, _CONTEXT_WHEELS))
    return BuildContext(dest, dockerfile.name, inputs, ca_name)


def assemble_context(framework: str, dest: Path, *, checkout: Path | None = None) -> BuildContext:
    """Lay out the build context of `framework`'s image in the empty or missing directory `dest`:
    the Dockerfile and a copy of the mlscope source. No CA bundle: the image installs the source
    from the context, offline, onto its deps image.

    Raises:
        UserError: no Dockerfile for `framework`, or no source checkout.
    """
    checkout = checkout or source_checkout()
    dockerfile = _dockerfile_of(framework, _images_dir(checkout), checkout)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(dockerfile, dest / dockerfile.name)
    _copy_source(checkout, dest / _CONTEXT_SOURCE)
    return BuildContext(dest, dockerfile.name, _hash_tree(dest, exclude=(_CONTEXT_CA,)), None)


def _sha256(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def deps_inputs(deps_context: BuildContext, base_reference: str) -> str:
    """The inputs hash of a deps image: its context's (deps Dockerfile and pins) and the base's
    reference (`_base_reference`). Its first digits tag the image (`deps_image_name`)."""
    return _sha256("deps", deps_context.inputs, base_reference)


def image_inputs(context: BuildContext, deps_hash: str) -> str:
    """The inputs hash of a predictor image: its context's (Dockerfile and mlscope source) and its
    deps image's (`deps_inputs`), so a change of pins or base rebuilds both images and a change
    of source the predictor image only."""
    return _sha256("image", context.inputs, deps_hash)
