"""The MongoDB collections as mongoengine documents: their fields, and the indexes the store's queries
use. Documents are bound to no connection (see _UNBOUND); the store reads and writes their
collections through its own.
"""

from __future__ import annotations

from typing import Any, ClassVar

import mongoengine

__all__ = [
    "DOCUMENTS",
    "EvaluationDocument",
    "LatencyChunkDocument",
    "MeasurementDocument",
    "SpanDocument",
    "SystemDocument",
]

# Documents are bound to no connection: every store reads and writes them through the collections of
# its own connection alias, so that several stores coexist in one process (class-level switching,
# mongoengine's switch_db, is not thread-safe).
_UNBOUND = {"db_alias": "mlscope-unbound", "auto_create_index": False}


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
    # Schema version 2 (mongo/schema.py): how the chunks pack the raw latencies ("int64le"; None
    # without raw latencies), and the summary in fields of its own (records.summary_columns).
    raw_codec = mongoengine.StringField(null=True)
    sample_count = mongoengine.LongField(null=True)
    mean_ms = mongoengine.FloatField(null=True)
    median_ms = mongoengine.FloatField(null=True)
    p90_ms = mongoengine.FloatField(null=True)
    p95_ms = mongoengine.FloatField(null=True)
    p99_ms = mongoengine.FloatField(null=True)
    ci_low_ms = mongoengine.FloatField(null=True)
    ci_high_ms = mongoengine.FloatField(null=True)
    valid = mongoengine.BooleanField(null=True)
    # Schema version 3: the workload measured (contract.workload.workload_key of the evaluation and
    # this scenario) and the evaluation's display name, which the comparison table keys on and shows.
    workload_key = mongoengine.StringField(null=True)
    display_name = mongoengine.StringField(null=True)


class EvaluationDocument(mongoengine.Document):
    """One evaluation, flat as EvaluationRecord, with its measurements embedded."""

    meta: ClassVar[dict[str, Any]] = {
        "collection": "evaluations",
        "indexes": [
            ("-created_at", "id"),
            ("status", "-created_at"),
            ("model_name", "-created_at"),
            # Listings of one model on one framework, and its history series.
            ("model_name", "framework_name", "-created_at", "id"),
            ("framework_name", "-created_at"),
            ("system_id", "-created_at"),
            # History series, grouped by machine and stack (contract.system_ids).
            ("machine_id", "stack_id", "-created_at"),
            # A sweeper's look for expired leases: the running range, oldest expiry first.
            ("status", "lease_expires_at"),
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
    # Schema version 4: the machine and the software stack it ran on (contract.system_ids).
    machine_id = mongoengine.StringField(null=True)
    stack_id = mongoengine.StringField(null=True)
    runner = mongoengine.StringField(required=True)
    device = mongoengine.StringField(required=True)
    trace_level = mongoengine.StringField(required=True)
    trace_id = mongoengine.StringField(null=True)
    cold_start = mongoengine.DictField(null=True)
    error = mongoengine.DictField(null=True)
    # The result sections (records.sections); absent when not measured. Optional fields: documents
    # without them read as before, so the schema version stays 2.
    accuracy = mongoengine.DictField(null=True)
    parity = mongoengine.DictField(null=True)
    memory = mongoengine.DictField(null=True)
    # The queue its job was sent to, how many times it was started, and its runner's lease
    # (records.EvaluationRecord). Optional likewise: a document without them reads as no queue, no
    # attempt and no lease (an evaluation an older mlscope left running is never taken for a dead
    # runner's), and $inc counts a missing attempts from 0.
    queue = mongoengine.StringField(null=True)
    attempts = mongoengine.IntField(null=True)
    lease_owner = mongoengine.StringField(null=True)
    request = mongoengine.DictField()
    manifest = mongoengine.DictField()
    # Microseconds since the epoch, UTC.
    created_at = mongoengine.LongField(required=True)
    started_at = mongoengine.LongField(null=True)
    finished_at = mongoengine.LongField(null=True)
    lease_expires_at = mongoengine.LongField(null=True)
    measurements = mongoengine.EmbeddedDocumentListField(MeasurementDocument)
    # The finish whose latency chunks are this evaluation's.
    raw_token = mongoengine.StringField(null=True)


class LatencyChunkDocument(mongoengine.Document):
    """Up to RAW_CHUNK_SAMPLES raw latencies of one measurement, packed as `codec` says
    (records.pack_latencies; chunks without one were written by 0.1.0: plain int64 little-endian)."""

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
    codec = mongoengine.StringField()
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


DOCUMENTS: tuple[type[mongoengine.Document], ...] = (
    SystemDocument,
    EvaluationDocument,
    LatencyChunkDocument,
    SpanDocument,
)
