"""The endpoint engine against a real HTTP server on a socket: the mock endpoint for every way a
server misbehaves (a real inference server cannot be made to drop a stream on demand), and once,
marked slow, the real `transformers serve` process on a tiny model directory."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlscope.contract.errors import UserError
from mlscope.runtime.generate.endpoint import EndpointEngine, synthetic_prompt, tokenizer_prompt
from mlscope.runtime.generate.records import GenerationRequest, RequestRecord
from mlscope.runtime.predictors.base import PredictorError
from tests.fixtures.mock_endpoint import MockEndpoint, mock_endpoint

N = 8


@pytest.fixture(scope="module")
def server() -> Iterator[MockEndpoint]:
    with mock_endpoint() as running:
        yield running


def _run(server: MockEndpoint, behaviour: str, api: str = "chat", **options: object) -> RequestRecord:
    engine = EndpointEngine(server.base_url, behaviour, api=api, **options)  # type: ignore[arg-type]
    try:
        return engine.generate(GenerationRequest(index=0, prompt_tokens=5, output_tokens=N))
    finally:
        engine.close()


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_an_ok_stream_records_every_token_in_order_and_the_servers_usage(
    server: MockEndpoint, api: str
) -> None:
    # When a request streams N one-token chunks
    record = _run(server, "ok", api=api)
    # Then the record holds N arrival times, the usage counts, and TTFT < end to end
    assert record.error is None
    assert record.output_tokens == N and len(record.token_ns) == N and record.chunk_tokens == [1] * N
    assert record.prompt_tokens == 7  # the mock's usage, not the requested 5
    assert record.token_ns == sorted(record.token_ns)
    assert record.start_ns < record.token_ns[0] <= record.token_ns[-1] <= record.end_ns
    assert record.token_ns[0] - record.start_ns < record.end_ns - record.start_ns


def test_a_stream_ending_cleanly_after_its_finish_reason_needs_no_done(server: MockEndpoint) -> None:
    # `transformers serve` ends this way: a finish_reason and usage, then the end of the body
    record = _run(server, "no_done_end")
    assert record.error is None and record.output_tokens == N


def test_requests_read_to_the_end_reuse_one_connection(server: MockEndpoint) -> None:
    # Given an engine that has made its probe (GET /models), and the connections the server saw so far
    engine = EndpointEngine(server.base_url, "ok", concurrency=1)
    before = server.connections
    # When it makes 5 requests one after the other
    records = [engine.generate(GenerationRequest(i, 5, N)) for i in range(5)]
    engine.close()
    # Then all went over the one connection the probe opened (a new one each would add a handshake)
    assert all(r.ok for r in records)
    assert server.connections == before


def test_a_body_left_open_after_done_does_not_fail_or_lengthen_the_request(server: MockEndpoint) -> None:
    # Given a server that sends [DONE] and then holds the body open longer than the engine waits
    server.hang_s = 0.5
    record = _run(server, "linger", timeout_s=0.2)
    returned_ns = time.perf_counter_ns()
    # Then the request is complete and ends at [DONE], not when the wait for the rest gave up (a
    # read timeout never fires early, so the call returned at least 0.2 s after the recorded end)
    assert record.error is None and record.output_tokens == N
    assert returned_ns - record.end_ns >= 200_000_000


def test_extra_body_that_is_not_json_is_the_users_mistake(server: MockEndpoint) -> None:
    with pytest.raises(UserError, match="extra_body must be JSON") as caught:
        EndpointEngine(server.base_url, "ok", extra_body={"when": object()})
    assert caught.value.field == "extra_body"


def test_chunks_of_several_tokens_take_the_count_from_usage(server: MockEndpoint) -> None:
    record = _run(server, "multi")
    assert record.error is None
    assert len(record.token_ns) == N // 2 and record.output_tokens == N


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("drop", "the stream ended after 3 tokens without [DONE]"),
        ("no_done", f"the stream ended after {N} tokens without [DONE]"),
        ("silent", f"the server reported {N} tokens but streamed no text"),
        ("malformed", "malformed chunk: {not json at all"),
        ("plain", "the endpoint answered without streaming (content-type 'application/json'"),
        ("error", "HTTP 500 from http://127.0.0.1:"),
        ("busy", "HTTP 429 from"),
        ("stop_early", f"stopped early: 3 of {N} tokens (finish_reason 'stop'); pass ignore_eos"),
    ],
)
def test_each_misbehaviour_is_the_records_error_never_an_exception(
    server: MockEndpoint, behaviour: str, expected: str
) -> None:
    record = _run(server, behaviour)
    assert record.error is not None and expected in record.error
    assert record.end_ns >= record.start_ns > 0


def test_an_http_error_carries_the_servers_message(server: MockEndpoint) -> None:
    record = _run(server, "error")
    assert record.error is not None and record.error.endswith("the model crashed (mock)")


def test_a_dropped_stream_keeps_the_tokens_that_arrived(server: MockEndpoint) -> None:
    record = _run(server, "drop")
    assert len(record.token_ns) == 3 and record.output_tokens == 3


def test_timeouts_say_whether_the_answer_or_the_stream_stalled(server: MockEndpoint) -> None:
    server.hang_s = 1.0
    assert _run(server, "hang", timeout_s=0.2).error == "no response within 0.2 s"
    assert _run(server, "stall", timeout_s=0.2).error == "stream stalled 0.2 s after 2 tokens"


def test_a_server_refusing_ignore_eos_fields_is_told_which_option(server: MockEndpoint) -> None:
    # Given a server that answers 422 to unknown fields, as `transformers serve` does
    record = _run(server, "strict", ignore_eos=True)
    # Then the error names the option to drop; without it the same server streams fine
    assert record.error is not None and "HTTP 422" in record.error
    assert "run without ignore_eos" in record.error
    assert _run(server, "strict").error is None


def test_a_server_failing_some_requests_yields_a_failure_count(server: MockEndpoint) -> None:
    engine = EndpointEngine(server.base_url, "fail_some")
    try:
        records = [engine.generate(GenerationRequest(i, 5, N)) for i in range(9)]
    finally:
        engine.close()
    failed = [r for r in records if not r.ok]
    assert len(failed) == 3 and all("HTTP 500" in (r.error or "") for r in failed)


def test_a_dead_port_fails_check_reachable_and_each_request_says_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Given nothing listening (the port was free a moment ago)
    engine = EndpointEngine(f"http://127.0.0.1:{port}/v1", "m")
    try:
        assert engine.max_context is None
        with pytest.raises(
            PredictorError, match=rf"cannot reach http://127.0.0.1:{port}/v1: connection refused"
        ):
            engine.check_reachable()
        record = engine.generate(GenerationRequest(0, 5, N))
        assert (
            record.error
            == f"cannot connect to http://127.0.0.1:{port}/v1/chat/completions: connection refused"
        )
    finally:
        engine.close()


@pytest.mark.parametrize(
    "url", ["localhost:8000/v1", "ftp://host/v1", "http://", "http://host:port/v1", "nonsense"]
)
def test_a_url_mlscope_cannot_use_is_the_users_mistake(url: str) -> None:
    with pytest.raises(UserError) as caught:
        EndpointEngine(url, "m")
    assert caught.value.field == "endpoint"


def test_describe_and_max_context_come_from_the_server(server: MockEndpoint) -> None:
    engine = EndpointEngine(server.base_url + "/", "ok", api="completions")
    try:
        assert engine.max_context == 2048
        assert engine.describe() == {
            "name": "endpoint",
            "version": "mock-openai/1.0",
            "url": server.base_url,
            "model": "ok",
            "api": "completions",
        }
    finally:
        engine.close()


def test_one_engine_serves_many_threads_at_once(server: MockEndpoint) -> None:
    # Given one engine shared by 8 threads, 5 requests each
    engine = EndpointEngine(server.base_url, "ok", concurrency=8)
    records: list[RequestRecord] = []
    lock = threading.Lock()

    def issue(thread: int) -> None:
        for i in range(5):
            record = engine.generate(GenerationRequest(thread * 5 + i, 5, N))
            with lock:
                records.append(record)

    threads = [threading.Thread(target=issue, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    engine.close()
    # Then all 40 succeed with every token
    assert len(records) == 40 and all(r.ok and r.output_tokens == N for r in records)
    assert sorted(r.index for r in records) == list(range(40))


def test_prompts_are_deterministic_per_seed_and_index_and_about_the_length() -> None:
    assert synthetic_prompt(50, 1, 2) == synthetic_prompt(50, 1, 2)
    assert synthetic_prompt(50, 1, 2) != synthetic_prompt(50, 1, 3) != synthetic_prompt(50, 2, 2)
    assert len(synthetic_prompt(50, 0, 0).split()) == 50


@pytest.fixture(scope="module")
def tiny_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.fixtures.generative import tiny_generative_directory

    return tiny_generative_directory(tmp_path_factory.mktemp("generative") / "tiny")


@pytest.mark.slow
def test_prompts_from_the_models_tokenizer_are_exactly_the_tokens_asked(tiny_directory: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_directory / "tokenizer.json"))
    prompt = tokenizer_prompt(tiny_directory)
    for n in (1, 16, 200):
        assert len(tokenizer.encode(prompt(n, 0, 3), add_special_tokens=False).ids) == n
    assert prompt(16, 0, 3) == prompt(16, 0, 3) != prompt(16, 0, 4)


@pytest.mark.slow
def test_a_real_transformers_server_streams_exactly_the_tokens_asked(tiny_directory: Path) -> None:
    from mlscope.runtime.generate.serve import LocalServer

    # Given a tiny random model directory whose generation config names no end-of-sequence token
    directory = tiny_directory
    config = (directory / "generation_config.json").read_text()
    assert "eos_token_id" not in config or '"eos_token_id": null' in config
    # When `transformers serve` serves it and each api is asked 3 requests of 12 tokens
    with LocalServer(directory) as served:
        assert served.max_context == 512  # the fixture's n_positions
        for api in ("chat", "completions"):
            engine = EndpointEngine(
                served.base_url,
                served.model,
                api=api,
                timeout_s=60,
                tokenizer_directory=directory,
                max_context=served.max_context,
            )
            try:
                engine.check_reachable()
                records = [engine.generate(GenerationRequest(i, 16, 12)) for i in range(3)]
                described = engine.describe()
            finally:
                engine.close()
            # Then each returns exactly 12 tokens, the first before the end
            for record in records:
                assert record.error is None, (record.error, served.log_tail())
                assert record.output_tokens == 12
                assert record.prompt_tokens == 16  # the server's count of the prompt made for 16
                assert record.token_ns[0] - record.start_ns < record.end_ns - record.start_ns
            assert described["version"] != "unknown"
        # And asked to ignore end-of-sequence, this server (which refuses unknown fields) is named the option
        strict = EndpointEngine(served.base_url, served.model, ignore_eos=True)
        refused = strict.generate(GenerationRequest(0, 16, 12))
        strict.close()
        assert refused.error is not None and "HTTP 422" in refused.error
        assert "run without ignore_eos" in refused.error


def test_serving_without_fastapi_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from mlscope.runtime.generate.serve import LocalServer

    # Given an environment without fastapi (faked: this one has it installed)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "fastapi" else real(name)
    )
    # Then starting a server names the extra to install, and nothing is started
    server = LocalServer(tmp_path)
    with pytest.raises(UserError, match=r"pip install 'mlscope\[generate\]' \(fastapi is not installed\)"):
        server.start()
    assert server.log_path is None


def test_serving_a_directory_that_does_not_exist_is_the_users_mistake(tmp_path: Path) -> None:
    from mlscope.runtime.generate.serve import LocalServer

    with pytest.raises(UserError, match="no model directory at") as caught:
        LocalServer(tmp_path / "missing").start()
    assert caught.value.field == "directory"


@pytest.mark.slow
def test_a_server_that_cannot_load_the_model_fails_with_its_last_lines(tmp_path: Path) -> None:
    from mlscope.runtime.generate.serve import LocalServer

    # Given a directory with no model in it, which `transformers serve` fails to load
    (tmp_path / "empty").mkdir()
    # Then starting it fails with the exit and the server's own words, and no process is left
    server = LocalServer(tmp_path / "empty", startup_timeout_s=120)
    with pytest.raises(
        PredictorError, match=r"transformers serve exited with code \d+ before answering"
    ) as caught:
        server.start()
    assert "Error" in str(caught.value) and str(tmp_path / "empty") in str(caught.value)
    assert server._process is None
