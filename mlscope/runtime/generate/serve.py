"""Serve a local model directory over an OpenAI-compatible endpoint with `transformers serve`, in a
child process of this Python environment, for as long as a `with` block lasts: the served half of a
served-versus-in-process comparison, and the real server the endpoint engine is tested against.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from mlscope.contract.errors import UserError
from mlscope.runtime.generate.records import context_of
from mlscope.runtime.predictors.base import PredictorError

__all__ = ["LocalServer", "ServerProcess", "free_port"]

SERVING_HINT = "serving needs transformers[serving]: pip install 'mlscope[generate]'"


class ServerProcess:
    """An OpenAI-compatible server in a child process on 127.0.0.1, its log in a temporary folder,
    for as long as a `with` block lasts: what `LocalServer` and a framework's own server (llama.cpp's)
    share: starting it, waiting until it answers, its log's tail, and stopping it.

    Attributes:
        name: what messages call the server.
        base_url: "http://127.0.0.1:<port>/v1" once started.
        startup_timeout_s: longest wait for it to load the model and answer.
        log_path: the server's stdout and stderr, while the block lasts.
    """

    name = "the server"

    def __init__(self, startup_timeout_s: float) -> None:
        self.startup_timeout_s = startup_timeout_s
        self.base_url = ""
        self.log_path: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._tempdir: str | None = None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _launch(
        self, command: list[str], port: int, ready_url: str, env: dict[str, str] | None = None
    ) -> None:
        """Start `command` (its log in `tempdir()`), then wait until `ready_url` answers 200; a server
        that does not is stopped before the error is raised."""
        with open(self.tempdir() / "server.log", "wb") as log:
            self.log_path = Path(log.name)
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.base_url = f"http://127.0.0.1:{port}/v1"
        try:
            self._wait_ready(ready_url)
        except BaseException:
            self.stop()
            raise

    def tempdir(self) -> Path:
        """The server's temporary folder (its log, and what it may keep), made on first use."""
        if self._tempdir is None:
            self._tempdir = tempfile.mkdtemp(prefix="mlscope-serve-")
        return Path(self._tempdir)

    def stop(self) -> None:
        """Stop the server (terminate, then kill after 10 s) and remove its log."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None

    def log_tail(self, lines: int = 20) -> str:
        """The server's last log lines ("" once stopped)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def _wait_ready(self, url: str) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                raise PredictorError(
                    f"{self.name} exited with code {code} before answering; its last lines:\n"
                    f"{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass  # not listening yet, or still loading
            if time.monotonic() > deadline:
                raise PredictorError(
                    f"{self.name} did not answer {url} within {self.startup_timeout_s:g} s; "
                    f"its last lines:\n{self.log_tail()}"
                )
            time.sleep(0.2)


class LocalServer(ServerProcess):
    """`transformers serve <directory>` on 127.0.0.1, started on entry and stopped on exit.

    Args:
        directory: a local Hugging Face model directory (config, weights, tokenizer).
        port: the port to listen on; a free one when None.
        device: the server's device ("cpu", "cuda:0", ...).
        startup_timeout_s: longest wait for the server to load the model and answer GET /health.

    Attributes:
        base_url: "http://127.0.0.1:<port>/v1", for `EndpointEngine`.
        model: the model name requests must carry (the directory's path, as the server loaded it).
        max_context: the model's context from its config.json (the server does not report it), or
            None when the config names none.
        log_path: the server's stdout and stderr, while the block lasts.

    Raises (on entry):
        UserError: the directory does not exist, or transformers, fastapi or uvicorn is missing.
        PredictorError: the server exited or did not answer in time; carries its last log lines.
    """

    name = "transformers serve"

    def __init__(
        self,
        directory: str | Path,
        port: int | None = None,
        device: str = "cpu",
        startup_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(startup_timeout_s)
        self.directory = Path(directory).resolve()
        self.port = port
        self.device = device
        self.model = str(self.directory)
        self.max_context = _context_length(self.directory / "config.json")

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def start(self) -> None:
        """Start the server and wait until it answers /health (see the class for what it raises)."""
        if not self.directory.is_dir():
            raise UserError(f"no model directory at {self.directory}", field="directory")
        command = [sys.executable, "-c", _cli_entry(), "serve", self.model]
        port = self.port or free_port()
        command += ["--host", "127.0.0.1", "--port", str(port), "--device", self.device]
        hub_cache = self.tempdir() / "hub"
        hub_cache.mkdir()
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_HUB_DISABLE_UPDATE_CHECK": "1",
            # The server's GET /models lists this cache; an empty one answers instead of failing.
            "HF_HUB_CACHE": str(hub_cache),
        }
        self._launch(command, port, f"http://127.0.0.1:{port}/health", env)


def _cli_entry() -> str:
    """Python source that runs the `transformers` console script's function, found from the package's
    own entry point (so neither PATH nor a module path that moves between versions matters).

    Raises:
        UserError: transformers, fastapi or uvicorn is not installed here.
    """
    for module in ("transformers", "fastapi", "uvicorn"):
        if importlib.util.find_spec(module) is None:
            raise UserError(f"{SERVING_HINT} ({module} is not installed)", field="endpoint")
    scripts = [
        entry
        for entry in importlib.metadata.distribution("transformers").entry_points
        if entry.group == "console_scripts" and entry.name == "transformers"
    ]
    target = scripts[0].value if scripts else "transformers.cli.transformers:main"
    module, _, function = target.partition(":")
    return (
        f"import sys; sys.argv[0] = 'transformers'; from {module} import {function}; sys.exit({function}())"
    )


def _context_length(config_path: Path) -> int | None:
    """The context a Hugging Face config declares (its name varies by architecture), None if none."""
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError):
        return None
    return context_of(config) if isinstance(config, dict) else None


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
