"""A lean HTTP/1.1 client for the endpoint engine: plain sockets (TLS for https), a keep-alive pool
shared by threads, and only what streaming a completion needs.

Why not httpx: its pure-Python layers (httpx, httpcore, h11) cost client CPU on every streamed
request, and on a small machine the client's CPU is what bounds the request rate mlscope can
measure. This client builds each request's bytes in one piece, parses the status line and headers
minimally, and hands the body on as the bytes arrive: Transfer-Encoding: chunked, Content-Length, or
to the connection's close. It sends no Accept-Encoding, so a server answers uncompressed; a gzip or
deflate body is inflated all the same.

Failures are exceptions for the caller to word: `ConnectFailed` (nothing accepted the connection),
`TimedOut` (connect, send or a read waited longer than the timeout), `Disconnected` (the server
closed or broke the connection, or answered with something that is not HTTP/1.x). A pooled
connection the server closed while it was idle is noticed before the request is sent on it (it is
readable: an idle connection has nothing to say) and replaced by a fresh one; a request whose bytes
could not be sent on a reused connection is sent once more on a fresh one. A request that was sent
is never sent again: a POST asks for a generation.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import zlib
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

from mlscope.contract.errors import MlscopeError

__all__ = ["ConnectFailed", "Disconnected", "Http11Pool", "Http11Response", "TimedOut", "TransportError"]

_RECV = 65536
_HEAD_LIMIT = 65536


class TransportError(MlscopeError):
    """A request that got no complete answer; the message says why."""


class ConnectFailed(TransportError):
    """No connection: refused, a name that does not resolve, a TLS handshake that failed."""


class TimedOut(TransportError):
    """Connecting, sending or one read waited longer than the timeout."""


class Disconnected(TransportError):
    """The server closed or broke the connection, or answered with something that is not HTTP/1.x."""


class _Connection:
    """One socket and the bytes read from it that no response has used yet."""

    __slots__ = ("buffer", "poller", "sock", "timeout")

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.buffer = b""
        self.timeout = timeout
        self.poller = None
        if hasattr(select, "poll"):
            self.poller = select.poll()
            self.poller.register(sock, select.POLLIN)

    def stale(self) -> bool:
        """True when an idle connection has something to read: the server's close (or bytes no
        request asked for); either way it cannot carry the next request."""
        if self.buffer:
            return True
        if self.poller is not None:
            return bool(self.poller.poll(0))
        return bool(select.select([self.sock], [], [], 0)[0])

    def recv(self) -> bytes:
        try:
            return self.sock.recv(_RECV)
        except TimeoutError:
            raise TimedOut("no data within the timeout") from None
        except OSError as exc:
            raise Disconnected(f"the connection broke: {exc}") from None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class Http11Pool:
    """Keep-alive connections to one origin, shared by threads: at most `max_connections` requests in
    flight (a request beyond them waits for one to end, as long as it takes).

    Args:
        base_url: "http(s)://host[:port]/..."; requests name their target (path and query).
        headers: sent with every request, over the defaults (User-Agent, Accept, Content-Type);
            a user name and password in the URL are sent as Basic authorization, as httpx does.
        timeout_s: the longest wait to connect, to send, and for each read.
        max_connections: the pool's size.
        ssl_context: for https (the caller's, so verification matches its other client).
    """

    kind = "http/1.1"

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        timeout_s: float,
        max_connections: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.tls else 80)
        self.timeout_s = timeout_s
        if self.tls:
            self._ssl = ssl_context or ssl.create_default_context()
            self._ssl.set_alpn_protocols(["http/1.1"])
        named = self.host if self.host.isascii() else self.host.encode("idna").decode("ascii")
        shown = f"[{named}]" if ":" in named else named
        default_port = 443 if self.tls else 80
        authority = shown if self.port == default_port else f"{shown}:{self.port}"
        self._headers = {"host": ("Host", authority)}
        for name, value in (("User-Agent", _user_agent()), ("Accept", "*/*")):
            self._headers[name.lower()] = (name, value)
        if parts.username is not None or parts.password is not None:
            self._headers["authorization"] = ("Authorization", _basic(parts.username, parts.password))
        for name, value in headers.items():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self._headers[name.lower()] = (name, value)
        self._heads: dict[tuple[str, str], bytes] = {}
        self._limit = max(1, max_connections)
        self._busy = 0
        self._waiting = 0
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._closed = False
        #: connections opened so far (what reuse saves shows here).
        self.opened = 0

    # -- requests ----------------------------------------------------------------------------------

    def post(self, target: str, payload: bytes, content_type: str = "application/json") -> Http11Response:
        """Send a POST and read its status and headers; the body is the response's to read."""
        head = self._head("POST", target, content_type)
        return self._exchange(head + b"%d\r\n\r\n" % len(payload) + payload, self.timeout_s)

    def get(self, target: str, timeout_s: float | None = None) -> Http11Response:
        head = self._head("GET", target, None)
        return self._exchange(head, timeout_s or self.timeout_s)

    def close(self) -> None:
        """Close the idle connections now, and each busy one when its response is released."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _head(self, method: str, target: str, content_type: str | None) -> bytes:
        """The request's bytes before the body's length (after it, for a GET), built once per target."""
        key = (method, target)
        head = self._heads.get(key)
        if head is None:
            headers = dict(self._headers)
            if content_type is not None:
                headers.setdefault("content-type", ("Content-Type", content_type))
            lines = [f"{method} {target} HTTP/1.1", *(f"{name}: {value}" for name, value in headers.values())]
            text = "\r\n".join(lines) + "\r\n"
            head = text.encode("latin-1") + (b"Content-Length: " if method == "POST" else b"\r\n")
            self._heads[key] = head
        return head

    def _exchange(self, request: bytes, timeout: float) -> Http11Response:
        connection, reused = self._acquire()
        try:
            try:
                self._send(connection, request, timeout)
            except Disconnected:
                if not reused:
                    raise
                # The server closed this idle connection as it was taken: nothing reached a server
                # that could answer, so the request goes once more on a fresh connection.
                connection.close()
                connection = self._connect(timeout)
                self._send(connection, request, timeout)
            return Http11Response(self, connection)
        except BaseException:
            self._release(connection, False)
            raise

    def _send(self, connection: _Connection, request: bytes, timeout: float) -> None:
        if connection.timeout != timeout:
            connection.sock.settimeout(timeout)
            connection.timeout = timeout
        try:
            connection.sock.sendall(request)
        except TimeoutError:
            raise TimedOut("sending the request timed out") from None
        except OSError as exc:
            raise Disconnected(f"sending the request failed: {exc}") from None

    # -- the pool ----------------------------------------------------------------------------------

    def _acquire(self) -> tuple[_Connection, bool]:
        """A pooled connection that is still open (True), else a new one (False)."""
        stale: list[_Connection] = []
        with self._lock:
            while self._busy >= self._limit:
                self._waiting += 1
                self._freed.wait()
                self._waiting -= 1
            self._busy += 1
            connection = None
            while self._idle:
                candidate = self._idle.pop()
                if candidate.stale():
                    stale.append(candidate)
                else:
                    connection = candidate
                    break
        for old in stale:
            old.close()
        if connection is not None:
            return connection, True
        try:
            return self._connect(self.timeout_s), False
        except BaseException:
            self._release(None, False)
            raise

    def _connect(self, timeout: float) -> _Connection:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
        except TimeoutError:
            raise TimedOut(f"connecting to {self.host}:{self.port} timed out") from None
        except OSError as exc:
            raise ConnectFailed(str(exc) or type(exc).__name__) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls:
                sock = self._ssl.wrap_socket(sock, server_hostname=self.host)
        except TimeoutError:
            sock.close()
            raise TimedOut(f"the TLS handshake with {self.host}:{self.port} timed out") from None
        except OSError as exc:
            sock.close()
            raise ConnectFailed(str(exc) or type(exc).__name__) from None
        with self._lock:
            self.opened += 1
        return _Connection(sock, timeout)

    def _release(self, connection: _Connection | None, reusable: bool) -> None:
        with self._lock:
            self._busy -= 1
            keep = reusable and not self._closed and connection is not None
            if keep:
                self._idle.append(connection)  # type: ignore[arg-type]
            if self._waiting:
                self._freed.notify()
        if connection is not None and not keep:
            connection.close()


class Http11Response:
    """A response whose status and headers were read; `pieces()` or `read()` takes its body, and
    `release()` (always, once) returns the connection to the pool when the body was read to its end.

    Attributes:
        status: the status code.
        headers: names in lower case; a repeated header's values joined with ", ".
    """

    def __init__(self, pool: Http11Pool, connection: _Connection) -> None:
        self._pool = pool
        self._connection: _Connection | None = connection
        self._complete = False
        while True:
            self.status, self.headers, keep_alive = _read_head(connection)
            if not 100 <= self.status < 200:
                break  # 100 Continue, 103 Early Hints: a final answer follows
        self._keep_alive = keep_alive
        if self.status in (204, 304):
            self._framing, self._length = "none", 0
        elif "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._framing, self._length = "chunked", 0
        elif "content-length" in self.headers:
            try:
                self._length = int(self.headers["content-length"])
            except ValueError:
                raise Disconnected(
                    f"the answer's Content-Length is not a number: {self.headers['content-length']!r}"
                ) from None
            self._framing = "length"
        else:
            self._framing, self._length = "close", 0
            self._keep_alive = False

    def pieces(self) -> Iterator[bytes]:
        """The body as it arrives, de-chunked (and inflated, were it compressed)."""
        encoding = self.headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("", "identity"):
            return self._raw()
        return _inflated(self._raw(), encoding)

    def read(self) -> bytes:
        return b"".join(self.pieces())

    def release(self) -> None:
        """Hand the connection back (reusable only when the body was read to its end)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool._release(connection, self._complete and self._keep_alive)

    def _raw(self) -> Iterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        if self._framing == "chunked":
            yield from self._chunked(connection)
        elif self._framing == "length":
            left = self._length
            data, connection.buffer = connection.buffer, b""
            while True:
                if len(data) >= left:
                    connection.buffer = data[left:]
                    if left:
                        yield data[:left]
                    break
                if data:
                    left -= len(data)
                    yield data
                data = connection.recv()
                if not data:
                    raise Disconnected(f"the connection closed {left} bytes before the body's end")
        elif self._framing == "close":
            data, connection.buffer = connection.buffer, b""
            while True:
                if data:
                    yield data
                data = connection.recv()
                if not data:
                    break
        self._complete = True

    def _chunked(self, connection: _Connection) -> Iterator[bytes]:
        """Transfer-Encoding: chunked; what each receive completed is handed on at once, joined."""
        data, connection.buffer = connection.buffer, b""
        position = 0
        ready: list[bytes] = []
        while True:
            end = data.find(b"\r\n", position)
            if end >= 0:
                size_field = data[position:end]
                try:
                    size = int(size_field.split(b";", 1)[0], 16)
                except ValueError:
                    raise Disconnected(f"a malformed chunk size in the body: {size_field[:40]!r}") from None
                if size == 0:
                    break
                stop = end + 2 + size
                if len(data) >= stop + 2:
                    if data[stop : stop + 2] != b"\r\n":
                        raise Disconnected("a chunk of the body does not end where its size says")
                    ready.append(data[end + 2 : stop])
                    position = stop + 2
                    continue
            elif len(data) - position > _HEAD_LIMIT:
                raise Disconnected("a chunk size line that does not end")
            if ready:
                yield ready[0] if len(ready) == 1 else b"".join(ready)
                ready = []
            more = connection.recv()
            if not more:
                raise Disconnected("the connection closed before the body's end")
            data = data[position:] + more
            position = 0
        if ready:
            yield b"".join(ready)
        # The last chunk, then trailers (usually none) up to an empty line.
        position = end + 2
        while True:
            end = data.find(b"\r\n", position)
            if end < 0:
                more = connection.recv()
                if not more:
                    raise Disconnected("the connection closed before the body's end")
                data = data[position:] + more
                position = 0
                continue
            if end == position:
                connection.buffer = data[end + 2 :]
                return
            position = end + 2


def _read_head(connection: _Connection) -> tuple[int, dict[str, str], bool]:
    """The status, the headers and whether the connection stays open, from the status line on."""
    data = connection.buffer
    while True:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(data) > _HEAD_LIMIT:
            raise Disconnected("the answer's headers do not end")
        more = connection.recv()
        if not more:
            raise Disconnected("the server closed the connection without answering")
        data += more
    connection.buffer = data[end + 4 :]
    lines = data[:end].decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise Disconnected(f"the answer is not HTTP/1.x: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            continue
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    tokens = headers.get("connection", "").lower()
    keep_alive = "close" not in tokens if version == "HTTP/1.1" else "keep-alive" in tokens
    return int(code), headers, keep_alive


def _inflated(pieces: Iterator[bytes], encoding: str) -> Iterator[bytes]:
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise Disconnected(f"the answer is encoded as {encoding!r}, which this client cannot decode")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if "gzip" in encoding else zlib.MAX_WBITS)
    try:
        for piece in pieces:
            out = inflater.decompress(piece)
            if out:
                yield out
        tail = inflater.flush()
    except zlib.error as exc:
        raise Disconnected(f"the {encoding} body does not inflate: {exc}") from None
    if tail:
        yield tail


def _user_agent() -> str:
    from importlib import metadata

    try:
        return f"mlscope/{metadata.version('mlscope')}"
    except metadata.PackageNotFoundError:
        return "mlscope"


def _basic(username: str | None, password: str | None) -> str:
    import base64
    from urllib.parse import unquote

    pair = f"{unquote(username or '')}:{unquote(password or '')}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")
