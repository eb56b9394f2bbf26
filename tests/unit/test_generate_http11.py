"""The endpoint engine's own HTTP/1.1 client against a real server on a socket (the mock endpoint):
each way a body can be framed or cut, connection reuse across requests and threads, a connection the
server closes while idle, error bodies, the time to first token against the server's own clock, and
httpx taking over where a proxy is configured. The SSE splitter and the chunk fast path are checked
on bytes against what a full parse says."""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.runtime.generate.endpoint import EndpointEngine
from mlscope.runtime.generate.records import GenerationRequest, RequestRecord
from mlscope.runtime.generate.sse import plain_text_chunk, sse_events, text_pattern
from mlscope.runtime.generate.transport import proxied
from tests.fixtures.mock_endpoint import MockEndpoint, mock_endpoint

N = 8


@pytest.fixture()
def server() -> Iterator[MockEndpoint]:
    with mock_endpoint() as running:
        yield running


def _run(server: MockEndpoint, behaviour: str, count: int = 1, **options: Any) -> list[RequestRecord]:
    engine = EndpointEngine(server.base_url, behaviour, **options)
    try:
        return [engine.generate(GenerationRequest(i, 5, N)) for i in range(count)]
    finally:
        engine.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("behaviour", ["ok", "sized", "until_close"])
def test_chunked_sized_and_close_framed_streams_are_read_whole(server: MockEndpoint, behaviour: str) -> None:
    # When three requests stream N tokens each, framed chunked, by Content-Length, or by the close
    records = _run(server, behaviour, count=3)
    # Then each has every token, the usage and [DONE]
    assert [r.error for r in records] == [None] * 3
    assert all(r.output_tokens == N and len(r.token_ns) == N and r.prompt_tokens == 7 for r in records)
    # And a body ended by closing costs its connection; the other framings keep theirs
    opened = server.connections
    # the probe's connection, reused by all three; or, closed by the first, one more per request
    assert opened == (3 if behaviour == "until_close" else 1)


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("cut", "the stream ended after 3 tokens without [DONE]"),
        ("sized_cut", "the stream ended after 3 tokens without [DONE]"),
        ("drop", "the stream ended after 3 tokens without [DONE]"),
    ],
)
def test_a_body_cut_mid_way_is_that_requests_error_and_the_next_request_succeeds(
    server: MockEndpoint, behaviour: str, expected: str
) -> None:
    engine = EndpointEngine(server.base_url, behaviour, concurrency=1)
    try:
        cut = engine.generate(GenerationRequest(0, 5, N))
        engine.model = "ok"
        after = engine.generate(GenerationRequest(1, 5, N))
    finally:
        engine.close()
    assert cut.error == expected and len(cut.token_ns) == 3
    assert after.error is None and after.output_tokens == N


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("error_text", "HTTP 500 from {url}/chat/completions: upstream exploded (mock)"),
        ("gzip_error", "HTTP 500 from {url}/chat/completions: compressed trouble (mock)"),
        ("error", "HTTP 500 from {url}/chat/completions: the model crashed (mock)"),
    ],
)
def test_an_http_error_is_the_servers_text_whatever_the_bodys_framing(
    server: MockEndpoint, behaviour: str, expected: str
) -> None:
    records = _run(server, behaviour, count=2, concurrency=1)
    assert [r.error for r in records] == [expected.format(url=server.base_url)] * 2
    assert server.connections == 1  # an error body read to its end leaves the connection reusable


def test_threads_share_the_pools_connections(server: MockEndpoint) -> None:
    # Given one engine with a pool of 4, shared by 4 threads making 10 requests each
    engine = EndpointEngine(server.base_url, "ok", concurrency=4)
    records: list[RequestRecord] = []

    def issue(thread: int) -> None:
        for i in range(10):
            records.append(engine.generate(GenerationRequest(thread * 10 + i, 5, N)))

    threads = [threading.Thread(target=issue, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    engine.close()
    # Then all 40 succeed over at most 4 connections, and the server saw each request once
    assert len(records) == 40 and all(r.ok for r in records)
    assert server.connections <= 4
    assert server.requests == 40


def test_a_request_beyond_the_pool_waits_for_a_connection(server: MockEndpoint) -> None:
    # Given a pool of one and two threads each asking for a slow stream (N tokens, 10 ms apart)
    engine = EndpointEngine(server.base_url, "slow", concurrency=1)
    records: list[RequestRecord] = []
    threads = [
        threading.Thread(target=lambda i=i: records.append(engine.generate(GenerationRequest(i, 5, N))))
        for i in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    engine.close()
    # Then both succeed, one after the other on the one connection
    assert all(r.ok for r in records) and server.connections == 1
    first, second = sorted(records, key=lambda r: r.token_ns[0])
    assert second.token_ns[0] >= first.token_ns[-1]


def test_a_connection_the_server_closed_while_idle_is_replaced_and_nothing_is_sent_twice(
    server: MockEndpoint,
) -> None:
    # Given a server that closes a connection idle for 0.1 s, and an engine that made one request
    server.idle_timeout_s = 0.1
    engine = EndpointEngine(server.base_url, "ok", concurrency=1)
    try:
        first = engine.generate(GenerationRequest(0, 5, N))
        time.sleep(0.4)  # the server has closed the pooled connection
        second = engine.generate(GenerationRequest(1, 5, N))
    finally:
        engine.close()
    # Then the second request succeeds on a fresh connection, and the server saw 2 POSTs, not 3
    assert first.error is None and second.error is None
    assert server.connections == 2
    assert [path for path, _ in server.seen] == ["/v1/chat/completions"] * 2


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (made by the openssl command) and its key."""
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https_streams_over_one_verified_connection(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a TLS endpoint whose certificate the environment trusts (SSL_CERT_FILE, as httpx reads it)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    with mock_endpoint(certificate) as server:
        assert server.base_url.startswith("https://")
        records = _run(server, "ok", count=3, concurrency=1)
        # Then every request streams all its tokens over the one connection the probe opened
        assert [r.error for r in records] == [None] * 3 and all(r.output_tokens == N for r in records)
        assert server.connections == 1
        # And where the certificate is not trusted, the request says so and nothing is sent
        monkeypatch.delenv("SSL_CERT_FILE")
        [refused] = _run(server, "ok")
        assert refused.error is not None
        assert refused.error.startswith(f"cannot connect to {server.base_url}/chat/completions: ")
        assert "CERTIFICATE_VERIFY_FAILED" in refused.error
        assert server.requests == 3


def test_timeouts_cover_the_answer_and_each_read(server: MockEndpoint) -> None:
    server.hang_s = 0.6
    started = time.perf_counter()
    [hung] = _run(server, "hang", timeout_s=0.15)
    assert hung.error == "no response within 0.15 s"
    assert time.perf_counter() - started < 0.55  # it gave up at its timeout, not the server's answer
    [stalled] = _run(server, "stall", timeout_s=0.15)
    assert stalled.error == "stream stalled 0.15 s after 2 tokens"


def test_the_time_to_first_token_is_the_servers_within_2_ms(server: MockEndpoint) -> None:
    # Given a server that writes its first chunk 20 ms after each request, noting when (same clock)
    server.token_delay_s = 0.02
    records = _run(server, "slow", count=10, concurrency=1)
    assert all(r.ok for r in records)
    truth = server.first_token_ns[-10:]
    # Then no token is timed before the server sent it, and the median lag is under 2 ms
    lags_ms = [(r.token_ns[0] - sent) / 1e6 for r, sent in zip(records, truth, strict=True)]
    assert min(lags_ms) >= 0
    assert statistics.median(lags_ms) <= 2.0, lags_ms
    assert all(r.token_ns[0] - r.start_ns >= 20_000_000 for r in records)


def test_headers_reach_the_server_and_a_broken_header_is_the_users_mistake(server: MockEndpoint) -> None:
    _run(server, "ok", headers={"Authorization": "Bearer s3cret", "X-Trace": "1"})
    path, headers = server.seen[-1]
    assert path == "/v1/chat/completions"
    assert headers["authorization"] == "Bearer s3cret" and headers["x-trace"] == "1"
    assert headers["content-type"] == "application/json" and headers["user-agent"].startswith("mlscope/")
    with pytest.raises(UserError, match="header 'X-Bad' is not") as caught:
        EndpointEngine(server.base_url, "ok", headers={"X-Bad": "a\r\nInjected: yes"})
    assert caught.value.field == "headers"


def test_a_configured_proxy_is_honoured_through_httpx(
    server: MockEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given nothing listening at the engine's URL, and the mock endpoint as the HTTP proxy
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.server_address[1]}")
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    [record] = _run_url(dead, "ok")
    # Then the request went through the proxy (in absolute form) and streamed every token
    assert record.error is None and record.output_tokens == N
    assert server.seen[-1][0] == f"{dead}/chat/completions"
    # And with the host exempted by NO_PROXY it goes straight to the dead port
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    [direct] = _run_url(dead, "ok")
    assert direct.error == f"cannot connect to {dead}/chat/completions: connection refused"


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("ok", None),
        ("no_done_end", None),
        ("drop", "the stream ended after 3 tokens without [DONE]"),
        ("cut", "the stream ended after 3 tokens without [DONE]"),
        ("malformed", "malformed chunk: {{not json at all"),
        ("plain", "the endpoint answered without streaming (content-type 'application/json'"),
        ("error", "HTTP 500 from {url}/chat/completions: the model crashed (mock)"),
        ("hang", "no response within 0.2 s"),
        ("stall", "stream stalled 0.2 s after 2 tokens"),
    ],
)
def test_through_a_proxy_each_answer_is_worded_as_without_one(
    server: MockEndpoint, monkeypatch: pytest.MonkeyPatch, behaviour: str, expected: str | None
) -> None:
    # Given the mock as its own proxy (it answers the absolute-form request), so httpx carries it
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.server_address[1]}")
    server.hang_s = 0.5
    engine = EndpointEngine(server.base_url, behaviour, timeout_s=0.2)
    try:
        assert engine._transport.kind == "httpx"
        record = engine.generate(GenerationRequest(0, 5, N))
    finally:
        engine.close()
    # Then the record reads as the lean client's would
    assert server.seen[-1][0] == f"{server.base_url}/chat/completions"
    if expected is None:
        assert record.error is None and record.output_tokens == N
    else:
        assert record.error is not None and expected.format(url=server.base_url) in record.error


def _run_url(url: str, model: str) -> list[RequestRecord]:
    engine = EndpointEngine(url, model)
    try:
        return [engine.generate(GenerationRequest(0, 5, N))]
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("environment", "url", "expected"),
    [
        ({}, "http://10.0.0.5:8000/v1", False),
        ({"HTTP_PROXY": "http://proxy:3128"}, "http://10.0.0.5:8000/v1", True),
        ({"HTTP_PROXY": "http://proxy:3128"}, "https://api.example.com/v1", False),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "https://api.example.com/v1", True),
        ({"ALL_PROXY": "http://proxy:3128"}, "https://api.example.com/v1", True),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "*"}, "http://10.0.0.5/v1", False),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "example.com"}, "http://gpu.example.com/v1", False),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "example.com"}, "http://example.com/v1", False),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "example.com"}, "http://badexample.com/v1", True),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": ".example.com"}, "http://gpu.example.com/v1", False),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "10.0.0.0/8"}, "http://10.0.0.5/v1", True),
    ],
)
def test_the_proxy_reading_leaves_to_httpx_what_it_cannot_settle(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], url: str, expected: bool
) -> None:
    for scheme in ("http", "https", "all", "no"):
        monkeypatch.delenv(f"{scheme}_proxy", raising=False)
        monkeypatch.delenv(f"{scheme.upper()}_PROXY", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert proxied(url) is expected


STREAM = (
    b": keep-alive comment\r\n"
    b'data: {"a": 1}\r\n\r\n'
    b"event: message\n"
    b'data: {"b":\n'
    b"data: 2}\n\n"
    b"data:[DONE]\r\r"
    b"data: tail without a blank line"
)


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)])
def test_events_are_split_alike_however_the_bytes_arrive(size: int) -> None:
    pieces = iter([STREAM[i : i + size] for i in range(0, len(STREAM), size)])
    assert list(sse_events(pieces)) == [b'{"a": 1}', b'{"b":\n2}', b"[DONE]", b"tail without a blank line"]


def _chat(delta: dict[str, Any], finish: Any = None, **extra: Any) -> dict[str, Any]:
    return {"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


CHUNKS = [
    _chat({"content": " the"}),
    _chat({"reasoning_content": "hmm"}),
    _chat({"role": "assistant", "content": ""}),
    _chat({"content": ""}, "stop"),
    _chat({"content": "x"}, "length"),
    _chat({"content": "x"}, usage=None),
    _chat({"content": "x"}, usage={"completion_tokens": 3}),
    _chat({"content": '"usage": {}, "finish_reason": "stop"'}),
    {"choices": [{"index": 0, "delta": {}}, {"index": 1, "delta": {"content": "x"}}]},
    {"choices": [{"index": 0, "message": {"content": "not a delta"}, "delta": {}}]},
    {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 8}},
    {"error": {"message": "boom"}},
]


def _full(chunk: dict[str, Any]) -> tuple[bool, Any, Any, Any]:
    """What a full parse takes from a chat chunk: text?, finish_reason, usage, error."""
    choice = (chunk.get("choices") or [{}])[0]
    delta = choice.get("delta") or {}
    text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
    return bool(text), choice.get("finish_reason"), chunk.get("usage"), chunk.get("error")


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
@pytest.mark.parametrize("chunk", CHUNKS)
def test_the_fast_path_takes_only_chunks_a_full_parse_reads_as_text_alone(
    chunk: dict[str, Any], separators: tuple[str, str]
) -> None:
    data = json.dumps(chunk, separators=separators).encode()
    if plain_text_chunk(data, text_pattern("chat")):
        assert _full(chunk) == (True, None, None, None)


@pytest.mark.parametrize(
    "data",
    [
        # vLLM and SGLang (compact), the mock and Python servers (spaced), a completions chunk
        b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}',
        b'{"id": "mock", "choices": [{"index": 0, "finish_reason": null, "delta": {"content": "w "}}]}',
    ],
)
def test_the_fast_path_takes_the_common_text_chunks(data: bytes) -> None:
    assert plain_text_chunk(data, text_pattern("chat"))
    completions = b'{"id":"c","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null}]}'
    assert plain_text_chunk(completions, text_pattern("completions"))
    assert not plain_text_chunk(completions, text_pattern("chat"))
