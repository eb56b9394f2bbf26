"""MongoStore: the Store primitives as MongoDB queries on the collections of documents.py, through a
connection of the store's own; raw latencies written in bounded chunks under a per-finish token, and a
finish committed by one conditional update (the layout and its reasons: the package's docstring).
"""

from __future__ import annotations

import contextlib
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, ClassVar

import mongoengine
from bson import Binary
from mongoengine.connection import ConnectionFailure, get_db
from mongoengine.queryset import Q, QuerySet
from pymongo import ASCENDING, ReturnDocument
from pymongo.collection import Collection
from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError, ServerSelectionTimeoutError

from mlscope.contract.errors import UserError
from mlscope.store.base import Store
from mlscope.store.errors import EvaluationNotFound
from mlscope.store.maintenance import PruneReport
from mlscope.store.mongo import leases
from mlscope.store.mongo.codec import (
    TIMESTAMPS,
    decode,
    encode,
    measurement_document,
    micros,
    span_record,
    to_record,
)
from mlscope.store.mongo.documents import (
    DOCUMENTS,
    EvaluationDocument,
    LatencyChunkDocument,
    SpanDocument,
    SystemDocument,
)
from mlscope.store.mongo.maintenance import bulk_insert, prune
from mlscope.store.mongo.pipelines import (
    compare_pipeline,
    layer_totals_pipeline,
    model_total_pipeline,
    pipeline_row,
)
from mlscope.store.mongo.schema import mark_current, read_state, upgrade
from mlscope.store.mongo.series import (
    history_pipeline,
    history_row,
    series_keys_pipeline,
    series_keys_row,
    stacks_of,
    stacks_pipeline,
)
from mlscope.store.mongo.unavailable import reports_unavailable
from mlscope.store.records import (
    PLAIN_CODEC,
    RAW_CODEC,
    CompareFilter,
    EvaluationFilter,
    EvaluationRecord,
    LayerTotal,
    MeasurementRecord,
    SpanRecord,
    pack_latencies,
    unpack_latencies,
)
from mlscope.store.records.history import HistoryFilter, SeriesFilter
from mlscope.store.schema import SchemaState, Upgraded

__all__ = ["DEFAULT_DATABASE", "RAW_CHUNK_SAMPLES", "MongoStore"]

DEFAULT_DATABASE = "mlscope"
# An unreachable server fails the open after this long instead of pymongo's 30 s default.
SERVER_SELECTION_TIMEOUT_MS = 3000
# 512 Ki samples = 4 MiB a chunk: a quarter of the document limit, and few round trips per million.
RAW_CHUNK_SAMPLES = 1 << 19

# mongoengine's registry of connections is a set of plain dicts; opening and closing stores from
# several threads at once must not interleave.
_CONNECTIONS_LOCK = threading.Lock()


def _shown(url: str) -> str:
    """`url` with its password masked, fit for an error message."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


@reports_unavailable
class MongoStore(Store):
    """The Store on MongoDB; checks its schema version on open (mongo/schema.py), and creates its
    indexes.

    Args:
        url: `mongodb://[user:password@]host[:port][/database][?options]` or `mongodb+srv://...`; the
            database defaults to "mlscope".
        client_class: the client class mongoengine connects with (its `mongo_client_class`), for
            tests: `mongomock.MongoClient`. pymongo's MongoClient when None.
        check_schema: refuse a database that is not at the schema version this code writes, and
            record the version in an empty one; False opens any database as it is, changing nothing,
            for `schema_status()` and `upgrade()`.

    Raises:
        UserError: when the URL is malformed, no server answers it within a few seconds, or
            (check_schema) the database holds an older or newer version or another application's
            collections (SchemaState.refusal words each).
    """

    NAME: ClassVar[str] = "mongodb"

    def __init__(self, url: str, *, client_class: type | None = None, check_schema: bool = True) -> None:
        self._location = _shown(url)
        self._alias = f"mlscope-store-{uuid.uuid4().hex}"
        settings: dict[str, Any] = {"uuidRepresentation": "standard"}
        if "serverselectiontimeoutms" not in url.lower():
            settings["serverSelectionTimeoutMS"] = SERVER_SELECTION_TIMEOUT_MS
        if "connecttimeoutms" not in url.lower():
            # pymongo waits 20 s for a connection to a host that drops packets; a request should not.
            settings["connectTimeoutMS"] = SERVER_SELECTION_TIMEOUT_MS
        if client_class is not None:
            settings["mongo_client_class"] = client_class
        try:
            with _CONNECTIONS_LOCK:
                client = mongoengine.connect(db=DEFAULT_DATABASE, alias=self._alias, host=url, **settings)
                self._db = get_db(self._alias)
            # server_info() needs a round trip, so an unreachable server shows here, not on first use.
            client.server_info()
            if check_schema:
                self._open_schema()
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
        except BaseException:
            self.close()
            raise
        self._systems: Collection[Any] = self._collection(SystemDocument)
        self._evaluations: Collection[Any] = self._collection(EvaluationDocument)
        self._chunks: Collection[Any] = self._collection(LatencyChunkDocument)
        self._spans: Collection[Any] = self._collection(SpanDocument)

    def _collection(self, document: type[mongoengine.Document]) -> Collection[Any]:
        return self._db[document._meta["collection"]]

    def _create_indexes(self) -> None:
        # What mongoengine's ensure_indexes does, on this store's collections rather than the class's.
        for document in DOCUMENTS:
            collection = self._collection(document)
            for spec in document._meta["index_specs"]:
                options = {key: value for key, value in spec.items() if key != "fields"}
                collection.create_index(spec["fields"], **options)

    # ----- the schema ------------------------------------------------------------------------------

    def _open_schema(self) -> None:
        state = read_state(self._db, location=self._location)
        if state.state not in ("empty", "current"):
            state.check()
        self._create_indexes()
        if state.state == "empty":
            mark_current(self._db)

    def _schema_state(self) -> SchemaState:
        return read_state(self._db, location=self._location)

    def _upgrade_schema(self) -> Upgraded:
        # MongoDB has no lock to take across collections: the backfill is idempotent instead, and the
        # meta document is written last.
        state = read_state(self._db, location=self._location)
        if state.state == "current":
            return Upgraded(previous=state.current)
        if state.state not in ("empty", "older"):
            state.check()
        self._create_indexes()
        if state.state == "empty":
            mark_current(self._db)
            return Upgraded(previous=None, steps=(state.required,))
        assert state.current is not None
        backfilled = upgrade(self._db)
        steps = tuple(str(v) for v in range(int(state.current) + 1, int(state.required) + 1))
        return Upgraded(previous=state.current, steps=steps, backfilled=backfilled)

    def close(self) -> None:
        with _CONNECTIONS_LOCK:
            mongoengine.disconnect(self._alias)

    def _query(self, document: type[mongoengine.Document]) -> QuerySet:
        return QuerySet(document, self._collection(document))

    # ----- systems ---------------------------------------------------------------------------------

    def _insert_system(self, id: str, system: dict[str, Any]) -> None:
        document = SystemDocument(
            id=id, data=encode(system), saved_at=micros(datetime.now(timezone.utc))
        ).to_mongo()
        with contextlib.suppress(DuplicateKeyError):  # content-addressed: the stored one is the same
            self._systems.insert_one(document)

    def _read_system(self, id: str) -> dict[str, Any] | None:
        document = self._systems.find_one({"_id": id})
        return None if document is None else dict(decode(document["data"]))

    def _read_systems(self) -> list[dict[str, Any]]:
        return [decode(document["data"]) for document in self._systems.find().sort("_id", ASCENDING)]

    def _system_ids_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        # An anchored regex of the escaped prefix, which MongoDB answers from the _id index.
        found = self._systems.find({"_id": {"$regex": f"^{re.escape(prefix)}"}}, {"_id": 1})
        return [str(document["_id"]) for document in found.sort("_id", ASCENDING).limit(limit)]

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
            framework_details=encode(record.framework_details),
            runner=record.runner,
            device=record.device,
            trace_level=record.trace_level,
            trace_id=record.trace_id,
            request=encode(record.request),
            manifest=encode(record.manifest),
            created_at=micros(record.created_at),
            queue=record.queue,
            attempts=record.attempts,
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
        # With measurements, what their workload keys are of (codec.measurement_workload).
        read = ("status", *(("model_name", "model_version", "request", "manifest") if measurements else ()))
        current = self._evaluations.find_one({"_id": id}, dict.fromkeys(read, 1))
        if current is None:
            raise EvaluationNotFound(id)
        if current["status"] not in allowed_from:
            return str(current["status"])
        update = self._stored(changes)
        token = None
        if measurements:
            token = uuid.uuid4().hex
            self._write_raw(id, token, measurements)
            update["measurements"] = [measurement_document(m, current) for m in measurements]
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

    def _stored(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        return {
            name: micros(value) if name in TIMESTAMPS else encode(value) for name, value in changes.items()
        }

    # ----- starts and leases (leases.py) ------------------------------------------------------------

    def _start(self, id: str, *, changes: Mapping[str, Any]) -> tuple[str, int]:
        return leases.start(self._evaluations, id, self._stored(changes))

    def _leased_transition(
        self, id: str, *, owner: str | None, expired_before: datetime | None, changes: Mapping[str, Any]
    ) -> bool:
        return leases.leased_transition(self._evaluations, id, owner, expired_before, self._stored(changes))

    def _expired_leases(self, now: datetime, *, limit: int) -> list[dict[str, Any]]:
        return leases.expired_leases(self._evaluations, now, limit=limit)

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
                        "codec": RAW_CODEC,
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
                unpack_latencies(bytes(chunk["data"]), chunk.get("codec", PLAIN_CODEC))
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
        return to_record(document, system, raw)

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
            conditions["created_at__gte"] = micros(where.since)
        if where.until is not None:
            conditions["created_at__lt"] = micros(where.until)
        found = self._query(EvaluationDocument).filter(**conditions)
        if where.after is not None:
            # After (created_at, id) in the listing's order: created_at descending, then id.
            created_at, id = micros(where.after[0]), where.after[1]
            found = found.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__gt=id))
        return found

    def _query_evaluations(
        self, where: EvaluationFilter, *, limit: int, offset: int
    ) -> list[EvaluationRecord]:
        found = self._matching(where).order_by("-created_at", "id").skip(offset).limit(limit)
        documents = list(found.as_pymongo())
        system_ids = sorted({d["system_id"] for d in documents if d.get("system_id")})
        systems = (
            {s["_id"]: s for s in self._systems.find({"_id": {"$in": system_ids}})} if system_ids else {}
        )
        return [to_record(d, systems.get(d.get("system_id") or ""), None) for d in documents]

    def _count_evaluations(self, where: EvaluationFilter) -> int:
        return int(self._matching(where).count())

    def _compare_rows(self, where: CompareFilter) -> list[dict[str, Any]]:
        """records.compare_rows as one aggregation (pipelines.compare_pipeline): the latest succeeded
        evaluation per key, how many share it, and the table's order, computed by the server; only
        formatting is left here."""
        pipeline = compare_pipeline(where)
        # allowDiskUse: a farm's history can outgrow the 100 MB a sort or group may hold in memory.
        return [pipeline_row(found) for found in self._evaluations.aggregate(pipeline, allowDiskUse=True)]

    def _history_points(self, where: HistoryFilter, *, limit: int) -> list[dict[str, Any]]:
        pipeline = history_pipeline(where, limit=limit, stacks=self._stacks(where))
        found = self._evaluations.aggregate(pipeline, allowDiskUse=True)
        return [history_row(point) for point in reversed(list(found))]

    def _series_keys(self, where: SeriesFilter) -> list[dict[str, Any]]:
        found = self._evaluations.aggregate(
            series_keys_pipeline(where, self._stacks(where)), allowDiskUse=True
        )
        return [series_keys_row(series) for series in found]

    def _stacks(self, where: SeriesFilter) -> list[tuple[str | None, str | None]] | None:
        """The (machine id, stack id) pairs of the filter's system id; None when it names none."""
        if where.system_id is None:
            return None
        return stacks_of(list(self._evaluations.aggregate(stacks_pipeline(where.system_id))))

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
                "attributes": encode(span.attributes),
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
        return [span_record(document) for document in found]

    def _count_spans(self, evaluation_id: str) -> int:
        return int(self._spans.count_documents({"evaluation": evaluation_id}))

    def _layer_totals(
        self, evaluation_id: str, *, level: str, group_by: str
    ) -> tuple[list[LayerTotal], int | None]:
        groups = self._spans.aggregate(
            layer_totals_pipeline(evaluation_id, level=level, group_by=group_by), allowDiskUse=True
        )
        totals = [LayerTotal(g["_id"], int(g["calls"]), int(g["total_ns"])) for g in groups]
        model = list(self._spans.aggregate(model_total_pipeline(evaluation_id)))
        # MongoDB groups no documents into no group, mongomock into one of zero spans.
        return totals, int(model[0]["total_ns"]) if model and model[0]["spans"] else None

    # ----- bulk import and retention (maintenance.py) -----------------------------------------------

    def _bulk_insert(self, records: Sequence[EvaluationRecord], systems: Mapping[str, dict[str, Any]]) -> int:
        return bulk_insert(self, self._evaluations, records, systems)

    def _prune(self, before: datetime, *, keep_summaries: bool) -> PruneReport:
        return prune(self._evaluations, self._chunks, self._spans, before, keep_summaries=keep_summaries)
