"""The generation engine behind an OpenAI-compatible HTTP endpoint (vLLM, SGLang, `transformers
serve`, ...): each request is one streaming POST to `/chat/completions` or `/completions`, timed from
this process as its Server-Sent Events arrive; or, for a model that generates no tokens, one POST to
`/embeddings` or `/rerank`, timed end to end and its answer checked (`pooling`).

What the user typed wrong (a URL that does not parse, an unknown api) raises `UserError` at
construction; an endpoint that refuses every connection raises `PredictorError` from
`check_reachable()`, so a run against a dead server fails at once with one message; anything that goes
wrong with one request (a timeout, an HTTP error, a stream that drops or stops early) is that request's
`error`, never an exception, so a server that fails some requests yields a measured failure rate.

Requests go over mlscope's own HTTP/1.1 client (`http11`: a keep-alive pool of plain sockets, a
fraction of httpx's CPU per request, which bounds the request rate a small machine can measure), or
over httpx where a proxy configured in the environment may apply (`transport`).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from mlscope.contract.errors import MlscopeError, UserError
from mlscope.contract.generation import POOLING_APIS
from mlscope.runtime.generate.pooling import MalformedAnswer, check_answer, pooling_body
from mlscope.runtime.generate.prompts import PromptText, synthetic_prompt, tokenizer_prompt
from mlscope.runtime.generate.records import GenerationRequest, RequestRecord
from mlscope.runtime.generate.sse import plain_text_chunk, sse_events, text_pattern
from mlscope.runtime.generate.transport import (
    Answer,
    ConnectFailed,
    Disconnected,
    TimedOut,
    TransportError,
    open_transport,
)
from mlscope.runtime.predictors.base import PredictorError

__all__ = ["API_PATHS", "EndpointEngine", "PromptText", "synthetic_prompt", "tokenizer_prompt"]

#: the path of each supported api, relative to the base URL (which ends in /v1); the pooling ones
#: (embeddings, rerank) answer once, without streaming.
API_PATHS = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "embeddings": "/embeddings",
    "rerank": "/rerank",
}

#: what a request sends when asked to ignore end-of-sequence (vLLM and SGLang extensions).
IGNORE_EOS_FIELDS = ("ignore_eos", "min_tokens")


def parse_base_url(base_url: str) -> str:
    """The base URL without a trailing slash, e.g. "http://127.0.0.1:8000/v1".

    Raises:
        UserError: not an http(s) URL with a host (field "endpoint").
    """
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise UserError(f"endpoint {base_url!r} is not a valid URL: {exc}", field="endpoint") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(
            f"endpoint {base_url!r} must be an http:// or https:// URL with a host, "
            "e.g. http://127.0.0.1:8000/v1",
            field="endpoint",
        )
    return base_url.rstrip("/")


@dataclass
class _Stream:
    """What one request's event stream said so far."""

    token_ns: list[int] = field(default_factory=list)
    done: bool = False
    #: when [DONE] arrived: the request's end, whatever reading the rest of the body then costs.
    done_ns: int | None = None
    finish_reason: str | None = None
    usage_completion: int | None = None
    usage_prompt: int | None = None


class _StreamError(MlscopeError):
    """One request's failure, as the record's error says it."""


class EndpointEngine:
    """A model behind an OpenAI-compatible endpoint, timed from this process.

    Args:
        base_url: the API root, e.g. "http://127.0.0.1:8000/v1".
        model: the model name the server expects in each request.
        api: "chat" (messages=[{"role": "user", ...}] to /chat/completions) or "completions".
        timeout_s: longest wait for the response, and for each piece of the stream after it.
        headers: sent with every request (e.g. an Authorization header).
        extra_body: merged into every request's JSON body (server-specific sampling options).
        ignore_eos: also send "ignore_eos": true and "min_tokens": N, so the server generates every
            token asked for (vLLM, SGLang); a server that refuses unknown fields answers 4xx, and the
            record's error names the option.
        tokenizer_directory: a model directory whose tokenizer.json makes the prompts.
        prompt_text: (n_tokens, seed, index) -> text; overrides both other prompt makers.
        concurrency: the most requests in flight at once (the connection pool's size).
        max_context: the model's context when the caller knows it (a `LocalServer` reads it from the
            model's config); else GET /models is asked (vLLM's max_model_len), else None.

    Raises:
        UserError: the URL, api, headers or extra_body are not ones mlscope can use; httpx is not
            installed (the client for endpoints behind a proxy, and the framework's requirement).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api: str = "chat",
        timeout_s: float = 60.0,
        headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
        ignore_eos: bool = False,
        tokenizer_directory: str | Path | None = None,
        prompt_text: PromptText | None = None,
        concurrency: int = 64,
        max_context: int | None = None,
    ) -> None:
        self.base_url = parse_base_url(base_url)
        if api not in API_PATHS:
            raise UserError(f"api {api!r} is not one of {', '.join(API_PATHS)}", field="api")
        if not timeout_s > 0:
            raise UserError(f"timeout_s must be > 0 seconds, got {timeout_s}", field="timeout_s")
        try:
            import httpx
        except ImportError:
            raise UserError(
                "an endpoint needs httpx: pip install 'mlscope[endpoint]'", field="endpoint"
            ) from None
        self.model = model
        self.api = api
        self.timeout_s = float(timeout_s)
        self.extra_body = dict(extra_body or {})
        try:
            _encode(self.extra_body)
        except (TypeError, ValueError) as exc:
            raise UserError(f"extra_body must be JSON: {exc}", field="extra_body") from None
        headers = dict(headers or {})
        for name, value in headers.items():
            _check_header(name, value)
        self.ignore_eos = ignore_eos
        if prompt_text is not None:
            self._prompt_text: PromptText = prompt_text
        elif tokenizer_directory is not None:
            self._prompt_text = tokenizer_prompt(tokenizer_directory)
        else:
            self._prompt_text = synthetic_prompt
        self._url = self.base_url + API_PATHS[api]
        self._target = _target(self._url)
        self._models = _target(self.base_url + "/models")
        self._text = text_pattern(api) if api not in POOLING_APIS else None
        self._transport = open_transport(self.base_url, headers, self.timeout_s, concurrency, httpx)
        self._server = "unknown"
        self._server_lock = threading.Lock()
        probed = self._probe_models()
        self.max_context: int | None = max_context if max_context is not None else probed

    # -- the protocol ------------------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> RequestRecord:
        """Stream one request and time each chunk that carries output; never raises for it."""
        if self.api in POOLING_APIS:
            return self._pool(request)
        record = RequestRecord(
            index=request.index, prompt_tokens=request.prompt_tokens, requested_tokens=request.output_tokens
        )
        # The request's bytes are made before the clock starts: what is timed is the server's answer.
        payload = _encode(self._body(request))
        stream = _Stream()
        record.start_ns = time.perf_counter_ns()
        try:
            self._send(payload, stream)
        except _StreamError as exc:
            record.error = str(exc)
        record.end_ns = stream.done_ns if stream.done_ns is not None else time.perf_counter_ns()
        record.token_ns = stream.token_ns
        record.chunk_tokens = [1] * len(stream.token_ns)
        # A chunk may hold several tokens: usage, where sent, is the true count.
        counted = stream.usage_completion if stream.usage_completion is not None else len(stream.token_ns)
        record.output_tokens = counted
        if stream.usage_prompt is not None:
            record.prompt_tokens = stream.usage_prompt
        if record.error is None and counted and not stream.token_ns:
            record.error = (
                f"the server reported {counted} tokens but streamed no text, so nothing could be timed "
                "(tokens that decode to nothing: special tokens or partial characters)"
            )
        elif record.error is None and counted < request.output_tokens:
            hint = (
                "although ignore_eos was sent"
                if self.ignore_eos
                else "pass ignore_eos if the server supports it"
            )
            record.error = (
                f"stopped early: {counted} of {request.output_tokens} tokens "
                f"(finish_reason {stream.finish_reason!r}); {hint}"
            )
        return record

    def describe(self) -> dict[str, Any]:
        return {
            "name": "endpoint",
            "version": self._server,
            "url": self.base_url,
            "model": self.model,
            "api": self.api,
        }

    def close(self) -> None:
        self._transport.close()

    def check_reachable(self) -> None:
        """Fail fast when nothing answers at the base URL (any HTTP answer counts as reachable).

        Raises:
            PredictorError: "cannot reach <url>: ..." naming why.
        """
        try:
            self._get(self._models, 10.0)
        except ConnectFailed as exc:
            raise PredictorError(f"cannot reach {self.base_url}: {_connect_reason(exc)}") from None
        except TimedOut:
            raise PredictorError(
                f"cannot reach {self.base_url}: no answer within {min(self.timeout_s, 10.0):g} s"
            ) from None
        except TransportError as exc:
            raise PredictorError(f"cannot reach {self.base_url}: {exc}") from None

    def route_status(self) -> int | None:
        """The HTTP status a GET of the API's path answers, None when no answer came: 405 (or any
        answer but 404) from a server with the route, which serves it to POST only; 404 from one
        without it, or from a server that answers 404 to a GET of any POST route (the request
        itself then settles it)."""
        try:
            return self._get(self._target, 10.0)[0].status
        except TransportError:
            return None

    # -- one pooling request -----------------------------------------------------------------------

    def _pool(self, request: GenerationRequest) -> RequestRecord:
        """Send one embeddings or rerank request, time it to its answer's last byte, check the answer;
        never raises for it."""
        record = RequestRecord(index=request.index, prompt_tokens=request.prompt_tokens, requested_tokens=0)
        lengths = request.input_tokens or (request.prompt_tokens,)
        base = request.index * len(lengths)
        texts = [self._prompt_text(n, request.seed, base + i) for i, n in enumerate(lengths)]
        payload = _encode({**pooling_body(self.api, self.model, texts), **self.extra_body})
        record.start_ns = time.perf_counter_ns()
        try:
            body = self._exchange(payload)
            record.end_ns = time.perf_counter_ns()
            counted = check_answer(self.api, body, len(texts))
        except (_StreamError, MalformedAnswer) as exc:
            record.end_ns = record.end_ns or time.perf_counter_ns()
            record.error = str(exc)
            return record
        if counted is not None:
            record.prompt_tokens = counted
            record.prompt_counted = True
        return record

    def _exchange(self, payload: bytes) -> bytes:
        """POST `payload` and read the whole answer; an HTTP error or a failure to get the answer
        is a _StreamError worded as for a streamed request."""
        answered = False
        try:
            response = self._transport.post(self._target, payload)
            answered = True
            try:
                self._note_server(response)
                body = response.read()
            finally:
                response.release()
        except ConnectFailed as exc:
            raise _StreamError(f"cannot connect to {self._url}: {_connect_reason(exc)}") from None
        except TimedOut:
            if not answered:
                raise _StreamError(f"no response within {self.timeout_s:g} s") from None
            raise _StreamError(f"the answer stalled {self.timeout_s:g} s before its end") from None
        except Disconnected:
            if not answered:
                raise _StreamError(
                    f"the server at {self._url} closed the connection without answering"
                ) from None
            raise _StreamError("the connection closed before the answer's end") from None
        except TransportError as exc:
            raise _StreamError(f"request failed: {exc}") from None
        if response.status >= 400:
            raise _StreamError(self._http_error(response.status, body))
        return body

    # -- one request -------------------------------------------------------------------------------

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        messages = request.messages(self._prompt_text)
        body: dict[str, Any] = {"model": self.model}
        if self.api == "chat":
            body["messages"] = [{"role": role, "content": text} for role, text in messages]
        else:
            body["prompt"] = " ".join(text for _, text in messages)
        body.update(
            stream=True,
            max_tokens=request.output_tokens,
            stream_options={"include_usage": True},
            temperature=0,
        )
        if self.ignore_eos:
            body.update(ignore_eos=True, min_tokens=request.output_tokens)
        body.update(self.extra_body)
        return body

    def _send(self, payload: bytes, stream: _Stream) -> None:
        answered = False
        try:
            response = self._transport.post(self._target, payload)
            answered = True
            try:
                self._answer(response, stream)
            finally:
                response.release()
            return
        except ConnectFailed as exc:
            raise _StreamError(f"cannot connect to {self._url}: {_connect_reason(exc)}") from None
        except TimedOut:
            if stream.done:
                return  # stalled while reading past [DONE]: the request itself was complete
            if not answered:
                raise _StreamError(f"no response within {self.timeout_s:g} s") from None
            raise _StreamError(
                f"stream stalled {self.timeout_s:g} s after {len(stream.token_ns)} tokens"
            ) from None
        except Disconnected:
            if stream.done:
                return  # dropped after [DONE]: the request itself was complete
            if not answered:
                raise _StreamError(
                    f"the server at {self._url} closed the connection without answering"
                ) from None
            raise _StreamError(self._ended(stream)) from None
        except TransportError as exc:
            raise _StreamError(f"request failed: {exc}") from None

    def _answer(self, response: Answer, stream: _Stream) -> None:
        """Read one answer's events into `stream`; returns when it is complete."""
        self._note_server(response)
        if response.status >= 400:
            raise _StreamError(self._http_error(response.status, response.read()))
        kind = response.headers.get("content-type", "")
        if not kind.startswith("text/event-stream"):
            raise _StreamError(
                f"the endpoint answered without streaming (content-type {kind or 'missing'!r}, "
                "expected text/event-stream)"
            )
        events = sse_events(response.pieces())
        for data in events:
            if self._take(data, stream):
                # Read to the body's end: a response closed before it costs its connection,
                # and the next request would pay for a new one (a TLS handshake on https).
                for _ in events:
                    pass
                return
        # `transformers serve` sends no [DONE]: a body that ended cleanly after a chunk with a
        # finish_reason is complete; one that ended without either was cut short.
        if stream.finish_reason is None:
            raise _StreamError(self._ended(stream))

    def _take(self, data: bytes, stream: _Stream) -> bool:
        """Record one event's data; True at [DONE]."""
        if data == b"[DONE]":
            stream.done = True
            stream.done_ns = time.perf_counter_ns()
            return True
        now = time.perf_counter_ns()
        if self._text is not None and plain_text_chunk(data, self._text):
            stream.token_ns.append(now)  # a token and nothing else: no JSON parse needed
            return False
        decoded = data.decode("utf-8", "replace")
        try:
            chunk = json.loads(decoded)
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict):
            raise _StreamError(f"malformed chunk: {decoded[:80]}")
        if chunk.get("error"):
            raise _StreamError(f"the server reported an error mid-stream: {_message(chunk)[:200]}")
        choices = chunk.get("choices") or []
        if choices and isinstance(choices[0], dict):
            choice = choices[0]
            if self.api == "chat":
                delta = choice.get("delta") or {}
                # A reasoning model streams its thinking as output tokens too.
                text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
            else:
                text = choice.get("text")
            if text:
                stream.token_ns.append(now)
            if choice.get("finish_reason"):
                stream.finish_reason = str(choice["finish_reason"])
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("completion_tokens"), int):
                stream.usage_completion = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                stream.usage_prompt = usage["prompt_tokens"]
        return False

    def _ended(self, stream: _Stream) -> str:
        return f"the stream ended after {len(stream.token_ns)} tokens without [DONE]"

    def _http_error(self, status: int, body: bytes) -> str:
        text = body.decode("utf-8", "replace")
        try:
            message = _message(json.loads(text))
        except ValueError:
            message = text
        message = " ".join(message.split())[:200]
        text = f"HTTP {status} from {self._url}: {message}"
        if self.ignore_eos and status in (400, 422) and any(name in message for name in IGNORE_EOS_FIELDS):
            text += (
                "; the server refuses the fields ignore_eos sends (ignore_eos, min_tokens): "
                "run without ignore_eos"
            )
        return text

    # -- the server --------------------------------------------------------------------------------

    def _note_server(self, response: Answer) -> None:
        name = response.headers.get("server")
        if name and self._server == "unknown":
            with self._server_lock:
                self._server = name.strip()

    def _get(self, target: str, longest_s: float) -> tuple[Answer, bytes]:
        """GET `target`, waiting at most `longest_s` (or the client's timeout when shorter), its body
        read whole and the server's name noted. Raises the transport's errors."""
        response = self._transport.get(target, min(self.timeout_s, longest_s))
        try:
            body = response.read()
        finally:
            response.release()
        self._note_server(response)
        return response, body

    def _probe_models(self) -> int | None:
        """The model's context length from GET /models (vLLM's max_model_len), None when not said."""
        try:
            response, body = self._get(self._models, 5.0)
            listed = json.loads(body).get("data") if response.status == 200 else None
        except (TransportError, ValueError, AttributeError):
            return None
        if not isinstance(listed, list):
            return None
        entries = [entry for entry in listed if isinstance(entry, dict)]
        mine = [entry for entry in entries if entry.get("id") == self.model] or (
            entries if len(entries) == 1 else []
        )
        for entry in mine:
            for key in ("max_model_len", "context_length", "max_context_length"):
                value = entry.get(key)
                if isinstance(value, int) and value > 0:
                    return value
        return None


def _message(payload: Any) -> str:
    """The human part of an error payload: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}."""
    if isinstance(payload, dict):
        for key in ("error", "detail", "message"):
            value = payload.get(key)
            if isinstance(value, dict) and "message" in value:
                return str(value["message"])
            if value:
                return value if isinstance(value, str) else json.dumps(value)
    return json.dumps(payload)


def _connect_reason(exc: Exception) -> str:
    text = str(exc)
    return "connection refused" if "refused" in text.lower() else text or type(exc).__name__


def _encode(body: dict[str, Any]) -> bytes:
    """A request body's bytes, as httpx makes them from json=: compact UTF-8, no NaN."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _target(url: str) -> str:
    """The request target (path and query) of a URL, percent-encoded where it is not ASCII."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return quote(target, safe="/?&=%:@!$'()*+,;-._~")


def _check_header(name: Any, value: Any) -> None:
    """A header httpx would have sent as given: an ASCII name without separators, an ASCII value on
    one line. Raises UserError (field "headers") naming the header otherwise."""
    ok = isinstance(name, str) and isinstance(value, str)
    ok = ok and bool(name) and name.isascii() and value.isascii()
    ok = ok and not any(c in name for c in " \t:\r\n") and not any(c in value for c in "\r\n\0")
    if not ok:
        raise UserError(f"header {name!r} is not an ASCII name with a one-line ASCII value", field="headers")
