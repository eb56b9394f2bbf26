"""What every generation engine shares: the request it is asked, the record it returns, and the
protocol an engine follows.

Times are `time.perf_counter_ns()` readings of the process that issues the requests, so records from
one run compare directly. An engine never raises for one request's failure (a refused connection, a
stream that stops early): it returns the record with `error` set, and the run counts it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["CONTEXT_KEYS", "GenerateEngine", "GenerationRequest", "RequestRecord", "context_of"]

#: The names model families give their context length (prompt + output tokens) in a Hugging Face
#: config, in the order they are looked for.
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "max_sequence_length",
    "n_ctx",
    "seq_length",
)


def context_of(config: Any) -> int | None:
    """The context length a Hugging Face config declares, as a config.json mapping or a config
    object; None where it declares none (T5's relative positions, Mamba's recurrence)."""
    for key in CONTEXT_KEYS:
        value = config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


@dataclass(frozen=True)
class GenerationRequest:
    """One request: a prompt of `prompt_tokens` tokens, `output_tokens` tokens to generate.

    Attributes:
        index: its place in the run (0-based); with the seed it fixes the prompt's content.
        prompt_tokens: tokens in the prompt (an in-process engine draws exactly this many token
            ids; an endpoint engine builds a text of about this many tokens).
        output_tokens: tokens to generate, forced (end-of-sequence ignored where the engine can).
        seed: seeds the prompt's content, so two runs send the same prompts.
        parts: the prompt in pieces, each (role, tokens, seed, key): a piece's content is what a
            one-piece prompt of that many tokens with (seed, index=key) would be, so pieces with one
            (seed, key) are the same text or ids wherever they appear (a shared prefix, a trace's
            shared block, a conversation's earlier turns). Role "user" or "assistant": an
            assistant piece stands for an earlier answer (a chat API gets it as its own message).
            Empty: one user piece (prompt_tokens, seed, index).
        turn: the request's turn in its conversation (1 first), None outside one.
        input_tokens: for a pooling API (embeddings, rerank: output_tokens 0), the length of each
            text sent, in order (rerank: the query, then each document); prompt_tokens is their sum.
    """

    index: int
    prompt_tokens: int
    output_tokens: int
    seed: int = 0
    parts: tuple[tuple[str, int, int, int], ...] = ()
    turn: int | None = None

    def pieces(self) -> tuple[tuple[str, int, int, int], ...]:
        """The prompt's pieces (see `parts`), a plain request's one piece included."""
        return self.parts or (("user", self.prompt_tokens, self.seed, self.index),)

    def messages(self, text: Callable[[int, int, int], str]) -> list[tuple[str, str]]:
        """The prompt as (role, text) messages, each piece made by `text(tokens, seed, key)` and
        neighbouring pieces of one role joined by a space into one message."""
        messages: list[tuple[str, str]] = []
        for role, tokens, seed, key in self.pieces():
            piece = text(tokens, seed, key)
            if messages and messages[-1][0] == role:
                messages[-1] = (role, f"{messages[-1][1]} {piece}")
            else:
                messages.append((role, piece))
        return messages

    input_tokens: tuple[int, ...] = ()


@dataclass
class RequestRecord:
    """How one request went.

    Attributes:
        index: the request's index.
        prompt_tokens: tokens in the prompt as the model saw it (a server's `usage` where reported).
        requested_tokens: output tokens asked for (0 from a pooling API, which answers once with no
            tokens: its request succeeds without any).
        output_tokens: output tokens received (a server's `usage` where reported, else counted).
        start_ns: when the request was sent (after any wait for a free slot: see due_ns).
        token_ns: when each output token arrived, in order; one entry per streamed chunk that
            carried output (a chunk may hold several tokens; `chunk_tokens` says how many).
        chunk_tokens: tokens in each entry of token_ns (all 1 in process).
        end_ns: when the request ended (last byte read, or the failure).
        error: None for a request that returned every token asked for; else what went wrong,
            e.g. "stopped early: 3 of 16 tokens (finish_reason 'stop')".
        due_ns: when a load generator scheduled the request (its latencies then run from here, so
            queueing counts); None when issued back to back (they run from start_ns).
        turn: the request's turn in its conversation, None outside one.
        prompt_counted: prompt_tokens is the server's count (its `usage`), not the length asked.
    """

    index: int
    prompt_tokens: int
    requested_tokens: int
    output_tokens: int = 0
    start_ns: int = 0
    token_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    end_ns: int = 0
    error: str | None = None
    due_ns: int | None = None
    turn: int | None = None
    prompt_counted: bool = False

    @property
    def origin_ns(self) -> int:
        """Where this request's latencies are measured from: its due time, else its start."""
        return self.due_ns if self.due_ns is not None else self.start_ns

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def succeeded(self) -> bool:
        """No error, and a token timed where tokens were asked for (a pooling request asks none)."""
        return self.error is None and (bool(self.token_ns) or self.requested_tokens == 0)

    def failed(self, exc: BaseException) -> None:
        """Record `exc` as this request's failure: its type and first line (one request's failure,
        e.g. out of memory, is its record's, not the run's)."""
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        self.error = f"{type(exc).__name__}: {first}"

    def counted_in_process(self) -> None:
        """Count the tokens of an in-process engine, one per entry of `token_ns`, and say so when
        fewer came than were asked for."""
        self.output_tokens = len(self.token_ns)
        self.chunk_tokens = [1] * self.output_tokens
        if self.error is None and self.output_tokens != self.requested_tokens:
            self.error = f"stopped early: {self.output_tokens} of {self.requested_tokens} tokens"


class GenerateEngine(Protocol):
    """A model that generates tokens for requests, in this process or behind an endpoint.

    `generate` may be called from several threads at once (the driver's concurrency).
    """

    #: prompt + output tokens the model accepts (its context), None when unknown.
    max_context: int | None

    def generate(self, request: GenerationRequest) -> RequestRecord:
        """Run one request and time it; a per-request failure is the record's `error`.

        Raises:
            PredictorError: the engine itself is broken (not one request): the run stops.
        """
        ...

    def describe(self) -> dict[str, Any]:
        """The result's `framework` section: {"name", "version", ...}."""
        ...

    def close(self) -> None:
        """Release the model or the connection pool."""
        ...
