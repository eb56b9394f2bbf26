"""Records as MongoDB stores them and back: timestamps as integer microseconds since the epoch, keys of
JSON objects escaped where MongoDB would refuse them, integers beyond int64 as floats, and evaluation
and span documents as the records backends share.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from mlscope.contract.workload import display_name, workload_key
from mlscope.store.mongo.documents import MeasurementDocument
from mlscope.store.records import (
    INT64_MAX,
    INT64_MIN,
    EvaluationRecord,
    MeasurementRecord,
    SpanRecord,
    summary_columns,
    workload_view,
)

__all__ = [
    "TIMESTAMPS",
    "decode",
    "encode",
    "measurement_document",
    "measurement_summary",
    "measurement_workload",
    "micros",
    "span_record",
    "to_datetime",
    "to_record",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ESCAPED = re.compile(r"[%.\x00]|^\$")
_UNESCAPED = re.compile(r"%(25|2E|24|00)")
# The EvaluationRecord fields stored as microseconds.
TIMESTAMPS = frozenset({"created_at", "started_at", "finished_at", "lease_expires_at"})


def micros(value: datetime | None) -> int | None:
    return None if value is None else (value - _EPOCH) // timedelta(microseconds=1)


def to_datetime(value: int | None) -> datetime | None:
    return None if value is None else _EPOCH + timedelta(microseconds=value)


def _escape(key: str) -> str:
    return _ESCAPED.sub(lambda match: f"%{ord(match.group()):02X}", key)


def _unescape(key: str) -> str:
    return _UNESCAPED.sub(lambda match: chr(int(match.group(1), 16)), key) if "%" in key else key


def encode(value: Any) -> Any:
    """A checked JSON value as MongoDB stores it: keys escaped, integers beyond int64 (which BSON
    cannot hold) as floats."""
    if isinstance(value, dict):
        return {_escape(key): encode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [encode(item) for item in value]
    if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
        return float(value)
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        return {_unescape(key): decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


def measurement_summary(
    latency_ms: Mapping[str, Any], validity: Mapping[str, Any], raw_count: int | None
) -> dict[str, Any]:
    """The fields schema version 2 adds to a measurement sub-document (mongo/schema.py), from its
    summary and validity (decoded) and how many raw latencies it has (None: none recorded)."""
    return {
        **summary_columns(latency_ms, validity),
        "raw_codec": None if raw_count is None else "int64le",
    }


def measurement_workload(evaluation: Mapping[str, Any], scenario: str) -> dict[str, Any]:
    """The fields schema version 3 adds to a measurement sub-document (mongo/schema.py): its workload
    key and its evaluation's display name, from the evaluation document (its model_name,
    model_version, request and manifest, as stored)."""
    view = workload_view(
        evaluation["model_name"],
        evaluation.get("model_version"),
        decode(evaluation.get("request") or {}),
        decode(evaluation.get("manifest") or {}),
    )
    return {"workload_key": workload_key(view, scenario), "display_name": display_name(view)}


def measurement_document(record: MeasurementRecord, evaluation: Mapping[str, Any]) -> Any:
    """The sub-document of a measurement of `evaluation` (its stored document: see
    measurement_workload)."""
    raw_count = None if record.latencies_ns is None else len(record.latencies_ns)
    document = MeasurementDocument(
        scenario=record.scenario,
        batch_size=record.batch_size,
        latency_ms=encode(record.latency_ms),
        throughput=record.throughput,
        validity=encode(record.validity),
        extra=encode(record.extra),
        raw_count=raw_count,
        **measurement_summary(record.latency_ms, record.validity, raw_count),
        **measurement_workload(evaluation, record.scenario),
    )
    document.validate()
    return document.to_mongo()


def to_record(
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
                latency_ms=decode(m.get("latency_ms") or {}),
                throughput=m.get("throughput"),
                validity=decode(m.get("validity") or {}),
                extra=decode(m.get("extra") or {}),
                latencies_ns=latencies,
            )
        )
    created_at = to_datetime(document["created_at"])
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
        request=decode(document.get("request") or {}),
        manifest=decode(document.get("manifest") or {}),
        created_at=created_at,
        system_id=document.get("system_id"),
        machine_id=document.get("machine_id"),
        stack_id=document.get("stack_id"),
        trace_id=document.get("trace_id"),
        cold_start=decode(document.get("cold_start")),
        error=decode(document.get("error")),
        accuracy=decode(document.get("accuracy")),
        parity=decode(document.get("parity")),
        memory=decode(document.get("memory")),
        queue=document.get("queue"),
        attempts=int(document.get("attempts") or 0),
        lease_owner=document.get("lease_owner"),
        lease_expires_at=to_datetime(document.get("lease_expires_at")),
        started_at=to_datetime(document.get("started_at")),
        finished_at=to_datetime(document.get("finished_at")),
        framework_details=decode(document.get("framework_details")),
        system=None if system is None else decode(system["data"]),
        measurements=measurements,
    )


def span_record(document: Mapping[str, Any]) -> SpanRecord:
    return SpanRecord(
        trace_id=document["trace_id"],
        span_id=document["span_id"],
        parent_id=document.get("parent_id"),
        name=document["name"],
        level=document["level"],
        start_ns=document["start_ns"],
        end_ns=document["end_ns"],
        attributes=decode(document.get("attributes") or {}),
    )
