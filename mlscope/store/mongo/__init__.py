"""The MongoDB store: the farm's document database, on mongoengine and pymongo.

Owns the collections (`systems`, `evaluations` with their measurements embedded, `latency_chunks`,
`spans`) as mongoengine documents with the indexes the API's queries use (documents.py), the Store
primitives as MongoDB queries (store.py), the comparison table and the layer breakdown as aggregation
pipelines (pipelines.py), history series likewise (series.py), starts and runners' leases as
conditional updates (leases.py), the conversions between records and
stored documents (codec.py), and the documents' versioned shape, recorded in `mlscope_meta`, with its
upgrade (schema.py).

How the data is laid out, and why:

- An evaluation and its measurements are one document, so a finish (status, results and the system
  they ran on) is one atomic conditional update: of two concurrent finishers exactly one matches.
- Raw latencies (millions of int64) would break the 16 MB document limit; they live in
  `latency_chunks` as bounded binary chunks tagged with a per-finish token. They are written before the
  finish and the evaluation names the token that won, so the chunks of a finish that lost the race (or
  crashed half-way) are never read, and are deleted by the loser.
- A span is one document whose `_id` is "<evaluation id>:<span id>": the unique index every collection
  has makes saving a span twice a no-op at no extra index cost.
- Timestamps are integer microseconds since the epoch, UTC: BSON dates keep only milliseconds.
- Keys of stored JSON objects are escaped where MongoDB would refuse or misread them ("." anywhere,
  "$" first, NUL) as %2E, %24, %00 (and "%" as %25), and unescaped on the way out.

Accuracy results are not part of the Store interface yet; when they are, they belong in their own
collection keyed by evaluation, like the spans.

RAW_CHUNK_SAMPLES is read where the chunks are written, in mlscope.store.mongo.store: change it there.
"""

from __future__ import annotations

from mlscope.contract.errors import UserError

try:
    # mongoengine imports pymongo and its bson in turn: with it, every module of this package imports.
    import mongoengine  # noqa: F401
except ModuleNotFoundError as missing:
    raise UserError(
        f"the MongoDB store needs {missing.name}, which is not installed: pip install 'mlscope[mongodb]'",
        field="store_url",
    ) from None

from mlscope.store.mongo.store import DEFAULT_DATABASE, RAW_CHUNK_SAMPLES, MongoStore

__all__ = ["DEFAULT_DATABASE", "RAW_CHUNK_SAMPLES", "MongoStore"]
