"""The generate scenario in process on llama.cpp: the GGUF file loaded by llama-cpp-python, each
request's prompt the very token ids the transformers engine feeds PyTorch, greedy decoding of exactly
the asked number of tokens, each token timed as llama.cpp yields it. docs/llamacpp.md.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlscope.runtime.generate.records import GenerationRequest, RequestRecord
from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.llamacpp.gguf_file import PreparedGguf

__all__ = ["LlamaCppEngine", "default_threads", "open_llama"]


def default_threads() -> int:
    """The threads llama.cpp computes with when the request names none: every core this process
    may run on (PyTorch's own default on the CPU), not llama-cpp-python's half of them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def open_llama(path: Path, *, n_ctx: int, threads: int, logits_all: bool = False) -> Any:
    """llama-cpp-python's `Llama` on the GGUF file, on the CPU, quiet.

    Raises:
        PredictorError: llama.cpp cannot load the file (says why, from its message).
    """
    from llama_cpp import Llama

    try:
        return Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            n_gpu_layers=0,
            logits_all=logits_all,
            verbose=False,
        )
    except (ValueError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise PredictorError(f"llama.cpp cannot load {path.name}: {first}") from None


class LlamaCppEngine:
    """A GGUF model in llama.cpp in this process, implementing `GenerateEngine`.

    Prompts are drawn as `pytorch.generate.InProcessEngine` draws them (single-token words of the
    model directory's tokenizer, seeded by the request), so both frameworks see the same ids; the
    words come from the file's record (`gguf_file.prepare_gguf`), so no tokenizer library is needed. Each
    request starts from an empty KV cache (no prefix of an earlier prompt is reused), decodes
    greedily (temperature 0) and is stopped after exactly `output_tokens` tokens: the end-of-text
    token is one more token here, as in the transformers engine whose generation config has none.

    llama.cpp's context serves one sequence at a time: concurrent requests take turns (a lock), and
    the time one waits is in its TTFT, as a client of a one-slot server sees it.

    Attributes:
        directory: the model directory the GGUF was written from (its tokenizer made the prompts' words).
        path: the GGUF file.
        max_context: the model's context length (prompt + output).
    """

    def __init__(
        self,
        llama: Any,
        prepared: PreparedGguf,
        gguf_type: str,
        threads: int,
        describe: Callable[[], dict[str, Any]],
        serve: Callable[[], Any] | None = None,
    ) -> None:
        self._llama: Any = llama
        self.path: Path = prepared.path
        self.directory: Path = prepared.directory
        self._writer = prepared.writer
        self.gguf_type = gguf_type
        self.threads = threads
        self.max_context: int | None = int(llama.n_ctx())
        self._describe = describe
        self._serve = serve
        self._lock = threading.Lock()
        self._words = prepared.words

    @property
    def prompt_text(self) -> Callable[[int, int, int], str]:
        """The prompts as texts of the very same tokens, for a server of the same file."""
        return self._words.prompt_text

    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        pieces = request.pieces()
        return [i for _, tokens, seed, key in pieces for i in self._words.prompt_ids(tokens, seed, key)]

    def server(self) -> Any:
        """llama.cpp's own OpenAI-compatible server on the same GGUF file (`serve.LlamaCppServer`),
        for `--compare-served`."""
        if self._serve is None:
            raise PredictorError("this llama.cpp engine has no server")
        return self._serve()

    def generate(self, request: GenerationRequest) -> RequestRecord:
        llama = self._llama
        if llama is None:
            raise PredictorError("the generation engine is closed")
        record = RequestRecord(
            index=request.index, prompt_tokens=request.prompt_tokens, requested_tokens=request.output_tokens
        )
        ids = self.prompt_ids(request)
        with self._lock:
            record.start_ns = time.perf_counter_ns()
            try:
                llama.reset()
                tokens = llama.generate(ids, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True)
                try:
                    for _ in tokens:
                        record.token_ns.append(time.perf_counter_ns())
                        if len(record.token_ns) == request.output_tokens:
                            break
                finally:
                    tokens.close()
            except Exception as exc:  # one request's failure is its record's
                record.failed(exc)
            record.end_ns = time.perf_counter_ns()
        record.counted_in_process()
        return record

    def describe(self) -> dict[str, Any]:
        facts = self._describe()
        facts["gguf_type"] = self.gguf_type
        facts["gguf_bytes"] = self.path.stat().st_size if self.path.exists() else None
        facts["threads"] = self.threads
        facts["gguf_writer"] = dict(self._writer)
        return facts

    def close(self) -> None:
        llama, self._llama = self._llama, None
        if llama is not None:
            llama.close()


def prompt_logits(llama: Any, ids: list[int]) -> np.ndarray:
    """llama.cpp's logits at every position of `ids` (a `Llama` opened with logits_all), from an
    empty cache: (len(ids), vocab) float32."""
    llama.reset()
    llama.eval(ids)
    return np.array(llama.scores[: len(ids), :], dtype=np.float32)
