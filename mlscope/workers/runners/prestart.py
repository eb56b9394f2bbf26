"""Predictor processes started ahead of their jobs, so a framework's import overlaps the parent's work.

A short `mlscope run` spends most of its time starting things: the predictor process's interpreter,
its runtime modules and the framework (hundreds of milliseconds), while the parent imports its own,
admits the request and opens the store. A process started here runs `python -m
mlscope.runtime.execute --prepare FRAMEWORK`: it imports the framework at once, timed as a cold
import in a fresh process (which it is), then waits for its job, the first line on its stdin, and
measures once its stdin closes. The process runner takes
it for the next job of that framework, interpreter and thread count (`take`), and starts one as
before when none is waiting.

`plan` names the jobs that follow the one running now: when a predictor process ends, the next
planned one is started (`after_run`), so it imports while the parent stores the last result; never
during a measurement, whose cores it would share. A process nobody took is ended when the command
ends (`discard`, and at exit): it exits by itself too when its stdin closes.

Imports nothing beyond the standard library: the CLI starts a process before its own heavy imports.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
from collections import deque
from typing import NamedTuple

__all__ = [
    "Key",
    "after_run",
    "child_environment",
    "claim",
    "discard",
    "dispatch",
    "enabled",
    "go",
    "plan",
    "spawn",
    "start",
    "take",
    "waiting",
]


class Key(NamedTuple):
    """What a waiting process serves: the interpreter it runs in, the framework it imported (None: none
    yet; a job of any framework takes it and imports its own), and the OpenMP thread count it was
    started with (None: the framework's own)."""

    python: str
    framework: str | None
    threads: int | None


_waiting: dict[Key, subprocess.Popen[str]] = {}
_planned: deque[Key] = deque()
# Evaluation id → the process given its job ahead of its runner: its key, the job's JSON, the process.
_dispatched: dict[str, tuple[Key, str, subprocess.Popen[str]]] = {}


# runtime.execute.PARENT_ENV (not imported: that module imports a predictor's runtime).
PARENT_ENV = "MLSCOPE_PREDICTOR_PARENT"


def child_environment(threads: int | None) -> dict[str, str]:
    """A predictor process's environment: this one's, with OMP_NUM_THREADS set to a job's thread count
    (frameworks that read it only when they load, MXNet, get the request that way), and this process
    named as its parent, so it ends even when this one dies while it still imports."""
    environ = {**os.environ, PARENT_ENV: str(os.getpid())}
    if threads:
        environ["OMP_NUM_THREADS"] = str(int(threads))
    return environ


def spawn(python: str, framework: str | None, threads: int | None) -> subprocess.Popen[str]:
    """A predictor process (`python -m mlscope.runtime.execute`) waiting for its job on stdin; with a
    framework, importing it meanwhile. In a session of its own: ending it ends what it started."""
    command = [python, "-m", "mlscope.runtime.execute"]
    if framework is not None:
        command += ["--prepare", framework]
    return subprocess.Popen(
        command,
        env=child_environment(threads),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def start(key: Key) -> subprocess.Popen[str]:
    """The process waiting for `key`: the one started before, else one started now."""
    current = _waiting.get(key)
    if current is not None and current.poll() is None:
        return current
    _waiting[key] = spawn(key.python, key.framework, key.threads)
    return _waiting[key]


def waiting() -> dict[Key, int]:
    """The processes waiting for a job now: each one's key and process id."""
    return {key: child.pid for key, child in _waiting.items() if child.poll() is None}


def take(key: Key) -> subprocess.Popen[str] | None:
    """The process waiting for `key`, else one of the same interpreter and thread count that imported
    no framework, now the caller's; None when none is (or it died meanwhile)."""
    for candidate in dict.fromkeys((key, key._replace(framework=None))):
        child = _waiting.pop(candidate, None)
        if child is None:
            continue
        if child.poll() is None:
            return child
        _end(child)
    return None


def enabled() -> bool:
    """Whether processes are started ahead here: not where this process has a single core, which the
    predictor's cold-start figures would then share with the parent's work."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) >= 2


def dispatch(key: Key, evaluation_id: str, document: str) -> subprocess.Popen[str]:
    """Give the job `document` (its JSON) to the process waiting for `key` (one started now when none
    is) before the job's runner asks for it: the job's fetch, load and first inference run while its
    caller still opens the store. Its measurement waits for the runner (`go`), so no work of the
    caller's shares its time."""
    child = take(key) or spawn(key.python, None, key.threads)
    assert child.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        child.stdin.write(document + "\n")
        child.stdin.flush()
    _dispatched[evaluation_id] = (key, document, child)
    return child


def go(child: subprocess.Popen[str]) -> None:
    """Let a process given its job measure: the predictor runtime waits for its stdin to close (the
    job is its first line) before its first timed inference."""
    if child.stdin is not None:
        with contextlib.suppress(BrokenPipeError):
            child.stdin.close()


def claim(key: Key, evaluation_id: str, document: str) -> subprocess.Popen[str] | None:
    """The process `dispatch` gave this very job (the same key and document), now the caller's; None
    when there is none. One given another job under this id is ended: it must not run twice."""
    entry = _dispatched.pop(evaluation_id, None)
    if entry is None:
        return None
    given_key, given, child = entry
    if given_key != key or given != document:
        _end(child)
        return None
    return child


def plan(keys: list[Key]) -> None:
    """The jobs that follow the one about to run, in order: each is started when a run ends."""
    _planned.clear()
    _planned.extend(keys)


def after_run() -> None:
    """A predictor process has ended: start the next planned one, if any."""
    if _planned:
        start(_planned.popleft())


def discard() -> None:
    """End every waiting process and forget the plan: the command no longer needs them."""
    _planned.clear()
    while _waiting:
        _end(_waiting.popitem()[1])
    while _dispatched:
        _end(_dispatched.popitem()[1][2])


def _end(child: subprocess.Popen[str]) -> None:
    for stream in (child.stdin, child.stdout, child.stderr):
        with contextlib.suppress(OSError):
            if stream is not None:
                stream.close()
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    child.wait()


atexit.register(discard)
