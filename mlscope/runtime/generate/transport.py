"""How the endpoint engine reaches its server: mlscope's lean HTTP/1.1 client (`http11`) wherever it
can, httpx where only httpx does the job as before.

The one case is a proxy: httpx honours HTTP_PROXY / HTTPS_PROXY / ALL_PROXY and NO_PROXY from the
environment (and the system's settings where `urllib` reads them), and the lean client speaks only to
the server itself. So when a proxy is configured for the URL's scheme and NO_PROXY does not plainly
exempt the host, requests go through httpx, which decides as it always did; otherwise (no proxy, or
the host exempted) they go straight to the server. Both present the same small surface
(`post`, `get`, `close`; a response's `status`, `headers`, `pieces()`, `read()`, `release()`) and the
same failures (`ConnectFailed`, `TimedOut`, `Disconnected`, `TransportError`), so the engine words
every error alike whichever carried the request. TLS verification is httpx's own context on both
(certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR).
"""

from __future__ import annotations

import os
import ssl
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from mlscope.runtime.generate.http11 import ConnectFailed, Disconnected, Http11Pool, TimedOut, TransportError

__all__ = ["Answer", "Transport", "open_transport", "proxied"]


class Answer(Protocol):
    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...

    def pieces(self) -> Iterator[bytes]: ...
    def read(self) -> bytes: ...
    def release(self) -> None: ...


class Transport(Protocol):
    #: "http/1.1" (mlscope's client) or "httpx" (through a proxy).
    kind: str

    def post(self, target: str, payload: bytes) -> Answer: ...
    def get(self, target: str, timeout_s: float | None = None) -> Answer: ...
    def close(self) -> None: ...


def open_transport(
    base_url: str, headers: Mapping[str, str], timeout_s: float, max_connections: int, httpx: Any
) -> Transport:
    """The lean client for `base_url`, or httpx when a proxy may apply to it (see the module)."""
    if proxied(base_url):
        return _HttpxTransport(base_url, headers, timeout_s, max_connections, httpx)
    context = _tls_context(httpx) if base_url.startswith("https:") else None
    return Http11Pool(base_url, headers, timeout_s, max_connections, ssl_context=context)


def _tls_context(httpx: Any) -> ssl.SSLContext:
    """httpx's verifying context, so https is trusted exactly as it was (certifi's roots, or the
    SSL_CERT_FILE / SSL_CERT_DIR named in the environment)."""
    make = getattr(httpx, "create_ssl_context", None)
    if make is not None:
        return make()
    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    import certifi  # httpx's own dependency

    return ssl.create_default_context(cafile=certifi.where())


def proxied(url: str) -> bool:
    """True when the environment configures a proxy for this URL's scheme and NO_PROXY does not
    plainly exempt its host ("*", the host itself, or a domain it is in); anything NO_PROXY says
    that this reading cannot settle (a scheme, a port, a network) counts as maybe proxied."""
    info = urllib.request.getproxies()
    parts = urlsplit(url)
    if not (info.get(parts.scheme) or info.get("all")):
        return False
    host = (parts.hostname or "").lower()
    for entry in (item.strip().lower() for item in info.get("no", "").split(",")):
        if entry == "*":
            return False
        if not entry or "://" in entry:
            continue
        if host == entry or (entry.startswith(".") and host.endswith(entry)) or host.endswith("." + entry):
            return False
    return True


class _HttpxAnswer:
    def __init__(self, response: Any, httpx: Any) -> None:
        self._response = response
        self._httpx = httpx
        self.status: int = response.status_code
        self.headers: Mapping[str, str] = response.headers

    def pieces(self) -> Iterator[bytes]:
        with _mapped(self._httpx):
            yield from self._response.iter_bytes()

    def read(self) -> bytes:
        return b"".join(self.pieces())

    def release(self) -> None:
        self._response.close()


class _HttpxTransport:
    """httpx's client behind the lean client's surface, for endpoints reached through a proxy."""

    kind = "httpx"

    def __init__(
        self, base_url: str, headers: Mapping[str, str], timeout_s: float, max_connections: int, httpx: Any
    ) -> None:
        self._httpx = httpx
        parts = urlsplit(base_url)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._timeout_s = timeout_s
        # pool=None: a request waiting for a free connection waits, it does not fail.
        self._client = httpx.Client(
            headers=dict(headers),
            timeout=httpx.Timeout(timeout_s, pool=None),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    def post(self, target: str, payload: bytes) -> Answer:
        request = self._client.build_request(
            "POST", self._origin + target, content=payload, headers={"content-type": "application/json"}
        )
        return self._open(request)

    def get(self, target: str, timeout_s: float | None = None) -> Answer:
        timeout = self._httpx.Timeout(timeout_s or self._timeout_s, pool=None)
        return self._open(self._client.build_request("GET", self._origin + target, timeout=timeout))

    def close(self) -> None:
        self._client.close()

    def _open(self, request: Any) -> Answer:
        with _mapped(self._httpx):
            response = self._client.send(request, stream=True)
        return _HttpxAnswer(response, self._httpx)


class _mapped:
    """httpx's exceptions as the transport's: the engine words both clients' failures alike."""

    def __init__(self, httpx: Any) -> None:
        self._httpx = httpx

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: object) -> None:
        httpx = self._httpx
        if exc is None or not isinstance(exc, httpx.HTTPError):
            return
        if isinstance(exc, httpx.ConnectError):
            raise ConnectFailed(str(exc) or type(exc).__name__) from None
        if isinstance(exc, httpx.TimeoutException):
            raise TimedOut(str(exc) or "timed out") from None
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
            raise Disconnected(str(exc) or type(exc).__name__) from None
        raise TransportError(f"{type(exc).__name__}: {exc}") from None
