"""A request trace to replay (docs/generate.md, "Replaying a trace"): when each request arrived, how
long its prompt and output were, and which blocks of its prompt it shared with others.

Two layouts are read. Mooncake's JSON lines: per line `timestamp` (ms), `input_length`,
`output_length` and, optionally, `hash_ids`, the ids of the prompt's blocks of `TRACE_BLOCK_TOKENS`
tokens (two requests with one id share that block, as a server's prefix cache would see it). And
Azure's LLM inference CSV: a header naming `TIMESTAMP`, `ContextTokens` and `GeneratedTokens`, the
timestamps as date-times.

The file is read where it was named (`read_trace`, the CLI) and sent as data, the `trace` of the
request's `generation` document; `check_trace` validates that document where it arrives (a worker
never reads a client's file). Either way a bad line is one UserError naming the line and the field.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError

__all__ = [
    "MAX_TRACE_LINES",
    "TRACE_BLOCK_TOKENS",
    "TRACE_KEYS",
    "check_fits",
    "check_trace",
    "read_trace",
    "trace_identity",
]

# Mooncake's block: each hash id stands for this many prompt tokens.
TRACE_BLOCK_TOKENS = 512
MAX_TRACE_LINES = 100_000
# A length beyond this is a typo (as contract.generation.MAX_LENGTH).
_MAX_LENGTH = 1_000_000
_FIELD = "generation.trace"
_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
# The keys of a trace as a request carries it (hash_ids besides, optional).
TRACE_KEYS = (
    "name",
    "sha256",
    "lines",
    "first_line",
    "block_tokens",
    "arrivals_ms",
    "input_tokens",
    "output_tokens",
)


def _bad(where: str, why: str) -> UserError:
    return UserError(f"trace {where}: {why}", field=_FIELD)


def _length(value: Any, where: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_LENGTH:
        raise _bad(where, f"{name} must be an integer in [1, {_MAX_LENGTH}], got {value!r}")
    return value


def read_trace(path: str) -> dict[str, Any]:
    """The trace in the file at `path` as the request's `trace` document: a `.csv` file is read as
    Azure's layout, anything else as Mooncake's JSON lines.

    Raises:
        UserError: the file cannot be read, or a line is missing a field, holds a bad value or goes
            back in time (the message names the line and the field).
    """
    file = Path(path).expanduser()
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise UserError(f"trace: cannot read {path}: {exc.strerror}", field=_FIELD) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserError(f"trace {file.name}: not UTF-8 text", field=_FIELD) from None
    reader = _read_csv if file.suffix.lower() == ".csv" else _read_jsonl
    first_line, rows = reader(text, file.name)
    if not rows:
        raise UserError(f"trace {file.name}: holds no requests", field=_FIELD)
    document: dict[str, Any] = {
        "name": file.name,
        "sha256": hashlib.sha256(data).hexdigest(),
        "lines": len(rows),
        "first_line": first_line,
        "block_tokens": TRACE_BLOCK_TOKENS,
        "arrivals_ms": [row[0] for row in rows],
        "input_tokens": [row[1] for row in rows],
        "output_tokens": [row[2] for row in rows],
    }
    if any(row[3] is not None for row in rows):
        document["hash_ids"] = [row[3] or [] for row in rows]
    return check_trace(document)


def _read_jsonl(text: str, name: str) -> tuple[int, list[tuple[float, int, int, list[int] | None]]]:
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{name} line {number}"
        if not line.strip():
            raise _bad(where, "empty line (one JSON object per line)")
        try:
            entry = json.loads(line)
        except ValueError:
            raise _bad(where, "not a JSON object") from None
        if not isinstance(entry, dict):
            raise _bad(where, "not a JSON object")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in entry:
                raise _bad(where, f"missing field {key!r}")
        arrival = _time(entry["timestamp"], where)
        size = _length(entry["input_length"], where, "input_length")
        output = _length(entry["output_length"], where, "output_length")
        rows.append((arrival, size, output, entry.get("hash_ids")))
    return 1, rows


def _read_csv(text: str, name: str) -> tuple[int, list[tuple[float, int, int, list[int] | None]]]:
    try:
        lines = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise _bad(name, f"not readable as CSV: {exc}") from None
    if not lines:
        raise _bad(name, "empty file")
    header = [cell.strip() for cell in lines[0]]
    missing = [key for key in _AZURE if key not in header]
    if missing:
        raise _bad(f"{name} line 1", f"missing column {missing[0]!r} (expected a header {','.join(_AZURE)})")
    columns = [header.index(key) for key in _AZURE]
    rows: list[tuple[float, int, int, list[int] | None]] = []
    first: datetime | None = None
    for number, cells in enumerate(lines[1:], 2):
        where = f"{name} line {number}"
        if not cells or not any(cell.strip() for cell in cells):
            raise _bad(where, "empty line")
        if len(cells) != len(header):
            raise _bad(where, f"{len(cells)} fields where the header has {len(header)}")
        stamp, context, generated = (cells[i].strip() for i in columns)
        try:
            when = datetime.fromisoformat(stamp)
        except ValueError:
            raise _bad(where, f"TIMESTAMP {stamp!r} is not a date-time") from None
        if first is None:
            first = when
        if (when.tzinfo is None) != (first.tzinfo is None):
            raise _bad(where, "TIMESTAMP mixes times with and without a time zone")
        lengths = []
        for key, cell in (("ContextTokens", context), ("GeneratedTokens", generated)):
            if not cell.isdigit():
                raise _bad(where, f"{key} {cell!r} is not a number of tokens")
            lengths.append(_length(int(cell), where, key))
        rows.append(((when - first).total_seconds() * 1000.0, lengths[0], lengths[1], None))
    return 2, rows


def _time(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _bad(where, f"timestamp must be a number of ms ≥ 0, got {value!r}")
    return float(value)


def check_trace(value: Any) -> dict[str, Any]:
    """A `trace` document checked: its columns of one length, arrivals in ms that never go back,
    lengths in range, each request's shared blocks (`hash_ids`) within its prompt.

    Raises:
        UserError: the first thing wrong, naming the line (`first_line` + its position) and field.
    """
    if not isinstance(value, dict):
        raise UserError("trace must be an object: read a file with --trace FILE", field=_FIELD)
    unknown = sorted(set(value) - {*TRACE_KEYS, "hash_ids"})
    if unknown:
        raise UserError(f"trace: unknown key {unknown[0]!r}", field=_FIELD)
    missing = [key for key in TRACE_KEYS if key not in value]
    if missing:
        raise UserError(f"trace: missing key {missing[0]!r}", field=_FIELD)
    name, digest = value["name"], value["sha256"]
    if not isinstance(name, str) or not 0 < len(name) <= 255:
        raise UserError("trace: name must be the file's name", field=_FIELD)
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise UserError("trace: sha256 must be 64 lower-case hex digits", field=_FIELD)
    arrivals, inputs, outputs = value["arrivals_ms"], value["input_tokens"], value["output_tokens"]
    hash_ids = value.get("hash_ids")
    count = value["lines"]
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_TRACE_LINES:
        raise UserError(f"trace: lines must be an integer in [1, {MAX_TRACE_LINES}]", field=_FIELD)
    for key, column in (("arrivals_ms", arrivals), ("input_tokens", inputs), ("output_tokens", outputs)):
        if not isinstance(column, list) or len(column) != count:
            raise UserError(f"trace: {key} must list one value per line ({count})", field=_FIELD)
    if hash_ids is not None and (not isinstance(hash_ids, list) or len(hash_ids) != count):
        raise UserError(f"trace: hash_ids must list one list per line ({count})", field=_FIELD)
    first_line, block = value["first_line"], value["block_tokens"]
    for key, number in (("first_line", first_line), ("block_tokens", block)):
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= _MAX_LENGTH:
            raise UserError(f"trace: {key} must be a positive integer", field=_FIELD)
    previous = 0.0
    for position in range(count):
        where = f"{name} line {first_line + position}"
        arrival = _time(arrivals[position], where)
        if arrival < previous:
            raise _bad(where, f"timestamp goes back in time ({arrival:g} ms after {previous:g} ms)")
        previous = arrival
        size = _length(inputs[position], where, "input_length")
        _length(outputs[position], where, "output_length")
        if hash_ids is not None:
            ids = hash_ids[position]
            if not isinstance(ids, list) or any(
                isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < 2**53 for i in ids
            ):
                raise _bad(where, "hash_ids must be a list of block ids (integers ≥ 0)")
            if len(ids) > math.ceil(size / block):
                raise _bad(
                    where,
                    f"hash_ids names {len(ids)} blocks of {block} tokens, more than input_length "
                    f"{size} holds",
                )
    return {key: value[key] for key in (*TRACE_KEYS, "hash_ids") if key in value}


def check_fits(trace: dict[str, Any], context: int) -> None:
    """Every line's prompt and output fit a model's context of `context` tokens.

    Raises:
        UserError: naming the first line that does not, its lengths and the context.
    """
    lengths = zip(trace["input_tokens"], trace["output_tokens"], strict=True)
    for position, (size, output) in enumerate(lengths):
        if size + output > context:
            raise _bad(
                f"{trace['name']} line {trace['first_line'] + position}",
                f"input_length {size} + output_length {output} exceed the model's context of "
                f"{context} tokens",
            )


def trace_identity(trace: Any) -> Any:
    """What names a trace in a comparison: its file's name, SHA-256 and line count, not its data."""
    if not isinstance(trace, dict):
        return trace
    return {key: trace.get(key) for key in ("name", "sha256", "lines")}
