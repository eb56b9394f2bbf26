"""Server-Sent Events from a byte stream, and the cheap test that spares most chunks a JSON parse.

A completion streams one event per token or so; at hundreds of requests a second the per-event cost
is the client's CPU, and so the request rate it can measure. Events are split from the bytes as they
arrive (lines end at LF, CRLF or CR, as the SSE format says; a line may straddle two reads), and an
event's data lines are joined with LF.

Most events are plain text chunks: one choice whose text is not empty, no finish_reason, no usage, no
error. All the engine takes from one is "a token arrived now", and `plain_text_chunk` recognises
that shape from the bytes; every other chunk (the first with a role and no text, the last with its
finish_reason, usage, errors, several choices, anything unusual) is parsed as JSON in full.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["plain_text_chunk", "sse_events", "text_pattern"]

# The first choice's text, as a string that is not empty: choices[0].delta's content (or a reasoning
# model's reasoning_content / reasoning) for chat, choices[0].text for completions. `[^{}]*?` keeps
# the match inside the first choice (and its delta) before any nested object: a chunk shaped
# otherwise is parsed in full. A key cannot be forged by text inside a string, whose quotes are
# escaped.
_FIRST_CHOICE = rb'"choices"\s*:\s*\[\s*\{[^{}]*?'
_TEXT = {
    "chat": re.compile(
        _FIRST_CHOICE + rb'"delta"\s*:\s*\{[^{}]*?"(?:content|reasoning_content|reasoning)"\s*:\s*"[^"]'
    ),
    "completions": re.compile(_FIRST_CHOICE + rb'"text"\s*:\s*"[^"]'),
}
# A finish_reason that is not null (the lookahead stops \s* from backing off to " null").
_FINISHED = re.compile(rb'"finish_reason"\s*:\s*(?!\s|null\b)')


def text_pattern(api: str) -> re.Pattern[bytes]:
    return _TEXT[api]


def plain_text_chunk(data: bytes, text: re.Pattern[bytes]) -> bool:
    """True when `data` is a chunk that carries text and nothing else the engine reads: an object
    with no "usage" or "error" key anywhere, no finish_reason other than null, and a non-empty text
    in its first choice. False means "parse it": never that the chunk lacks text.

    The bytes are not checked to be valid JSON beyond their braces: a text chunk garbled inside
    would count as a token where a full parse would call it malformed.
    """
    return (
        data[:1] == b"{"
        and data[-1:] == b"}"
        and b'"usage"' not in data
        and b'"error"' not in data
        and (b'"finish_reason"' not in data or _FINISHED.search(data) is None)
        and text.search(data) is not None
    )


def sse_events(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """The data of each event: its data lines joined, dispatched at the blank line that ends it (or
    at the end of the stream); comments and other fields skipped."""
    pending = b""
    data: list[bytes] = []
    after_cr = False
    for piece in pieces:
        if after_cr:  # the last piece ended in CR: an LF starting this one is the same line ending
            after_cr = False
            if piece[:1] == b"\n":
                piece = piece[1:]
        if pending:
            piece = pending + piece
        if b"\r" in piece:
            after_cr = piece[-1:] == b"\r"
            piece = piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = piece.split(b"\n")
        pending = lines.pop()
        for line in lines:
            if not line:
                if data:
                    yield data[0] if len(data) == 1 else b"\n".join(data)
                    data = []
            elif line[:5] == b"data:":
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line == b"data":
                data.append(b"")
    if pending[:5] == b"data:":
        data.append(pending[6:] if pending[5:6] == b" " else pending[5:])
    elif pending == b"data":
        data.append(b"")
    if data:
        yield data[0] if len(data) == 1 else b"\n".join(data)
