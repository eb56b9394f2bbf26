"""Response bodies written as they are sent: CSV and JSON lines produced a chunk at a time from an
iterable, so that a large result (an export of every evaluation, a comparison table) never sits in the
API's memory whole. Also how a value is written into a CSV cell.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

__all__ = [
    "CSV_MIMETYPE",
    "JSONL_MIMETYPE",
    "LINES_PER_CHUNK",
    "csv_cell",
    "csv_lines",
    "jsonl_lines",
    "started",
]

CSV_MIMETYPE = "text/csv"
JSONL_MIMETYPE = "application/x-ndjson"
# Lines are sent this many at a time: few enough writes to the socket, little held at once.
LINES_PER_CHUNK = 200


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell: None empty, booleans true/false, lists joined by "; "."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "; ".join(str(item) for item in value)
    return value


def csv_lines(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """A header of `columns`, then a line per row of raw values (written with `csv_cell`), in chunks
    of LINES_PER_CHUNK lines."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    lines = 1
    for row in rows:
        writer.writerow([csv_cell(value) for value in row])
        lines += 1
        if lines >= LINES_PER_CHUNK:
            yield out.getvalue()
            out.seek(0)
            out.truncate()
            lines = 0
    if lines:
        yield out.getvalue()


def jsonl_lines(documents: Iterable[Any]) -> Iterator[str]:
    """One compact JSON document per line, in chunks of LINES_PER_CHUNK lines."""
    chunk: list[str] = []
    for document in documents:
        chunk.append(json.dumps(document, separators=(",", ":")) + "\n")
        if len(chunk) >= LINES_PER_CHUNK:
            yield "".join(chunk)
            chunk = []
    if chunk:
        yield "".join(chunk)


def started(chunks: Iterator[str]) -> Iterator[str]:
    """`chunks` with its first chunk produced now, before the response's status is sent: a store that
    is down when the request comes is a 503 with a problem document, not a 200 cut short. (One
    failing later, mid-stream, can only cut the body short: its status has been sent.)"""
    first = next(chunks, None)
    return iter(()) if first is None else itertools.chain((first,), chunks)
