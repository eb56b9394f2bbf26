"""Predictor images: their names, finding them on the Docker engine, and building them.

One image per framework, `mlscope-predictor-<framework>:<mlscope version>`, built from
`ops/images/<framework>.Dockerfile` of the source checkout. It holds the framework (pinned by
`ops/images/<framework>.requirements.txt`) and mlscope's predictor runtime only. Its labels say
which framework and version it carries and a hash of everything it was built from, so a build
whose inputs have not changed is skipped.

The framework's dependencies are an image of their own, `mlscope-predictor-<framework>-deps:<hash>`
(`ops/images/deps.Dockerfile`, one file for every framework), named by the hash of what it is
built from: the deps Dockerfile, the two pins files and the base image. The predictor image builds
on it and only installs mlscope's source, offline, so an edit to the predictor runtime rebuilds no
framework from the index; a change of pins or base makes a new deps image, and the old one goes.
What each is built from, and its inputs hash, is `mlscope.workers.image_contexts`'s. A source
distribution the base image cannot build (it has no compiler: llama-cpp-python) is built on the host,
into the deps image's build context, when its pins say so (`image_contexts.host_build`).

The Docker SDK is imported only when an engine is needed; nothing here imports Celery, Flask or a
database.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlscope
from mlscope.contract.errors import MlscopeError, UserError
from mlscope.runtime.frameworks import FRAMEWORKS, get_framework
from mlscope.workers import envs
from mlscope.workers.envs import file_lock
from mlscope.workers.image_contexts import (
    BuildContext,
    HostBuild,
    assemble_context,
    assemble_deps_context,
    check_host_wheels,
    deps_inputs,
    host_build,
    image_inputs,
    pinned_version,
    source_checkout,
)

__all__ = [
    "BUILT_BY_DEFAULT",
    "LABEL_DEPS",
    "LABEL_DEPS_OF",
    "LABEL_FRAMEWORK",
    "LABEL_INPUTS",
    "LABEL_VERSION",
    "ImageBuildError",
    "ImageInfo",
    "build_host_wheels",
    "build_image",
    "deps_image_name",
    "docker_client",
    "image_for",
    "image_name",
    "list_images",
]

LABEL_FRAMEWORK = "org.mlscope.framework"
LABEL_VERSION = "org.mlscope.framework.version"
LABEL_INPUTS = "org.mlscope.inputs"
# A deps image names its framework under a label of its own, so the predictor images' lookups
# (`list_images`, by LABEL_FRAMEWORK) never take it for a predictor image.
LABEL_DEPS_OF = "org.mlscope.deps-of"
# A predictor image names the deps image it was built on.
LABEL_DEPS = "org.mlscope.deps"

# Built when `mlscope image build` names none: each framework says whether its image builds from
# PyPI in reasonable time and space (`FrameworkSpec.image_by_default`).
BUILT_BY_DEFAULT = tuple(name for name, spec in FRAMEWORKS.items() if spec.image_by_default)

_IMAGE_PREFIX = "mlscope-predictor-"
_DEPS_SUFFIX = "-deps"
# The deps image's tag: this many hex digits of its inputs hash (the label holds all of it).
_DEPS_TAG_DIGITS = 16
# Each build request may wait this long for the engine's next output line: pip prints nothing while
# it downloads a large wheel with the progress bar off.
_BUILD_READ_TIMEOUT_S = 3600
_LOG_TAIL_LINES = 30
_INTERMEDIATE_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12,64})$")
_BUILT_IMAGE = re.compile(r"^Successfully built ([0-9a-f]{12,64})$")

Log = Callable[[str], None]


class ImageBuildError(MlscopeError):
    """The engine failed to build an image (not the user's mistake: the CLI exits 1).

    Attributes:
        tail: the last lines of the build's output, which usually say why.
    """

    def __init__(self, message: str, tail: list[str]) -> None:
        super().__init__(message)
        self.tail = tail


@dataclass(frozen=True)
class ImageInfo:
    """A predictor image the engine has.

    Attributes:
        name: `repository:tag`.
        id: the image id (`sha256:...`).
        framework: the framework it carries (label).
        framework_version: the pinned framework version (label).
        inputs: the hash of what it was built from (label).
        created: when it was built, as the engine says (ISO 8601).
        size: its size in bytes, base image included.
    """

    name: str
    id: str
    framework: str
    framework_version: str | None
    inputs: str | None
    created: str
    size: int

    @property
    def short_id(self) -> str:
        """The 12 hex digits `docker images` shows."""
        return self.id.removeprefix("sha256:")[:12]

    @classmethod
    def from_image(cls, name: str, image: Any) -> ImageInfo:
        """From a `docker.models.images.Image` tagged `name`."""
        labels = image.labels or {}
        return cls(
            name=name,
            id=image.id,
            framework=labels.get(LABEL_FRAMEWORK, ""),
            framework_version=labels.get(LABEL_VERSION) or None,
            inputs=labels.get(LABEL_INPUTS) or None,
            created=image.attrs.get("Created", ""),
            size=int(image.attrs.get("Size") or 0),
        )


def image_name(framework: str) -> str:
    """The name of the predictor image of `framework` for this version of mlscope.

    Raises:
        UserError: no framework of that name is registered.
    """
    return f"{_IMAGE_PREFIX}{get_framework(framework).name}:{mlscope.__version__}"


def deps_image_name(framework: str, inputs: str) -> str:
    """The name of the deps image of `framework` whose inputs hash is `inputs` (`deps_inputs`)."""
    return f"{_deps_repository(framework)}:{inputs[:_DEPS_TAG_DIGITS]}"


def _deps_repository(framework: str) -> str:
    return f"{_IMAGE_PREFIX}{get_framework(framework).name}{_DEPS_SUFFIX}"


def docker_client(timeout_s: float = 60) -> Any:
    """A Docker SDK client of the engine DOCKER_HOST names (default: the local socket), checked to
    answer.

    Raises:
        UserError: the Docker SDK is not installed, or no engine answers.
    """
    try:
        import docker
    except ImportError as exc:
        raise UserError("the Docker SDK for Python is missing: pip install 'mlscope[docker]'") from exc
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
    except docker.errors.DockerException as exc:
        raise UserError(
            f"no Docker engine answers at {where} (DOCKER_HOST): {exc}; start one (as root: "
            f"`bash ops/ci/docker.sh` starts dockerd) or point DOCKER_HOST at one"
        ) from exc
    return client


def image_for(framework: str, client: Any = None) -> ImageInfo | None:
    """The engine's image of `framework` for this mlscope version, or None when it has none.

    Raises:
        UserError: unknown framework, no Docker SDK, or no engine (when `client` is not given).
    """
    name = image_name(framework)
    client = client or docker_client()
    from docker.errors import ImageNotFound

    try:
        return ImageInfo.from_image(name, client.images.get(name))
    except ImageNotFound:
        return None


def list_images(client: Any = None) -> list[ImageInfo]:
    """Every predictor image the engine has (any mlscope version), by name.

    Raises:
        UserError: no Docker SDK, or no engine (when `client` is not given).
    """
    client = client or docker_client()
    found = []
    for image in client.images.list(filters={"label": LABEL_FRAMEWORK}):
        found += [ImageInfo.from_image(tag, image) for tag in image.tags if tag.startswith(_IMAGE_PREFIX)]
    return sorted(found, key=lambda info: info.name)


def _base_reference(client: Any, base: str | None) -> str:
    """What the inputs hash knows of the base: its name, and its id when the engine has it (a
    re-imported base is a new base)."""
    if base is None:
        return "the Dockerfile's default"
    from docker.errors import ImageNotFound

    try:
        return f"{base}@{client.images.get(base).id}"
    except ImageNotFound:
        return base


def _remove_untagged(client: Any, image_ids: list[str], keep: str | None) -> None:
    """Remove the images of `image_ids` that nothing tags and nothing builds on: the build stage
    (with the CA bundle) and a replaced image. vfs holds a full filesystem copy per layer."""
    from docker.errors import APIError, ImageNotFound

    for image_id in reversed(image_ids):
        try:
            image = client.images.get(image_id)
            if image.tags or (keep and image.id == keep):
                continue
            # Not forced: an image with children (the final image's own layers) or a container
            # using it stays.
            client.images.remove(image.id, noprune=False)
        except (ImageNotFound, APIError):
            continue


def build_image(
    framework: str,
    *,
    base: str | None = None,
    ca_bundle: str | Path | None = None,
    network: str | None = None,
    rebuild: bool = False,
    log: Log = lambda line: None,
    checkout: Path | None = None,
) -> ImageInfo:
    """Build the predictor image of `framework`, unless one of the same inputs exists, on its deps
    image, which is built first unless one of the same inputs exists.

    Args:
        framework: a framework with a Dockerfile under ops/images/.
        base: the base image (build argument BASE); None keeps the Dockerfile's default.
        ca_bundle: a CA bundle pip must trust inside the build (a TLS-intercepting proxy); it goes
            into the deps image's temporary build context and build stage only.
        network: the deps build's network mode, e.g. "host" where pip reaches the index only so.
            The predictor image's build has no network: it installs from its context only.
        rebuild: build both images even when images with the same inputs exist.
        log: called with each line of the build's output, and with one line saying whether the
            deps image is up to date or being built (only when the predictor image is built).
        checkout: the source checkout to build from (default: the one mlscope runs from).

    Returns:
        The image, built or found up to date.

    Raises:
        UserError: unknown framework, a framework that cannot run anywhere, no Dockerfile, no
            source checkout, no CA bundle at that path, no Docker SDK or no engine; a wheel built
            on the host missing or for another Python than the image's (`check_host_wheels`).
        ImageBuildError: a build failed (an image's, or pip's of a wheel built on the host); its
            `tail` holds the last output lines.
    """
    spec = get_framework(framework)
    if spec.unavailable:
        raise UserError(f"{spec.display} has no image: {spec.unavailable}")
    ca_path = Path(ca_bundle) if ca_bundle is not None else None
    if ca_path is not None and not ca_path.is_file():
        raise UserError(f"CA bundle {ca_path}: no such file")
    checkout = checkout or source_checkout()
    client = docker_client()
    name = image_name(framework)
    lock = Path(tempfile.gettempdir()) / f"mlscope-image-build-{framework}.lock"
    with file_lock(lock), tempfile.TemporaryDirectory(prefix="mlscope-image-") as scratch:
        deps_context = assemble_deps_context(
            framework, Path(scratch) / "deps", ca_bundle=ca_path, checkout=checkout
        )
        context = assemble_context(framework, Path(scratch) / "image", checkout=checkout)
        deps_hash = deps_inputs(deps_context, _base_reference(client, base))
        inputs = image_inputs(context, deps_hash)
        existing = image_for(framework, client)
        if existing is not None and existing.inputs == inputs and not rebuild:
            log(f"{name} is up to date ({existing.short_id})")
            return existing
        deps = _deps_image(
            client,
            framework,
            deps_context,
            deps_hash,
            base=base,
            network=network,
            rebuild=rebuild,
            log=log,
            host=host_build(framework, checkout),
        )
        # The Dockerfiles turn these into labels in one LABEL step before their last COPY (labels
        # the SDK adds become one step each after it: a full filesystem copy each under vfs).
        build_args = {
            "DEPS": deps,
            "MLSCOPE_VERSION": mlscope.__version__,
            "MLSCOPE_FRAMEWORK_VERSION": pinned_version(framework, checkout) or "",
            "MLSCOPE_INPUTS": inputs,
            "MLSCOPE_BASE": base or "",
            "MLSCOPE_DEPS": deps,
        }
        if base:
            build_args["BASE"] = base
        built_id, intermediates = _run_build(
            client, context, name, build_args=build_args, network="none", log=log
        )
    replaced = [existing.id] if existing is not None and existing.id != built_id else []
    _remove_untagged(client, intermediates + replaced, keep=built_id)
    image = image_for(framework, client)
    if image is None:  # pragma: no cover - the engine reported success
        raise ImageBuildError(f"the build reported success but {name} is missing", [])
    return image


def _deps_image(
    client: Any,
    framework: str,
    context: BuildContext,
    inputs: str,
    *,
    base: str | None,
    network: str | None,
    rebuild: bool,
    log: Log,
    host: HostBuild | None = None,
) -> str:
    """The name of `framework`'s deps image of `inputs`, built unless the engine has it (or
    `rebuild`), after the wheels its pins have built on the host (`host`) are put into its context.
    A new one replaces the framework's other deps images: they are removed, unless a container uses
    one."""
    from docker.errors import ImageNotFound

    name = deps_image_name(framework, inputs)
    try:
        existing = client.images.get(name)
    except ImageNotFound:
        existing = None
    if existing is not None and (existing.labels or {}).get(LABEL_INPUTS) == inputs and not rebuild:
        log(f"deps image {name} is up to date ({existing.id.removeprefix('sha256:')[:12]})")
        return name
    if host is not None:
        build_host_wheels(host, context.wheels, log=log)
    log(f"building deps image {name}")
    build_args = {"FRAMEWORK": framework, "MLSCOPE_INPUTS": inputs}
    if base:
        build_args["BASE"] = base
    if context.ca_name:
        build_args["CA_BUNDLE"] = context.ca_name
    built_id, intermediates = _run_build(
        client, context, name, build_args=build_args, network=network, log=log
    )
    replaced = [existing.id] if existing is not None and existing.id != built_id else []
    _remove_untagged(client, intermediates + replaced, keep=built_id)
    _remove_other_deps(client, framework, keep=name)
    return name


def build_host_wheels(build: HostBuild, directory: Path, *, log: Log = lambda line: None) -> list[Path]:
    """Build the wheels of the distributions `build` names into `directory`: `pip wheel --no-deps`
    of each pinned version with the pins' build environment (CMAKE_ARGS), by the Python the pins name
    (`envs.base_interpreter`). pip's own wheel cache, keyed by the distribution's download link and
    the interpreter (not by the environment), serves a wheel an environment of the same pins built
    before: no compile then.

    Raises:
        UserError: no Python of the pins' version here, or a wheel missing or for another Python
            afterwards (`check_host_wheels`, one line).
        ImageBuildError: pip failed (no compiler, no index); its `tail` holds pip's last lines.
    """
    python = envs.base_interpreter(envs.PinsFiles(build.pins, build.pins))
    directory.mkdir(parents=True, exist_ok=True)
    command = [
        python, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "--progress-bar", "off",
        "--wheel-dir", str(directory), *build.requirements,
    ]  # fmt: skip
    log(f"building on the host: {' '.join(build.requirements)} ({python} -m pip wheel)")
    code, tail = envs.run_streamed(command, log, build.env, _LOG_TAIL_LINES)
    if code != 0:
        raise ImageBuildError(
            f"pip wheel {' '.join(build.requirements)} failed on the host with exit code {code}", tail
        )
    return check_host_wheels(directory, build)


def _remove_other_deps(client: Any, framework: str, keep: str) -> None:
    """Untag every deps image of `framework` but `keep`; the engine removes an image with its last
    tag unless a container or another image builds on it."""
    from docker.errors import APIError, ImageNotFound

    repository = _deps_repository(framework)
    for image in client.images.list(name=repository):
        for tag in image.tags:
            if tag.startswith(f"{repository}:") and tag != keep:
                try:
                    client.images.remove(tag, noprune=False)
                except (ImageNotFound, APIError):
                    continue


def _run_build(
    client: Any,
    context: BuildContext,
    name: str,
    *,
    build_args: dict[str, str],
    network: str | None,
    log: Log,
) -> tuple[str, list[str]]:
    """Run one build, streaming its output to `log`. Returns the image id and the intermediate
    images it made; on failure removes those and raises ImageBuildError."""
    from docker.errors import APIError

    client.api.timeout = _BUILD_READ_TIMEOUT_S
    tail: deque[str] = deque(maxlen=_LOG_TAIL_LINES)
    intermediates: list[str] = []
    built_id = None
    error = None
    try:
        stream = client.api.build(
            path=str(context.path),
            dockerfile=context.dockerfile,
            tag=name,
            buildargs=build_args,
            network_mode=network,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
        )
        for chunk in stream:
            for line in str(chunk.get("stream", "")).splitlines():
                tail.append(line)
                log(line)
                match = _INTERMEDIATE_IMAGE.match(line)
                if match:
                    intermediates.append(match.group(1))
                built = _BUILT_IMAGE.match(line)
                if built and built_id is None:
                    built_id = built.group(1)
            if "aux" in chunk and isinstance(chunk["aux"], dict):
                built_id = chunk["aux"].get("ID", built_id)
            if "error" in chunk:
                error = str(chunk.get("errorDetail", {}).get("message") or chunk["error"]).strip()
                tail.append(error)
                log(error)
    except APIError as exc:
        error = f"the engine refused the build: {exc.explanation or exc}"
        tail.append(error)
    if error is not None or built_id is None:
        _remove_untagged(client, intermediates, keep=None)
        raise ImageBuildError(f"building {name} failed: {error or 'no image id reported'}", list(tail))
    return built_id, intermediates
