"""The docker runner: each job runs in a fresh container of its framework's predictor image.

It owns a container's whole life: what goes in (the job as `job.json` in an io directory, the model
cache mounted read-only), the lockdown and the limits (mlscope.workers.runners.container: no
network, never root, a read-only root filesystem, no capabilities; CPUs, memory, processes, GPUs by
device request), what comes out (events on the container's stdout, the final result or error in
`result.json`), and its end: the container is removed whatever happens, also on a timeout, a crash
or Ctrl-C. The image a result was measured in is recorded with it. What a container cannot make for
itself is made on the host first: an ONNX graph exported from a PyTorch source needs torch, which
the ONNX Runtime image does not carry, so the host exports it into the cache the container mounts.

The Docker SDK for Python (`pip install 'mlscope[docker]'`) is imported only when a runner talks to
the engine.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import json
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any, ClassVar

from mlscope.contract.errors import UserError
from mlscope.contract.events import Emit, FinalEvent
from mlscope.contract.job import Job
from mlscope.contract.manifest import parse_manifest
from mlscope.contract.settings import Settings
from mlscope.runtime.frameworks import FrameworkSpec, get_framework
from mlscope.runtime.predictors.base import PredictorError, PredictorOptions
from mlscope.workers.runners.base import RunLimits, Runner, RunOutcome, ended_by, final_outcome
from mlscope.workers.runners.container import (
    CONTAINER_CACHE,
    CONTAINER_IO,
    EVALUATION_LABEL,
    container_options,
    container_user,
    docker_sdk,
)
from mlscope.workers.runners.process import ProcessRunner

__all__ = ["CONTAINER_CACHE", "CONTAINER_IO", "EVALUATION_LABEL", "DockerRunner", "container_options"]

_POLL_S = 0.1
_LOG_LINES = 40
_READER_JOIN_S = 5.0
_REMOVE_ATTEMPTS = 3


def _engine_errors() -> tuple[type[BaseException], ...]:
    """What a call to an absent or failing engine raises (the SDK wraps most, not all, in its own)."""
    import requests

    return (docker_sdk().errors.DockerException, requests.exceptions.RequestException)


def _images() -> Any:
    # Imported late: it talks to the engine, which only a docker runner needs.
    from mlscope.workers import images

    return images


def _describe_exit(code: int) -> str:
    """Docker reports a process killed by signal N as exit code 128 + N."""
    if code > 128:
        try:
            return f"code {code} ({signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"code {code}"


def _job_inside(job: Job, cache_dir: Path) -> Job:
    """The job as the container sees it: the cache (and a dataset materialised in it) at its mount
    point and, with one GPU passed through, that GPU as the container's first. No model store: the
    container's shared memory is its own, so a store there would be shared with nobody."""
    device = "cuda:0" if job.device.startswith("cuda") else job.device
    dataset = dict(job.dataset)
    if dataset:
        inside = Path(dataset["path"]).resolve().relative_to(cache_dir.resolve())
        dataset["path"] = str(PurePosixPath(CONTAINER_CACHE, *inside.parts))
    return dataclasses.replace(job, cache_dir=CONTAINER_CACHE, device=device, dataset=dataset, model_store={})


class _ChunkReader(io.RawIOBase):
    """A readable stream over the engine's log chunks, which split lines anywhere; wrapped in a
    TextIOWrapper it yields whole lines, as the process runner's readers expect of a pipe."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def _lines(chunks: Iterator[bytes]) -> IO[str]:
    return io.TextIOWrapper(io.BufferedReader(_ChunkReader(chunks)), encoding="utf-8", errors="replace")


class DockerRunner(Runner):
    """Runs each job in a new container of `image_name(framework)`; see the module's docstring."""

    NAME: ClassVar[str] = "docker"

    def __init__(
        self,
        cache_dir: Path | None = None,
        *,
        cpus: float | None = None,
        memory_mb: int | None = None,
        pids_limit: int | None = None,
    ) -> None:
        """
        Args:
            cache_dir: the host's model cache, used when a job names none.
            cpus: CPUs each container may use; None: all.
            memory_mb: each container's memory limit in MB when a request sets none; None: no limit.
            pids_limit: processes (threads included) each container may hold; None: no limit.
        """
        self.cache_dir = cache_dir if cache_dir is not None else Settings().cache_dir
        self.cpus = cpus
        self.memory_mb = memory_mb
        self.pids_limit = pids_limit

    @classmethod
    def from_settings(cls, settings: Settings | None) -> DockerRunner:
        """The runner with the settings' cache directory and limits: MLSCOPE_DOCKER_CPUS,
        MLSCOPE_DOCKER_PIDS_LIMIT, and MLSCOPE_DOCKER_MEMORY_MB, else MLSCOPE_PREDICTOR_MEMORY_MB
        (the limit of every runner's predictors: a container-specific one is the more deliberate)."""
        settings = settings if settings is not None else Settings()
        memory_mb = settings.docker_memory_mb
        if memory_mb is None:
            memory_mb = settings.predictor_memory_mb or None
        return cls(
            settings.cache_dir,
            cpus=settings.docker_cpus,
            memory_mb=memory_mb,
            pids_limit=settings.docker_pids_limit or None,
        )

    def _image(self, framework: str, client: Any = None) -> tuple[Any, str | None]:
        """The framework's image (an images.ImageInfo) or None, and why it is None.

        Args:
            client: the engine's client; None: one made (and closed) for this question.
        """
        images = _images()
        try:
            if client is not None:
                found = images.image_for(framework, client)
            else:
                with contextlib.closing(images.docker_client()) as own_client:
                    found = images.image_for(framework, own_client)
        except UserError as exc:  # no Docker SDK, or no engine answers
            return None, str(exc)
        except _engine_errors() as exc:
            return None, f"the Docker engine failed: {exc}"
        if found is None:
            return None, f"it is not built; build it with `mlscope image build {framework}`"
        return found, None

    def framework_version(self, spec: FrameworkSpec) -> str | None:
        """The framework version the image's label records ("unknown" without the label); None
        without an image or an engine."""
        found, _ = self._image(spec.name)
        return None if found is None else str(found.framework_version or "unknown")

    def where(self, spec: FrameworkSpec) -> str:
        """ "in image <name>", and why that image cannot be used when it cannot."""
        name = _images().image_name(spec.name)
        _, missing = self._image(spec.name)
        return f"in image {name}" if missing is None else f"in image {name} ({missing})"

    def _run(self, job: Job, emit: Emit, limits: RunLimits) -> RunOutcome:
        timeout_s, memory_limit_mb, cancel = limits
        deadline = time.monotonic() + timeout_s
        try:
            client = _images().docker_client()
        except UserError as exc:
            return _failed("DockerUnavailable", str(exc), "import")
        with contextlib.closing(client):
            image, missing = self._image(job.framework, client)
            if image is None:
                name = _images().image_name(job.framework)
                return _failed("ImageMissing", f"no image {name} for {job.framework}: {missing}", "import")
            cache_dir = Path(job.cache_dir) if job.cache_dir else self.cache_dir
            try:
                read_only_files = _prefetch(job, cache_dir, deadline)
            except PredictorError as exc:
                return _failed("PredictorError", str(exc), "fetch")
            except subprocess.TimeoutExpired:
                return _failed(
                    "Timeout", f"the evaluation exceeded its time limit of {timeout_s:g} s", "fetch"
                )
            io_dir = Path(tempfile.mkdtemp(prefix="mlscope-io-"))
            try:
                options = container_options(
                    job,
                    image=image.name,
                    io_dir=io_dir,
                    cache_dir=cache_dir,
                    cpus=self.cpus,
                    memory_mb=memory_limit_mb if memory_limit_mb is not None else self.memory_mb,
                    read_only_files=read_only_files,
                    pids_limit=self.pids_limit,
                    user=container_user(),
                    # The runner ends it at timeout_s; this is the orphan's limit, past that.
                    lifetime_s=timeout_s + 60,
                )
                inside = _job_inside(job, cache_dir)
                outcome = self._contain(client, options, inside, io_dir, emit, deadline, timeout_s, cancel)
            finally:
                shutil.rmtree(io_dir, ignore_errors=True)
            if outcome.result is not None:
                outcome.result.setdefault("framework", {})["image"] = _image_record(client, image)
            return outcome

    def _contain(
        self,
        client: Any,
        options: dict[str, Any],
        job: Job,
        io_dir: Path,
        emit: Emit,
        deadline: float,
        timeout_s: float,
        cancel: threading.Event | None,
    ) -> RunOutcome:
        """Run the job (as the container sees it) in a container made from `options`, which is
        removed whatever happens."""
        # The container runs as another uid when the worker is root (and user-namespace remapping can
        # map any uid elsewhere): whoever it is must be able to read the job and write the result.
        io_dir.chmod(0o777)
        (io_dir / "job.json").write_text(json.dumps(job.to_dict()))
        (io_dir / "job.json").chmod(0o644)
        container = None
        try:
            container = client.containers.create(**options)
            return self._watch(container, io_dir, emit, deadline, timeout_s, options.get("mem_limit"), cancel)
        except _engine_errors() as exc:
            return _failed("DockerError", f"the Docker engine refused the job: {exc}", "import")
        finally:
            # Ctrl-C and SIGTERM land here too: no container may outlive its job.
            if container is not None:
                _remove(container)

    def _watch(
        self,
        container: Any,
        io_dir: Path,
        emit: Emit,
        deadline: float,
        timeout_s: float,
        mem_limit: str | None,
        cancel: threading.Event | None,
    ) -> RunOutcome:
        """Start the container, relay its events, end it at the time limit or on cancel, and read
        how it ended."""
        log: collections.deque[str] = collections.deque(maxlen=_LOG_LINES)
        events: list[FinalEvent] = []
        state = {"phase": "import"}
        exited = threading.Event()
        container.start()
        streams = [
            container.logs(stdout=True, stderr=False, stream=True, follow=True),
            container.logs(stdout=False, stderr=True, stream=True, follow=True),
        ]
        readers = [
            threading.Thread(
                target=_guarded(ProcessRunner._read_events),
                args=(_lines(streams[0]), emit, events, state),
                daemon=True,
            ),
            threading.Thread(
                target=_guarded(ProcessRunner._read_log), args=(_lines(streams[1]), log), daemon=True
            ),
            threading.Thread(target=_guarded(_wait), args=(container, exited), daemon=True),
        ]
        for reader in readers:
            reader.start()
        ended: dict[str, str] | None = None
        while not exited.wait(_POLL_S):
            if cancel is not None and cancel.is_set():
                ended = {"type": "Cancelled", "message": "the evaluation was cancelled while it ran"}
            elif time.monotonic() > deadline:
                ended = {
                    "type": "Timeout",
                    "message": f"the evaluation exceeded its time limit of {timeout_s:g} s",
                }
            if ended is not None:
                _kill(container)
                exited.wait(_READER_JOIN_S)
                break
        for reader in readers:
            reader.join(timeout=_READER_JOIN_S)
        for stream in streams:
            stream.close()
        tail = "".join(log)
        phase = state["phase"]
        if ended is not None:
            return ended_by(ended, phase, tail)
        reported = final_outcome(_read_final(io_dir / "result.json"), tail)
        if reported is not None:
            return reported
        container.reload()
        exit_state = container.attrs.get("State", {})
        if exit_state.get("OOMKilled"):
            limit = mem_limit.removesuffix("m") if mem_limit else "?"
            message = f"the predictor container was killed at its memory limit of {limit} MB"
            return RunOutcome(error={"type": "OutOfMemory", "message": message, "phase": phase}, log=tail)
        code = int(exit_state.get("ExitCode", -1))
        message = f"the predictor container exited with {_describe_exit(code)} without a result"
        last = tail.strip().splitlines()[-1:] if tail.strip() else []
        if last:
            message += f"; it last wrote: {last[0][:300]}"
        return RunOutcome(error={"type": "PredictorCrashed", "message": message, "phase": phase}, log=tail)


def _image_record(client: Any, image: Any) -> dict[str, str]:
    """The image a result was measured in: name, id and digest (a registry digest where the
    image came from a registry, else its id, which names its content just as well)."""
    digests = client.images.get(image.id).attrs.get("RepoDigests") or []
    return {"name": image.name, "id": image.id, "digest": digests[0] if digests else image.id}


def _failed(type_: str, message: str, phase: str) -> RunOutcome:
    return RunOutcome(error={"type": type_, "message": message, "phase": phase})


def _prefetch(job: Job, cache_dir: Path, deadline: float) -> tuple[Path, ...]:
    """Make on the host what the container cannot (it has no network and maybe no exporter), by the
    framework's hook: returns and raises as `FrameworkSpec.prefetch_on_host` (the time limit is what
    is left of the job's)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    _open_to_other_users(cache_dir)
    return get_framework(job.framework).prefetch_on_host(
        parse_manifest(job.manifest, origin=job.origin),
        PredictorOptions.from_dict(job.options),
        cache_dir,
        timeout_s=max(deadline - time.monotonic(), 0.1),
    )


def _open_to_other_users(cache_dir: Path) -> None:
    """Let any user list and read the cache directory itself (its files are written readable to all
    already): a root worker's containers run as nobody, and a cache made 0700 (by a tool, or a test's
    temporary directory) would hide every model from them. Its parents do not matter to a bind mount."""
    mode = cache_dir.stat().st_mode
    if mode & 0o005 != 0o005:
        with contextlib.suppress(OSError):  # not its owner: the container says what it cannot read
            cache_dir.chmod(mode | 0o005)


def _read_final(path: Path) -> FinalEvent | None:
    """The final event the predictor wrote (result.json), or None: it died before writing it."""
    try:
        final: FinalEvent = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return final


def _wait(container: Any, exited: threading.Event) -> None:
    try:
        container.wait()
    finally:
        exited.set()


def _kill(container: Any) -> None:
    try:
        container.kill()
    except _engine_errors():
        pass  # it ended meanwhile


def _remove(container: Any) -> None:
    """Remove the container, killing it if it still runs; retried, since the engine can be briefly
    busy with the container it is stopping."""
    docker = docker_sdk()
    for attempt in range(_REMOVE_ATTEMPTS):
        try:
            container.remove(force=True)
            return
        except docker.errors.NotFound:
            return
        except _engine_errors():
            if attempt == _REMOVE_ATTEMPTS - 1:
                raise
            time.sleep(0.5)


def _guarded(target: Any) -> Any:
    """A reader thread's target that ends quietly when the container's stream breaks (the container
    was removed under it): what it read so far is all there is."""

    broken: tuple[type[BaseException], ...] = (*_engine_errors(), OSError, ValueError)

    def run(*args: Any) -> None:
        try:
            target(*args)
        except broken:
            return

    return run
