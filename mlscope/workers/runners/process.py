"""The process runner: the predictor runs in a child process of its own.

A crash (a segfault in a framework), a hang past the time limit, or memory past the limit ends the
child's whole process group and becomes a failed evaluation naming the phase it happened in; the
caller lives on. A fresh process per job also makes `import_ms` a real cold import.

The child runs in this Python when the job's framework is installed here, else in the framework's
environment (`mlscope env create <framework>`, see mlscope.workers.envs), which holds the framework,
the predictor runtime and this same mlscope source. A job that asks for a number of threads starts
its child with OMP_NUM_THREADS set to it: frameworks that read their OpenMP threads only when they
load (MXNet) get the request that way, and the others set their own count on top of it.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

import psutil

from mlscope.contract.errors import UserError
from mlscope.contract.events import Emit, FinalEvent
from mlscope.contract.job import Job
from mlscope.contract.settings import Settings
from mlscope.runtime.frameworks import FrameworkSpec, get_framework, installed_version
from mlscope.workers.envs import EnvInfo, env_for, find_pins
from mlscope.workers.runners import prestart
from mlscope.workers.runners.base import RunLimits, Runner, RunOutcome, ended_by, final_outcome

__all__ = ["ProcessRunner"]

_POLL_S = 0.1
_LOG_LINES = 40


def _tree_rss(process: psutil.Process) -> int:
    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            continue
    return total


def _describe_exit(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (killed: out of memory?)" if -code == signal.SIGKILL else ""
        return f"the predictor process died of {name}{hint}"
    return f"the predictor process exited with code {code} without a result"


@dataclass(frozen=True)
class _Limit:
    """A memory limit and whose it is, for the message that ends a predictor over it."""

    mb: int
    source: str


class ProcessRunner(Runner):
    NAME: ClassVar[str] = "process"

    def __init__(
        self, python: str | None = None, cache_dir: Path | None = None, *, memory_mb: int | None = None
    ) -> None:
        """Args:
        python: run every job in this interpreter; default: per framework (see the module).
        cache_dir: where framework environments are looked for; default: the settings' default.
        memory_mb: the predictor's resident-memory limit in MB when a request sets none; None: none.
        """
        self.python = python
        self.cache_dir = Path(cache_dir) if cache_dir is not None else Settings().cache_dir
        self.memory_mb = memory_mb

    @classmethod
    def from_settings(cls, settings: Settings | None) -> ProcessRunner:
        """The runner with the settings' cache directory and MLSCOPE_PREDICTOR_MEMORY_MB."""
        settings = settings if settings is not None else Settings()
        return cls(cache_dir=settings.cache_dir, memory_mb=settings.predictor_memory_mb or None)

    def _environment(self, spec: FrameworkSpec) -> EnvInfo | None:
        """The framework's environment, when the framework is not installed in this Python."""
        if self.python is not None or installed_version(spec) is not None:
            return None
        return env_for(spec.name, self.cache_dir)

    def framework_version(self, spec: FrameworkSpec) -> str | None:
        """The version installed in this Python, else the one in the framework's environment."""
        if self.python is not None:
            return super().framework_version(spec)
        found = installed_version(spec)
        if found is not None:
            return found
        environment = env_for(spec.name, self.cache_dir)
        return environment.version if environment is not None else None

    def where(self, spec: FrameworkSpec) -> str:
        if self.python is not None or installed_version(spec) is not None:
            return "here"
        environment = env_for(spec.name, self.cache_dir)
        if environment is not None:
            return f"in environment {environment.directory}"
        try:
            find_pins(spec.name)
        except UserError:  # no environment can be made for it: only this Python counts
            return "here"
        return f"here or in a framework environment under {self.cache_dir / 'envs'}"

    def python_for(self, framework: str) -> str:
        """The interpreter a job of `framework` runs in: the one given, this one when the framework is
        installed here, else its environment's (this one when there is none: the job then fails in
        its import phase naming what to install)."""
        if self.python is not None:
            return self.python
        environment = self._environment(get_framework(framework))
        return str(environment.python) if environment is not None else sys.executable

    def key(self, framework: str, options: Mapping[str, Any]) -> prestart.Key:
        """What a predictor process for a job of `framework` with these options must have been
        started with: the job's interpreter (`python_for`) and thread count."""
        threads = options.get("threads")
        return prestart.Key(self.python_for(framework), framework, int(threads) if threads else None)

    def _run(self, job: Job, emit: Emit, limits: RunLimits) -> RunOutcome:
        timeout_s, memory_limit_mb, cancel = limits
        key = self.key(job.framework, job.options)
        document = json.dumps(job.to_dict())
        # Given this job already, or started ahead for it, the process has imported its framework
        # (prestart.py); a job given ahead was unwatched until now, the time limit counts from here.
        child = prestart.claim(key, job.evaluation_id, document)
        given = child is not None
        if child is None:
            child = prestart.take(key) or prestart.spawn(key.python, None, key.threads)
        assert child.stdout and child.stderr
        log: collections.deque[str] = collections.deque(maxlen=_LOG_LINES)
        events: list[FinalEvent] = []
        state = {"phase": "import"}
        readers = [
            threading.Thread(target=self._read_events, args=(child.stdout, emit, events, state), daemon=True),
            threading.Thread(target=self._read_log, args=(child.stderr, log), daemon=True),
        ]
        for reader in readers:
            reader.start()
        if not given and child.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                child.stdin.write(document + "\n")
        prestart.go(child)

        limit = _Limit(memory_limit_mb, "set by the request") if memory_limit_mb is not None else None
        if limit is None and self.memory_mb is not None:
            limit = _Limit(self.memory_mb, "the default: setting predictor_memory_mb")
        try:
            ended = self._supervise(child, timeout_s, limit, cancel)
        except BaseException:
            # Interrupted (Ctrl-C, SIGTERM): the child is in a session of its own and would not
            # hear of it, so it is ended here rather than left running.
            self._kill(child)
            raise
        # The next planned job's process imports while this job's result is stored.
        prestart.after_run()
        for reader in readers:
            reader.join(timeout=5)
        tail = "".join(log)
        phase = state["phase"]
        if ended is not None:
            return ended_by(ended, phase, tail)
        reported = final_outcome(events[-1] if events else None, tail)
        if reported is not None:
            return reported
        message = _describe_exit(child.returncode)
        last = tail.strip().splitlines()[-1:] if tail.strip() else []
        if last:
            message += f"; it last wrote: {last[0][:300]}"
        return RunOutcome(error={"type": "PredictorCrashed", "message": message, "phase": phase}, log=tail)

    def _supervise(
        self,
        child: subprocess.Popen[str],
        timeout_s: float,
        memory_limit: _Limit | None,
        cancel: threading.Event | None,
    ) -> dict[str, str] | None:
        """Wait for the child; end it past the time or memory limit, or when cancelled, and say which."""
        deadline = time.monotonic() + timeout_s
        watched = psutil.Process(child.pid)
        limit = memory_limit.mb * 1024 * 1024 if memory_limit else None
        while child.poll() is None:
            if cancel is not None and cancel.is_set():
                self._kill(child)
                return {"type": "Cancelled", "message": "the evaluation was cancelled while it ran"}
            if time.monotonic() > deadline:
                self._kill(child)
                return {
                    "type": "Timeout",
                    "message": f"the evaluation exceeded its time limit of {timeout_s:g} s",
                }
            if memory_limit is not None and limit is not None:
                rss = _tree_rss(watched)
                if rss > limit:
                    self._kill(child)
                    used = f"{rss / 2**20:.0f} MB"
                    return {
                        "type": "OutOfMemory",
                        "message": f"the predictor used {used}, over its memory limit of "
                        f"{memory_limit.mb} MB ({memory_limit.source})",
                    }
            try:
                child.wait(timeout=_POLL_S)
            except subprocess.TimeoutExpired:
                continue
        return None

    @staticmethod
    def _kill(child: subprocess.Popen[str]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()

    @staticmethod
    def _read_events(stream: IO[str], emit: Emit, events: list[FinalEvent], state: dict[str, str]) -> None:
        for line in stream:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") in ("result", "error"):
                events.append(event)
                continue
            if event.get("event") == "phase":
                state["phase"] = event["phase"]
            emit(event)

    @staticmethod
    def _read_log(stream: IO[str], log: collections.deque[str]) -> None:
        for line in stream:
            log.append(line)
