"""The MongoDB store: the farm's document database, on mongoengine and pymongo.

Owns the collections (`systems`, `evaluations` with their measurements embedded, `latency_chunks`,
`spans`) as mongoengine documents with the indexes the API's queries use, and the Store primitives,
the comparison table and the layer breakdown included, as MongoDB queries and aggregation pipelines.

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
"""

from __future__ import annotations

import contextlib
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from mlscope.contract.errors import UserError

try:
    import mongoengine
    from bson import Binary
    from mongoengine.connection import ConnectionFailure, get_db
    from mongoengine.queryset import QuerySet
    from pymongo import ASCENDING, ReturnDocument
    from pymongo.collection import Collection
    from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError, ServerSelectionTimeoutError
except ModuleNotFoundError as missing:
    raise UserError(
        f"the MongoDB store needs {missing.name}, which is not installed: pip install 'mlscope[mongodb]'",
        field="store_url",
    ) from None

from .base import Store
from .errors import EvaluationNotFound
from .records import (
    COMPARE_COLUMNS,
    CompareFilter,
    EvaluationFilter,
    EvaluationRecord,
    LayerTotal,
    MeasurementRecord,
    SpanRecord,
    pack_latencies,
    unpack_latencies,
)

__all__ = ["DEFAULT_DATABASE", "RAW_CHUNK_SAMPLES", "MongoStore"]

DEFAULT_DATABASE = "mlscope"
# An unreachable server fails the open after this long instead of pymongo's 30 s default.
SERVER_SELECTION_TIMEOUT_MS = 3000
# 512 Ki samples = 4 MiB a chunk: a quarter of the document limit, and few round trips per million.
RAW_CHUNK_SAMPLES = 1 << 19

# Documents are bound to no connection: every store reads and writes them through the collections of
# its own connection alias, so that several stores coexist in one process (class-level switching,
# mongoengine's switch_db, is not thread-safe).
_UNBOUND = {"db_alias": "mlscope-unbound", "auto_create_index": False}
# mongoengine's registry of connections is a set of plain dicts; opening and closing stores from
# several threads at once must not interleave.
_CONNECTIONS_LOCK = threading.Lock()
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ESCAPED = re.compile(r"[%.\x00]|^\$")
_UNESCAPED = re.compile(r"%(25|2E|24|00)")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_TIMESTAMPS = frozenset({"created_at", "started_at", "finished_at"})


# ----- documents -------------------------------------------------------------------------------------


class SystemDocument(mongoengine.Document):
    """A hardware/software description, under its content-hash id."""

    meta: ClassVar[dict[str, Any]] = {"collection": "systems", **_UNBOUND}

    id = mongoengine.StringField(primary_key=True)
    data = mongoengine.DictField(required=True)
    saved_at = mongoengine.LongField(required=True)


class MeasurementDocument(mongoengine.EmbeddedDocument):
    """One scenario at one batch size; its raw latencies are in `latency_chunks`."""

    scenario = mongoengine.StringField(required=True)
    batch_size = mongoengine.IntField(required=True, min_value=1)
    latency_ms = mongoengine.DictField()
    throughput = mongoengine.FloatField(null=True)
    validity = mongoengine.DictField()
    extra = mongoengine.DictField()
    # How many raw latencies the chunks hold; None when the caller recorded none.
    raw_count = mongoengine.LongField(null=True)


class EvaluationDocument(mongoengine.Document):
    """One evaluation, flat as EvaluationRecord, with its measurements embedded."""

    meta: ClassVar[dict[str, Any]] = {
        "collection": "evaluations",
        "indexes": [
            ("-created_at", "id"),
            ("status", "-created_at"),
            ("model_name", "-created_at"),
            ("framework_name", "-created_at"),
            ("system_id", "-created_at"),
        ],
        **_UNBOUND,
    }

    id = mongoengine.StringField(primary_key=True)
    status = mongoengine.StringField(required=True)
    model_name = mongoengine.StringField(required=True)
    model_version = mongoengine.StringField(null=True)
    manifest_sha256 = mongoengine.StringField(null=True)
    framework_name = mongoengine.StringField(required=True)
    framework_version = mongoengine.StringField(null=True)
    framework_details = mongoengine.DictField(null=True)
    system_id = mongoengine.StringField(null=True)
    runner = mongoengine.StringField(required=True)
    device = mongoengine.StringField(required=True)
    trace_level = mongoengine.StringField(required=True)
    trace_id = mongoengine.StringField(null=True)
    cold_start = mongoengine.DictField(null=True)
    error = mongoengine.DictField(null=True)
    request = mongoengine.DictField()
    manifest = mongoengine.DictField()
    # Microseconds since the epoch, UTC.
    created_at = mongoengine.LongField(required=True)
    started_at = mongoengine.LongField(null=True)
    finished_at = mongoengine.LongField(null=True)
    measurements = mongoengine.EmbeddedDocumentListField(MeasurementDocument)
    # The finish whose latency chunks are this evaluation's.
    raw_token = mongoengine.StringField(null=True)


class LatencyChunkDocument(mongoengine.Document):
    """Up to RAW_CHUNK_SAMPLES raw latencies of one measurement, as int64 little-endian bytes."""

    meta: ClassVar[dict[str, Any]] = {
        "collection": "latency_chunks",
        "indexes": [("evaluation", "finish", "scenario", "batch_size", "seq")],
        **_UNBOUND,
    }

    evaluation = mongoengine.StringField(required=True)
    finish = mongoengine.StringField(required=True)
    scenario = mongoengine.StringField(required=True)
    batch_size = mongoengine.IntField(required=True)
    seq = mongoengine.IntField(required=True)
    count = mongoengine.IntField(required=True)
    data = mongoengine.BinaryField(required=True)


class SpanDocument(mongoengine.Document):
    """One span; `id` is "<evaluation>:<span_id>", which keeps (evaluation, span_id) unique."""

    meta: ClassVar[dict[str, Any]] = {
        "collection": "spans",
        "indexes": [
            ("evaluation", "start_ns", "span_id"),
            ("evaluation", "level", "start_ns", "span_id"),
            "trace_id",
        ],
        **_UNBOUND,
    }

    id = mongoengine.StringField(primary_key=True)
    evaluation = mongoengine.StringField(required=True)
    trace_id = mongoengine.StringField(required=True)
    span_id = mongoengine.StringField(required=True)
    parent_id = mongoengine.StringField(null=True)
    name = mongoengine.StringField(required=True)
    level = mongoengine.StringField(required=True)
    start_ns = mongoengine.LongField(required=True)
    end_ns = mongoengine.LongField(required=True)
    attributes = mongoengine.DictField()


_DOCUMENTS: tuple[type[mongoengine.Document], ...] = (
    SystemDocument,
    EvaluationDocument,
    LatencyChunkDocument,
    SpanDocument,
)


# ----- conversions -----------------------------------------------------------------------------------


def _micros(value: datetime | None) -> int | None:
    return None if value is None else (value - _EPOCH) // timedelta(microseconds=1)


def _datetime(value: int | None) -> datetime | None:
    return None if value is None else _EPOCH + timedelta(microseconds=value)


def _escape(key: str) -> str:
    return _ESCAPED.sub(lambda match: f"%{ord(match.group()):02X}", key)


def _unescape(key: str) -> str:
    return _UNESCAPED.sub(lambda match: chr(int(match.group(1), 16)), key) if "%" in key else key


def _encode(value: Any) -> Any:
    """A checked JSON value as MongoDB stores it: keys escaped, integers beyond int64 (which BSON
    cannot hold) as floats."""
    if isinstance(value, dict):
        return {_escape(key): _encode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_encode(item) for item in value]
    if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
        return float(value)
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        return {_unescape(key): _decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


def _shown(url: str) -> str:
    """`url` with its password masked, fit for an error message."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def _measurement_document(record: MeasurementRecord) -> Any:
    document = MeasurementDocument(
        scenario=record.scenario,
        batch_size=record.batch_size,
        latency_ms=_encode(record.latency_ms),
        throughput=record.throughput,
        validity=_encode(record.validity),
        extra=_encode(record.extra),
        raw_count=None if record.latencies_ns is None else len(record.latencies_ns),
    )
    document.validate()
    return document.to_mongo()


def _to_record(
    document: Mapping[str, Any],
    system: Mapping[str, Any] | None,
    raw: Mapping[tuple[str, int], list[int]] | None,
) -> EvaluationRecord:
    measurements = []
    for m in document.get("measurements") or []:
        latencies = None
        if raw is not None and m.get("raw_count") is not None:
            latencies = raw.get((m["scenario"], m["batch_size"]), [])
            if len(latencies) != m["raw_count"]:
                raise RuntimeError(
                    f"evaluation {document['_id']}: {m['scenario']} at batch size {m['batch_size']} has "
                    f"{len(latencies)} raw latencies stored of {m['raw_count']}"
                )
        measurements.append(
            MeasurementRecord(
                scenario=m["scenario"],
                batch_size=m["batch_size"],
                latency_ms=_decode(m.get("latency_ms") or {}),
                throughput=m.get("throughput"),
                validity=_decode(m.get("validity") or {}),
                extra=_decode(m.get("extra") or {}),
                latencies_ns=latencies,
            )
        )
    created_at = _datetime(document["created_at"])
    assert created_at is not None
    return EvaluationRecord(
        id=document["_id"],
        status=document["status"],
        model_name=document["model_name"],
        model_version=document.get("model_version"),
        manifest_sha256=document.get("manifest_sha256"),
        framework_name=document["framework_name"],
        framework_version=document.get("framework_version"),
        runner=document["runner"],
        device=document["device"],
        trace_level=document["trace_level"],
        request=_decode(document.get("request") or {}),
        manifest=_decode(document.get("manifest") or {}),
        created_at=created_at,
        system_id=document.get("system_id"),
        trace_id=document.get("trace_id"),
        cold_start=_decode(document.get("cold_start")),
        error=_decode(document.get("error")),
        started_at=_datetime(document.get("started_at")),
        finished_at=_datetime(document.get("finished_at")),
        framework_details=_decode(document.get("framework_details")),
        system=None if system is None else _decode(system["data"]),
        measurements=measurements,
    )


def _span_record(document: Mapping[str, Any]) -> SpanRecord:
    return SpanRecord(
        trace_id=document["trace_id"],
        span_id=document["span_id"],
        parent_id=document.get("parent_id"),
        name=document["name"],
        level=document["level"],
        start_ns=document["start_ns"],
        end_ns=document["end_ns"],
        attributes=_decode(document.get("attributes") or {}),
    )


# ----- the store -------------------------------------------------------------------------------------


class MongoStore(Store):
    """The Store on MongoDB; creates its indexes on open.

    Args:
        url: `mongodb://[user:password@]host[:port][/database][?options]` or `mongodb+srv://...`; the
            database defaults to "mlscope".
        client_class: the client class mongoengine connects with (its `mongo_client_class`), for
            tests: `mongomock.MongoClient`. pymongo's MongoClient when None.

    Raises:
        UserError: when the URL is malformed or no server answers it within a few seconds.
    """

    NAME: ClassVar[str] = "mongodb"

    def __init__(self, url: str, *, client_class: type | None = None) -> None:
        self._alias = f"mlscope-store-{uuid.uuid4().hex}"
        settings: dict[str, Any] = {"uuidRepresentation": "standard"}
        if "serverselectiontimeoutms" not in url.lower():
            settings["serverSelectionTimeoutMS"] = SERVER_SELECTION_TIMEOUT_MS
        if client_class is not None:
            settings["mongo_client_class"] = client_class
        try:
            with _CONNECTIONS_LOCK:
                client = mongoengine.connect(db=DEFAULT_DATABASE, alias=self._alias, host=url, **settings)
                self._db = get_db(self._alias)
            # server_info() needs a round trip, so an unreachable server shows here, not on first use.
            client.server_info()
            self._create_indexes()
        except ServerSelectionTimeoutError as error:
            self.close()
            # pymongo appends its whole topology description; the first part says what went wrong.
            reason = re.sub(r" \(configured timeouts:[^)]*\)", "", str(error)).split(", Timeout:")[0]
            raise UserError(
                f"cannot open the store at {_shown(url)}: no MongoDB server answered ({reason})",
                field="store_url",
            ) from None
        except (PyMongoError, ConnectionFailure, ValueError, TypeError) as error:
            self.close()
            raise UserError(f"cannot open the store at {_shown(url)}: {error}", field="store_url") from None
        self._systems: Collection[Any] = self._collection(SystemDocument)
        self._evaluations: Collection[Any] = self._collection(EvaluationDocument)
        self._chunks: Collection[Any] = self._collection(LatencyChunkDocument)
        self._spans: Collection[Any] = self._collection(SpanDocument)

    def _collection(self, document: type[mongoengine.Document]) -> Collection[Any]:
        return self._db[document._meta["collection"]]

    def _create_indexes(self) -> None:
        # What mongoengine's ensure_indexes does, on this store's collections rather than the class's.
        for document in _DOCUMENTS:
            collection = self._collection(document)
            for spec in document._meta["index_specs"]:
                options = {key: value for key, value in spec.items() if key != "fields"}
                collection.create_index(spec["fields"], **options)

    def close(self) -> None:
        with _CONNECTIONS_LOCK:
            mongoengine.disconnect(self._alias)

    def _query(self, document: type[mongoengine.Document]) -> QuerySet:
        return QuerySet(document, self._collection(document))

    # ----- systems ---------------------------------------------------------------------------------

    def _insert_system(self, id: str, system: dict[str, Any]) -> None:
        document = SystemDocument(
            id=id, data=_encode(system), saved_at=_micros(datetime.now(timezone.utc))
        ).to_mongo()
        with contextlib.suppress(DuplicateKeyError):  # content-addressed: the stored one is the same
            self._systems.insert_one(document)

    def _read_system(self, id: str) -> dict[str, Any] | None:
        document = self._systems.find_one({"_id": id})
        return None if document is None else dict(_decode(document["data"]))

    def _read_systems(self) -> list[dict[str, Any]]:
        return [_decode(document["data"]) for document in self._systems.find().sort("_id", ASCENDING)]

    # ----- evaluations -----------------------------------------------------------------------------

    def _insert_evaluation(self, record: EvaluationRecord) -> None:
        document = EvaluationDocument(
            id=record.id,
            status=record.status,
            model_name=record.model_name,
            model_version=record.model_version,
            manifest_sha256=record.manifest_sha256,
            framework_name=record.framework_name,
            framework_version=record.framework_version,
            framework_details=_encode(record.framework_details),
            runner=record.runner,
            device=record.device,
            trace_level=record.trace_level,
            trace_id=record.trace_id,
            request=_encode(record.request),
            manifest=_encode(record.manifest),
            created_at=_micros(record.created_at),
        )
        document.validate()
        with contextlib.suppress(DuplicateKeyError):  # a retried submit: the first one stands
            self._evaluations.insert_one(document.to_mongo())

    def _transition(
        self,
        id: str,
        *,
        allowed_from: frozenset[str],
        changes: Mapping[str, Any],
        measurements: Sequence[MeasurementRecord] = (),
    ) -> str:
        current = self._evaluations.find_one({"_id": id}, {"status": 1})
        if current is None:
            raise EvaluationNotFound(id)
        if current["status"] not in allowed_from:
            return str(current["status"])
        update = {
            name: _micros(value) if name in _TIMESTAMPS else _encode(value) for name, value in changes.items()
        }
        token = None
        if measurements:
            token = uuid.uuid4().hex
            self._write_raw(id, token, measurements)
            update["measurements"] = [_measurement_document(m) for m in measurements]
            update["raw_token"] = token
        # The status condition is the lock: of concurrent transitions, exactly one matches.
        before = self._evaluations.find_one_and_update(
            {"_id": id, "status": {"$in": sorted(allowed_from)}},
            {"$set": update},
            projection={"status": 1},
            return_document=ReturnDocument.BEFORE,
        )
        if before is not None:
            return str(before["status"])
        if token is not None:
            self._chunks.delete_many({"evaluation": id, "finish": token})
        # Another transition won meanwhile; statuses never leave an ended state, so this one is final.
        latest = self._evaluations.find_one({"_id": id}, {"status": 1})
        if latest is None:
            raise EvaluationNotFound(id)
        return str(latest["status"])

    def _write_raw(self, id: str, token: str, measurements: Sequence[MeasurementRecord]) -> None:
        chunks = []
        for m in measurements:
            latencies = m.latencies_ns or []
            for seq, start in enumerate(range(0, len(latencies), RAW_CHUNK_SAMPLES)):
                part = latencies[start : start + RAW_CHUNK_SAMPLES]
                chunks.append(
                    {
                        "evaluation": id,
                        "finish": token,
                        "scenario": m.scenario,
                        "batch_size": m.batch_size,
                        "seq": seq,
                        "count": len(part),
                        "data": Binary(pack_latencies(part)),
                    }
                )
        if chunks:
            self._chunks.insert_many(chunks)

    def _read_raw(self, id: str, token: str | None) -> dict[tuple[str, int], list[int]]:
        raw: dict[tuple[str, int], list[int]] = {}
        if token is None:
            return raw
        found = self._chunks.find({"evaluation": id, "finish": token}).sort(
            [("scenario", ASCENDING), ("batch_size", ASCENDING), ("seq", ASCENDING)]
        )
        for chunk in found:
            raw.setdefault((chunk["scenario"], chunk["batch_size"]), []).extend(
                unpack_latencies(bytes(chunk["data"]))
            )
        return raw

    def _ids_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        # startswith escapes the prefix into an anchored regex, which MongoDB answers from the _id index.
        found = self._query(EvaluationDocument).filter(id__startswith=prefix).order_by("id").limit(limit)
        return [str(document["_id"]) for document in found.only("id").as_pymongo()]

    def _read_evaluation(self, id: str, *, include_raw: bool) -> EvaluationRecord | None:
        document = self._evaluations.find_one({"_id": id})
        if document is None:
            return None
        system = self._systems.find_one({"_id": document["system_id"]}) if document.get("system_id") else None
        raw = self._read_raw(id, document.get("raw_token")) if include_raw else None
        return _to_record(document, system, raw)

    def _matching(self, where: EvaluationFilter) -> QuerySet:
        conditions: dict[str, Any] = {}
        for name, value in (
            ("model_name", where.model),
            ("framework_name", where.framework),
            ("system_id", where.system_id),
            ("status", where.status),
        ):
            if value is not None:
                conditions[name] = value
        if where.since is not None:
            conditions["created_at__gte"] = _micros(where.since)
        if where.until is not None:
            conditions["created_at__lt"] = _micros(where.until)
        return self._query(EvaluationDocument).filter(**conditions)

    def _query_evaluations(
        self, where: EvaluationFilter, *, limit: int, offset: int
    ) -> list[EvaluationRecord]:
        found = self._matching(where).order_by("-created_at", "id").skip(offset).limit(limit)
        documents = list(found.as_pymongo())
        system_ids = sorted({d["system_id"] for d in documents if d.get("system_id")})
        systems = (
            {s["_id"]: s for s in self._systems.find({"_id": {"$in": system_ids}})} if system_ids else {}
        )
        return [_to_record(d, systems.get(d.get("system_id") or ""), None) for d in documents]

    def _count_evaluations(self, where: EvaluationFilter) -> int:
        return int(self._matching(where).count())

    def _compare_rows(self, where: CompareFilter) -> list[dict[str, Any]]:
        """records.compare_rows as one aggregation: the latest succeeded evaluation per key, how many
        share it, and the table's order, computed by the server; only formatting is left here."""
        match: dict[str, Any] = {"status": "succeeded"}
        for name, values in (
            ("_id", where.ids),
            ("model_name", where.models),
            ("framework_name", where.frameworks),
            ("system_id", where.system_ids),
        ):
            if values:
                match[name] = {"$in": list(values)}
        created: dict[str, Any] = {}
        if where.since is not None:
            created["$gte"] = _micros(where.since)
        if where.until is not None:
            created["$lt"] = _micros(where.until)
        if created:
            match["created_at"] = created
        measured: dict[str, Any] = {}
        if where.scenarios:
            measured["measurements.scenario"] = {"$in": list(where.scenarios)}
        if where.batch_sizes:
            measured["measurements.batch_size"] = {"$in": list(where.batch_sizes)}
        key = {
            "model": "$model_name",
            "framework": "$framework_name",
            "system_id": "$system_id",
            "device": "$device",
            "scenario": "$measurements.scenario",
            "batch_size": "$measurements.batch_size",
        }
        latest = {
            "evaluation_id": "$_id",
            "finished_at": "$finished_at",
            "framework_version": "$framework_version",
            "measurement": "$measurements",
        }
        median = "$latest.measurement.latency_ms.median"
        pipeline: list[dict[str, Any]] = [
            {"$match": match},
            {"$unwind": "$measurements"},
            *([{"$match": measured}] if measured else []),
            # Latest first: compare_rows keeps the greatest (finished_at, evaluation id) of each key.
            {"$sort": {"finished_at": -1, "_id": -1}},
            {"$group": {"_id": key, "latest": {"$first": latest}, "runs": {"$sum": 1}}},
            {
                "$project": {
                    "_id": 0,
                    **{name: f"$_id.{name}" for name in key},
                    "latest": 1,
                    "runs": 1,
                    # compare_rows sorts a missing median last; MongoDB sorts null first.
                    "no_median": {"$cond": [{"$eq": [{"$ifNull": [median, None]}, None]}, 1, 0]},
                    "median": median,
                }
            },
            {
                "$lookup": {
                    "from": "systems",
                    "localField": "system_id",
                    "foreignField": "_id",
                    "as": "system",
                }
            },
            {
                "$sort": {
                    "model": 1,
                    "scenario": 1,
                    "batch_size": 1,
                    "no_median": 1,
                    "median": 1,
                    "framework": 1,
                    "system_id": 1,
                    "device": 1,
                }
            },
        ]
        # allowDiskUse: a farm's history can outgrow the 100 MB a sort or group may hold in memory.
        return [_compare_row(found) for found in self._evaluations.aggregate(pipeline, allowDiskUse=True)]

    # ----- spans -----------------------------------------------------------------------------------

    def _insert_spans(self, evaluation_id: str, spans: Sequence[SpanRecord]) -> int:
        # Plain dicts in SpanDocument's layout: building a mongoengine document per span would cost
        # more than the insert itself for a trace of hundreds of thousands.
        documents = [
            {
                "_id": f"{evaluation_id}:{span.span_id}",
                "evaluation": evaluation_id,
                "trace_id": span.trace_id,
                "span_id": span.span_id,
                "parent_id": span.parent_id,
                "name": span.name,
                "level": span.level,
                "start_ns": span.start_ns,
                "end_ns": span.end_ns,
                "attributes": _encode(span.attributes),
            }
            for span in spans
        ]
        if not documents:
            return 0
        try:
            # Unordered: a span stored already fails alone, and the others are still inserted.
            return len(self._spans.insert_many(documents, ordered=False).inserted_ids)
        except BulkWriteError as error:
            others = [e for e in error.details.get("writeErrors", []) if e.get("code") != 11000]
            if others:
                raise
            return int(error.details["nInserted"])

    def _read_spans(
        self, evaluation_id: str, *, level: str | None, limit: int | None, offset: int
    ) -> list[SpanRecord]:
        query: dict[str, Any] = {"evaluation": evaluation_id}
        if level is not None:
            query["level"] = level
        found = (
            self._spans.find(query, {"_id": 0, "evaluation": 0})
            .sort([("start_ns", ASCENDING), ("span_id", ASCENDING)])
            .skip(offset)
            .limit(limit or 0)
        )
        return [_span_record(document) for document in found]

    def _count_spans(self, evaluation_id: str) -> int:
        return int(self._spans.count_documents({"evaluation": evaluation_id}))

    def _layer_totals(
        self, evaluation_id: str, *, level: str, group_by: str
    ) -> tuple[list[LayerTotal], int | None]:
        duration = {"$subtract": ["$end_ns", "$start_ns"]}
        key: Any = "$name" if group_by == "name" else {"$ifNull": ["$attributes.layer_type", "$name"]}
        groups = self._spans.aggregate(
            [
                {"$match": {"evaluation": evaluation_id, "level": level}},
                {"$group": {"_id": key, "calls": {"$sum": 1}, "total_ns": {"$sum": duration}}},
            ],
            allowDiskUse=True,
        )
        totals = [LayerTotal(g["_id"], int(g["calls"]), int(g["total_ns"])) for g in groups]
        model = list(
            self._spans.aggregate(
                [
                    {"$match": {"evaluation": evaluation_id, "level": "MODEL"}},
                    {"$group": {"_id": None, "spans": {"$sum": 1}, "total_ns": {"$sum": duration}}},
                ]
            )
        )
        # MongoDB groups no documents into no group, mongomock into one of zero spans.
        return totals, int(model[0]["total_ns"]) if model and model[0]["spans"] else None


def _compare_row(found: Mapping[str, Any]) -> dict[str, Any]:
    """One row of the comparison table from the pipeline's output, formatted as compare_rows does."""
    latest = found["latest"]
    m = latest["measurement"]
    latency = _decode(m.get("latency_ms") or {})
    validity = _decode(m.get("validity") or {})
    system = _decode(found["system"][0]["data"]) if found["system"] else {}
    ci = latency.get("median_ci") or [None, None]
    finished_at = _datetime(latest.get("finished_at"))
    row = {
        "model": found["model"],
        "framework": found["framework"],
        "framework_version": latest.get("framework_version"),
        "system_id": found.get("system_id"),
        "hostname": system.get("hostname"),
        "agent_id": (system.get("agent") or {}).get("id"),
        "cpu": (system.get("cpu") or {}).get("model"),
        "device": found["device"],
        "scenario": found["scenario"],
        "batch_size": found["batch_size"],
        "median_ms": latency.get("median"),
        "p90_ms": latency.get("p90"),
        "p99_ms": latency.get("p99"),
        "ci_low_ms": ci[0],
        "ci_high_ms": ci[1],
        "throughput": m.get("throughput"),
        "count": latency.get("count"),
        "valid": validity.get("valid"),
        "reasons": list(validity.get("reasons") or []),
        "runs": found["runs"],
        "evaluation_id": latest["evaluation_id"],
        "finished_at": None if finished_at is None else finished_at.isoformat(),
    }
    return {column: row[column] for column in COMPARE_COLUMNS}
