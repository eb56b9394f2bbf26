"""llama.cpp's own OpenAI-compatible server (`python -m llama_cpp.server`, llama-cpp-python's
[server] extra) on a GGUF file, in a child process of this Python environment on a free port, for as
long as a `with` block lasts: the served half of `--compare-served` on llama.cpp. docs/llamacpp.md.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from mlscope.contract.errors import UserError
from mlscope.runtime.generate.serve import _free_port
from mlscope.runtime.predictors.base import PredictorError

__all__ = ["LlamaCppServer"]

SERVER_HINT = "llama.cpp's server needs llama-cpp-python[server]: pip install 'mlscope[llamacpp]'"


class LlamaCppServer:
    """`python -m llama_cpp.server --model <gguf>` on 127.0.0.1, started on entry, stopped on exit.

    Its requests are answered with the same GGUF file, context and threads as the in-process
    engine; the chat template is the file's own (a chat prompt is its messages' text).

    Attributes:
        base_url: "http://127.0.0.1:<port>/v1", for `EndpointEngine`.
        model: the model name requests carry (the server's alias for the file).
        max_context: the context the server was started with.
        ignore_eos: True: the server honours `min_tokens` (its end-of-text logit is masked until
            then), so a request is sent with it and gets every token it asks for.
        label: what the result calls this server.
        log_path: the server's stdout and stderr, while the block lasts.

    Raises (on entry):
        UserError: the server's packages are not installed.
        PredictorError: the server exited or did not answer in time; carries its last log lines.
    """

    ignore_eos = True

    def __init__(self, path: Path, *, n_ctx: int, threads: int, startup_timeout_s: float = 120.0) -> None:
        import llama_cpp

        self.path = path
        self.max_context = n_ctx
        self.threads = threads
        self.startup_timeout_s = startup_timeout_s
        self.model = path.stem
        self.label = f"llama-cpp-python server ({llama_cpp.__version__})"
        self.base_url = ""
        self.log_path: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._tempdir: str | None = None

    def __enter__(self) -> LlamaCppServer:
        for module in ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings"):
            if importlib.util.find_spec(module) is None:
                raise UserError(f"{SERVER_HINT} ({module} is not installed)", field="compare_served")
        port = _free_port()
        command = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.path), "--model_alias", self.model,
            "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(self.max_context), "--n_threads", str(self.threads),
            "--n_threads_batch", str(self.threads), "--n_gpu_layers", "0", "--verbose", "False",
        ]  # fmt: skip
        self._tempdir = tempfile.mkdtemp(prefix="mlscope-llamacpp-serve-")
        self.log_path = Path(self._tempdir) / "server.log"
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self.base_url = f"http://127.0.0.1:{port}/v1"
        try:
            self._wait_ready(f"{self.base_url}/models")
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

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
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _wait_ready(self, url: str) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                raise PredictorError(
                    f"llama.cpp's server exited with code {code} before answering; its last lines:\n"
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
                    f"llama.cpp's server did not answer {url} within {self.startup_timeout_s:g} s; "
                    f"its last lines:\n{self.log_tail()}"
                )
            time.sleep(0.2)
