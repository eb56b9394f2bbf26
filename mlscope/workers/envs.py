"""Framework environments: a virtual environment per framework whose requirements clash with
mlscope's own (MXNet 1.9 needs numpy < 1.24), made and found under the cache directory.

An environment holds the framework's pins (`ops/images/<framework>.requirements.txt`, the same file
that pins its predictor image), the predictor runtime's (`ops/images/runtime.requirements.txt`) and
mlscope itself, installed editable and without dependencies from the source checkout, so the
environment runs the same code as the caller. Its folder is named by a hash of both pins files and
the Python it was made with: changed pins make a new environment instead of patching an old one.
`mlscope-env.json` in it says what it holds; it is written last, so an environment without it is
unfinished and never used. Nothing here imports a framework.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mlscope.contract.errors import MlscopeError, UserError
from mlscope.runtime.frameworks import FrameworkSpec, get_framework

__all__ = [
    "METADATA_FILE",
    "EnvBuildError",
    "EnvInfo",
    "PinsFiles",
    "create_env",
    "env_dir",
    "env_for",
    "envs_root",
    "file_lock",
    "find_pins",
    "list_envs",
    "pins_hash",
    "read_env",
    "run_streamed",
    "source_checkout",
]

METADATA_FILE = "mlscope-env.json"
RUNTIME_PINS = "runtime.requirements.txt"
_LOG_TAIL = 30
# How the environment's own Python reports the framework's version: from package metadata, so the
# framework is not imported (a broken build still says what it is).
_VERSION_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "found = None\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        found = m.version(name)\n"
    "        break\n"
    "    except m.PackageNotFoundError:\n"
    "        continue\n"
    "print(json.dumps(found))\n"
)


class EnvBuildError(MlscopeError):
    """Making an environment failed (pip or venv); `log` holds the last lines the tool wrote."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class PinsFiles:
    """The pins an environment of one framework is made from."""

    framework: Path
    runtime: Path


@dataclass(frozen=True)
class EnvInfo:
    """A finished framework environment.

    Attributes:
        framework: the framework it holds.
        version: the framework's version in it.
        directory: the environment's folder.
        python: its Python interpreter.
        python_version: that interpreter's version.
        pins_hash: the hash its folder is named by.
        created: when it was made (ISO 8601, UTC).
        checkout: the mlscope source checkout installed in it (editable): the code a job runs there.
    """

    framework: str
    version: str
    directory: Path
    python: Path
    python_version: str
    pins_hash: str
    created: str
    checkout: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "framework": self.framework,
            "version": self.version,
            "directory": str(self.directory),
            "python": str(self.python),
            "python_version": self.python_version,
            "pins_hash": self.pins_hash,
            "created": self.created,
            "checkout": self.checkout,
        }


def source_checkout() -> Path | None:
    """The mlscope source checkout this code runs from, or None when mlscope is installed from a
    wheel (no pins files, nothing to install editable)."""
    import mlscope

    root = Path(mlscope.__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "ops" / "images").is_dir() else None


def find_pins(framework: str, pins_dir: Path | None = None) -> PinsFiles:
    """The pins files of a framework's environment.

    Args:
        framework: a registered framework name.
        pins_dir: where the pins files are; default: `ops/images` of the source checkout.

    Raises:
        UserError: an unknown framework, or no pins file for it (or no runtime pins).
    """
    spec = get_framework(framework)
    if pins_dir is None:
        checkout = source_checkout()
        if checkout is None:
            raise UserError(
                "framework environments are made from a source checkout of mlscope (its ops/images pins "
                "files); this mlscope is installed without one",
                field="framework",
            )
        pins_dir = checkout / "ops" / "images"
    pins = PinsFiles(pins_dir / f"{spec.name}.requirements.txt", pins_dir / RUNTIME_PINS)
    for path in (pins.framework, pins.runtime):
        if not path.is_file():
            raise UserError(
                f"no pins file {path.name} in {pins_dir}: cannot make an environment for {framework}"
            )
    return pins


_PYTHON_DIRECTIVE = re.compile(r"^#\s*python:\s*(\d+\.\d+)\s*$", re.MULTILINE)


def pinned_python(pins: PinsFiles) -> str | None:
    """The Python version a framework's pins file asks for with a `# python: X.Y` line (Caffe2's
    last runtime has wheels for Python 3.9 only), or None: the Python that runs mlscope."""
    match = _PYTHON_DIRECTIVE.search(pins.framework.read_text(encoding="utf-8"))
    return match.group(1) if match else None


def base_interpreter(pins: PinsFiles) -> str:
    """The interpreter an environment is made with: `pythonX.Y` from PATH when the pins ask for one.

    Raises:
        UserError: the pins ask for a Python this machine does not have.
    """
    wanted = pinned_python(pins)
    if wanted is None or wanted == ".".join(platform.python_version_tuple()[:2]):
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates = [
        shutil.which(f"python{wanted}"),
        *sorted(str(path) for path in pyenv.glob(f"{wanted}*/bin/python{wanted}")),
        f"/usr/bin/python{wanted}",
    ]
    for candidate in candidates:
        # A pyenv shim is on PATH even where that version is not selected, and then fails: try each.
        if candidate and _runs(candidate, wanted):
            return candidate
    raise UserError(
        f"{pins.framework.name} asks for Python {wanted}: install it so that python{wanted} runs "
        "(Debian bullseye's python3.9, or pyenv)"
    )


def _runs(interpreter: str, version: str) -> bool:
    try:
        done = subprocess.run(
            [interpreter, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return False
    return done.returncode == 0 and done.stdout.strip() == version


def pins_hash(pins: PinsFiles, python_version: str | None = None) -> str:
    """A short hash of both pins files' requirement lines and the Python version the environment runs on.

    Comments and blank lines are left out: rewording a comment must not make a new environment.
    """
    digest = hashlib.sha256()
    for path in (pins.framework, pins.runtime):
        lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
        digest.update("\n".join(line for line in lines if line and not line.startswith("#")).encode())
        digest.update(b"\0")
    digest.update((python_version or pinned_python(pins) or platform.python_version()).encode())
    return digest.hexdigest()[:12]


def envs_root(cache_dir: Path) -> Path:
    return Path(cache_dir) / "envs"


def env_dir(framework: str, cache_dir: Path, pins: PinsFiles | None = None) -> Path:
    """The folder of the framework's environment for the current pins: `<cache>/envs/<framework>-<hash>`.

    Raises:
        UserError: see `find_pins`.
    """
    pins = pins or find_pins(framework)
    return envs_root(cache_dir) / f"{framework}-{pins_hash(pins)}"


def read_env(directory: Path) -> EnvInfo | None:
    """The environment in a folder, from its metadata; None when it is unfinished or not one."""
    try:
        data = json.loads((directory / METADATA_FILE).read_text(encoding="utf-8"))
        info = EnvInfo(
            framework=str(data["framework"]),
            version=str(data["version"]),
            directory=directory,
            python=Path(data["python"]),
            python_version=str(data["python_version"]),
            pins_hash=str(data["pins_hash"]),
            created=str(data["created"]),
            checkout=str(data.get("checkout", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if info.python.exists() else None


def list_envs(cache_dir: Path) -> list[EnvInfo]:
    """Every finished environment under the cache directory, newest first."""
    root = envs_root(cache_dir)
    if not root.is_dir():
        return []
    found = [info for child in sorted(root.iterdir()) if (info := read_env(child)) is not None]
    return sorted(found, key=lambda info: info.created, reverse=True)


def env_for(framework: str, cache_dir: Path, pins_dir: Path | None = None) -> EnvInfo | None:
    """The environment a framework runs in: the one made from the current pins when they can be read
    (a source checkout), else the newest one of that framework; None when there is none.

    Reads metadata only: neither the framework nor the environment's Python is started.
    """
    try:
        wanted: Path | None = env_dir(framework, cache_dir, find_pins(framework, pins_dir))
    except UserError:
        wanted = None
    if wanted is not None:
        found = read_env(wanted)
        # An environment runs the checkout installed in it: another checkout's code is not this one's.
        checkout = source_checkout()
        if found is not None and checkout is not None and found.checkout != str(checkout):
            return None
        return found
    newest: dict[str, EnvInfo] = {}
    for info in list_envs(cache_dir):  # newest first
        newest.setdefault(info.framework, info)
    return newest.get(framework)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (made if missing): two makers of one environment (or image)
    on this machine take turns, and the second finds the first's work done."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(command: list[str], log: Callable[[str], None], what: str) -> None:
    """Run a tool, passing its output to `log` line by line.

    pip inherits this process's environment (PIP_* variables, its config files), so it reaches the
    same indexes, certificates and constraints as the pip that installed mlscope.

    Raises:
        EnvBuildError: it failed; the error holds its last lines.
    """
    code, tail = run_streamed(command, log, {}, _LOG_TAIL)
    if code != 0:
        raise EnvBuildError(f"{what} failed with exit code {code}", "\n".join(tail))


def run_streamed(
    command: list[str], log: Callable[[str], None], env: dict[str, str], keep: int
) -> tuple[int, list[str]]:
    """Run a tool with this process's environment and `env` over it, passing each line it prints
    (stdout and stderr as one) to `log`: its exit code and its last `keep` lines, which say why it
    failed when it did."""
    tail: deque[str] = deque(maxlen=keep)
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **env}
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            tail.append(line.rstrip("\n"))
            log(line.rstrip("\n"))
        code = process.wait()
    return code, list(tail)


def _framework_version(python: Path, spec: FrameworkSpec) -> str | None:
    done = subprocess.run(
        [str(python), "-c", _VERSION_PROBE, *spec.distributions], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return None
    found = json.loads(done.stdout.strip() or "null")
    return str(found) if found is not None else None


def _python_version(python: Path) -> str:
    done = subprocess.run(
        [str(python), "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _write_metadata(info: EnvInfo) -> None:
    """The metadata file marks an environment finished, so it is written last, atomically."""
    partial = info.directory / f".{METADATA_FILE}.partial"
    partial.write_text(json.dumps(info.to_dict(), indent=2) + "\n", encoding="utf-8")
    os.replace(partial, info.directory / METADATA_FILE)


def create_env(
    framework: str,
    cache_dir: Path,
    *,
    rebuild: bool = False,
    log: Callable[[str], None] = lambda line: None,
    pins_dir: Path | None = None,
    checkout: Path | None = None,
) -> tuple[EnvInfo, bool]:
    """Make the framework's environment for the current pins, unless a finished one exists.

    Args:
        framework: a registered framework name.
        cache_dir: the cache directory; environments go to its `envs/`.
        rebuild: make it again even when a finished one exists.
        log: receives progress lines and the tools' output.
        pins_dir: where the pins files are; default: `ops/images` of the source checkout.
        checkout: the mlscope source installed into it; default: the one this code runs from.

    Returns:
        The environment, and whether it was made now (False: an existing one was reused).

    Raises:
        UserError: an unknown framework, one that cannot run anywhere, or no pins files.
        EnvBuildError: venv or pip failed.
    """
    spec = get_framework(framework)
    if spec.unavailable is not None:
        raise UserError(f"framework {framework!r} cannot run: {spec.unavailable}", field="framework")
    pins = find_pins(framework, pins_dir)
    checkout = checkout or source_checkout()
    if checkout is None:
        raise UserError("mlscope is installed without its source checkout: nothing to install into the env")
    directory = env_dir(framework, cache_dir, pins)
    with file_lock(directory.with_name(directory.name + ".lock")):
        existing = read_env(directory)
        interpreter = base_interpreter(pins)
        python = directory / "bin" / "python"
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
        # Only the predictor runtime has to run on an older Python the pins ask for, not all of mlscope.
        install_mlscope = [*pip, "--no-deps", "-e", str(checkout)]
        if interpreter != sys.executable:
            install_mlscope.insert(-2, "--ignore-requires-python")
        if existing is not None and not rebuild:
            log(f"{framework}: environment {directory} exists ({spec.display} {existing.version})")
            if existing.checkout != str(checkout):
                log(f"{framework}: pointing it at this checkout, {checkout}")
                _run(install_mlscope, log, "pip install of mlscope")
                existing = dataclasses.replace(existing, checkout=str(checkout))
                _write_metadata(existing)
            return existing, False
        if directory.exists():
            shutil.rmtree(directory)
        started = time.monotonic()
        log(f"{framework}: making a virtual environment in {directory}")
        _run([interpreter, "-m", "venv", str(directory)], log, "python -m venv")
        log(f"{framework}: installing {pins.framework.name} and {pins.runtime.name}")
        _run([*pip, "-r", str(pins.framework), "-r", str(pins.runtime)], log, "pip install of the pins")
        log(f"{framework}: installing mlscope from {checkout} (editable, no dependencies)")
        _run(install_mlscope, log, "pip install of mlscope")
        version = _framework_version(python, spec)
        if version is None:
            raise EnvBuildError(
                f"the environment holds none of {', '.join(spec.distributions)} after install"
            )
        info = EnvInfo(
            framework=framework,
            version=version,
            directory=directory,
            python=python,
            python_version=_python_version(python),
            pins_hash=pins_hash(pins),
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            checkout=str(checkout),
        )
        _write_metadata(info)
        log(f"{framework}: {spec.display} {version} ready in {time.monotonic() - started:.0f} s")
        return info, True
