"""The Python client's own behaviour, with no mlscope API: its defaults, and what it says when the API
cannot be reached or answers something that is not a problem document (a tiny WSGI app served by
werkzeug in a thread stands in for a proxy in front of the API). The client against the real API is
tested in tests/integration/test_api.py."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from werkzeug.serving import make_server

from mlscope.client import ApiError, Client, WaitTimeout
from mlscope.contract.errors import UserError
from mlscope.contract.settings import Settings

Environ = dict[str, Any]
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def seen() -> list[Environ]:
    return []


@pytest.fixture
def proxy(seen: list[Environ]) -> Iterator[str]:
    """A server answering every request with an HTML 502, as a proxy with no API behind it does; it
    records what it received."""

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        # Read, as a proxy would: werkzeug's server drains an unread body with a blocking read that
        # can wait for the client to give up (seen with werkzeug 3.1.9).
        environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        seen.append(
            {
                "path": environ["PATH_INFO"],
                "query": environ["QUERY_STRING"],
                "auth": environ.get("HTTP_AUTHORIZATION"),
            }
        )
        start_response("502 Bad Gateway", [("Content-Type", "text/html")])
        return [b"<html><body><h1>502 Bad Gateway</h1>\n upstream   gone</body></html>"]

    server = make_server("127.0.0.1", 0, app)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join()


def test_an_api_nobody_listens_on_gets_a_message_saying_what_to_check() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(UserError) as caught:
        Client(url, "t").models()
    assert str(caught.value) == (
        f"cannot reach the mlscope API at {url}: is `mlscope api` running? (set MLSCOPE_API_URL)"
    )
    assert not isinstance(caught.value, ApiError)


def test_a_non_json_error_answer_becomes_an_api_error_with_its_text(proxy: str, seen: list[Environ]) -> None:
    with pytest.raises(ApiError) as caught:
        Client(proxy, "t").submit({"model": "m", "framework": "f"})
    assert caught.value.status == 502 and caught.value.errors == {} and caught.value.field is None
    assert str(caught.value).startswith("POST /api/v1/evaluations: 502 <html><body><h1>502 Bad Gateway</h1>")
    assert "upstream gone" in str(caught.value)
    assert seen[0]["auth"] == "Bearer t"


def test_filters_travel_as_query_text(proxy: str, seen: list[Environ]) -> None:
    since = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    with pytest.raises(ApiError):
        # (an empty list or text is no filter, and is not sent: the API refuses an empty list parameter)
        Client(proxy, "").compare(
            ids=["a1b2", "c3d4"], batch_sizes=[1, 8], since=since, models=None, frameworks=[], scenarios=""
        )
    assert seen[0]["path"] == "/api/v1/compare"
    since_text = "2024-05-01T12%3A00%3A00%2B00%3A00"
    assert seen[0]["query"] == f"ids=a1b2%2Cc3d4&batch_sizes=1%2C8&since={since_text}&format=json"
    assert seen[0]["auth"] is None  # an empty token sends none


def test_a_problem_document_makes_a_message_naming_the_field() -> None:
    problem = {
        "type": "about:blank",
        "title": "Unprocessable Entity",
        "status": 422,
        "detail": "invalid request: batch_sizes.0: must be between 1 and 65536",
        "errors": {"batch_sizes.0": ["must be between 1 and 65536"]},
    }
    error = ApiError("POST", "/api/v1/evaluations", 422, problem)
    assert str(error) == f"POST /api/v1/evaluations: 422 {problem['detail']}"
    assert error.field == "batch_sizes.0" and error.problem == problem and isinstance(error, UserError)


def test_defaults_come_from_settings_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(api_url="http://farm.example:8000/", api_tokens=("first", "second"))
    monkeypatch.delenv("MLSCOPE_API_TOKEN", raising=False)
    client = Client(settings=settings)
    assert client.api_url == "http://farm.example:8000" and client.token == "first"
    monkeypatch.setenv("MLSCOPE_API_TOKEN", "mine")
    assert Client(settings=settings).token == "mine"
    assert Client(settings=settings, token="given").token == "given"
    assert Client("http://other:1", "").token == ""


def test_a_wait_timeout_is_both_a_user_error_and_a_timeout() -> None:
    error = WaitTimeout("1 evaluation(s) had not ended after 5s: abc (queued)", ["abc"])
    assert isinstance(error, UserError) and isinstance(error, TimeoutError) and error.pending == ["abc"]


@pytest.fixture
def upload_server() -> Iterator[tuple[str, list[Environ], list[str]]]:
    """A server standing in for POST /api/v1/models: it records each request and its body, and
    answers 201 with a description, or the plain 413 of a server in front of the API to a body past
    100 bytes."""
    seen: list[Environ] = []
    answers: list[str] = []

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length)
        seen.append(
            {
                "query": environ["QUERY_STRING"],
                "type": environ.get("CONTENT_TYPE"),
                "length": length,
                "body": body,
            }
        )
        if length > 100:
            start_response("413 Request Entity Too Large", [("Content-Type", "text/plain")])
            return [b"Request Entity Too Large\n\nexceeds max_body of 100"]
        start_response(answers.pop(0) if answers else "201 Created", [("Content-Type", "application/json")])
        return [b'{"ref": "sha256:ab", "sha256": "ab", "size": 5, "name": "m"}']

    server = make_server("127.0.0.1", 0, app)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", seen, answers
    server.shutdown()
    thread.join()


def test_an_upload_streams_the_file_as_the_body(
    tmp_path: Path,
    upload_server: tuple[str, list[Environ], list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, seen, answers = upload_server
    model = tmp_path / "My Model.onnx"
    model.write_bytes(b"\x08\x07onnx")
    client = Client(url, "t")
    sent: list[object] = []
    original = client._session.request

    def spy(*args: object, **kwargs: object) -> object:
        sent.append(kwargs["data"])
        return original(*args, **kwargs)

    monkeypatch.setattr(client._session, "request", spy)
    answers.append("200 OK")
    assert client.upload_model(model)["created"] is False
    answer = client.upload_model(model)
    assert answer == {"ref": "sha256:ab", "sha256": "ab", "size": 5, "name": "m", "created": True}
    # The file object itself goes to requests, which streams it: no copy of its bytes in memory.
    assert all(hasattr(data, "read") for data in sent)
    assert seen[0] == {
        "query": "filename=My+Model.onnx",
        "type": "application/octet-stream",
        "length": 6,
        "body": b"\x08\x07onnx",
    }


def test_an_upload_too_large_for_the_server_in_front_says_so(
    tmp_path: Path, upload_server: tuple[str, list[Environ], list[str]]
) -> None:
    url, _, _ = upload_server
    model = tmp_path / "big.onnx"
    model.write_bytes(b"\0" * 1000)
    with pytest.raises(ApiError) as caught:
        Client(url, "t").upload_model(model)
    assert caught.value.status == 413
    assert str(caught.value) == (
        f"POST /api/v1/models: 413 {model} (1000 bytes) is larger than the API accepts (its "
        "MLSCOPE_MAX_UPLOAD_BYTES): Request Entity Too Large exceeds max_body of 100"
    )
    with pytest.raises(UserError, match="no such file"):
        Client(url, "t").upload_model(tmp_path / "missing.onnx")
