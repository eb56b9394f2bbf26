"""llama.cpp's own OpenAI-compatible server (`python -m llama_cpp.server`, llama-cpp-python's
[server] extra) on a GGUF file, in a child process of this Python environment on a free port, for as
long as a `with` block lasts: the served half of `--compare-served` on llama.cpp. docs/llamacpp.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from mlscope.contract.errors import UserError
from mlscope.runtime.generate.serve import ServerProcess, free_port

__all__ = ["LlamaCppServer"]

SERVER_HINT = "llama.cpp's server needs llama-cpp-python[server]: pip install 'mlscope[llamacpp]'"


class LlamaCppServer(ServerProcess):
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
    name = "llama.cpp's server"

    def __init__(self, path: Path, *, n_ctx: int, threads: int, startup_timeout_s: float = 120.0) -> None:
        import llama_cpp

        super().__init__(startup_timeout_s)
        self.path = path
        self.max_context = n_ctx
        self.threads = threads
        self.model = path.stem
        self.label = f"llama-cpp-python server ({llama_cpp.__version__})"

    def __enter__(self) -> LlamaCppServer:
        for module in ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings"):
            if importlib.util.find_spec(module) is None:
                raise UserError(f"{SERVER_HINT} ({module} is not installed)", field="compare_served")
        port = free_port()
        command = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.path), "--model_alias", self.model,
            "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(self.max_context), "--n_threads", str(self.threads),
            "--n_threads_batch", str(self.threads), "--n_gpu_layers", "0", "--verbose", "False",
        ]  # fmt: skip
        self._launch(command, port, f"http://127.0.0.1:{port}/v1/models")
        return self
