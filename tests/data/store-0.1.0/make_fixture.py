"""Fill a store made by mlscope 0.1.0's schema with a small, varied set of evaluations."""

import sys
from datetime import datetime, timedelta, timezone

import numpy as np

from mlscope.store import open_store

url = sys.argv[1]
t0 = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
rng = np.random.default_rng(7)


def lat(n, median_ms):
    return [int(x) for x in rng.lognormal(np.log(median_ms * 1e6), 0.05, n)]


def summary(latencies):
    a = np.array(latencies) / 1e6
    return {
        "count": len(latencies),
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "p90": float(np.percentile(a, 90)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
        "p999": float(np.percentile(a, 99.9)),
        "min": float(a.min()),
        "max": float(a.max()),
        "stdev": float(a.std()),
        "iqr": float(np.subtract(*np.percentile(a, [75, 25]))),
        "cv": float(a.std() / a.mean()),
        "trimmed_mean": float(np.median(a)),
        "median_ci": [float(np.median(a)) * 0.99, float(np.median(a)) * 1.01],
    }


system = {
    "id": "fixture-system-a",
    "hostname": "box-a",
    "cpu": {"model": "Fixture CPU", "cores": 2},
    "gpus": [],
    "os": "Linux",
}
system_b = {
    "id": "fixture-system-b",
    "hostname": "box-b",
    "cpu": {"model": "Fixture CPU", "cores": 8},
    "gpus": [],
    "os": "Linux",
}
with open_store(url) as store:
    ids = []
    for i, (model, fw, sysd, status) in enumerate(
        [
            ("resnet18", "pytorch", system, "succeeded"),
            ("resnet18", "onnxruntime", system, "succeeded"),
            ("resnet18", "onnxruntime", system_b, "succeeded"),
            ("mobilenet_v2", "pytorch", system, "succeeded"),
            ("resnet18", "pytorch", system, "failed"),
            ("resnet50", "onnxruntime", system, "queued"),
            ("resnet18", "pytorch", system_b, "cancelled"),
            ("resnet18", "onnxruntime", system, "succeeded"),
        ]
    ):
        created = t0 + timedelta(hours=i)
        eid = store.create_evaluation(
            id=f"fixture{i:02d}" + "0" * 24,
            model={"name": model, "version": "1", "manifest_sha256": "ab" * 32},
            manifest={"name": model},
            framework={"name": fw, "version": None},
            runner="process",
            device="cpu",
            request={"model": model, "framework": fw, "batch_sizes": [1, 8]},
            trace_level="MODEL" if i == 0 else "NO_TRACE",
            trace_id=("0123456789abcdef" * 2) if i == 0 else None,
            created_at=created,
        )
        ids.append(eid)
        if status == "queued":
            continue
        if status == "cancelled":
            store.cancel_evaluation(eid)
            continue
        store.start_evaluation(eid)
        if status == "failed":
            store.fail_evaluation(
                eid, error={"type": "PredictorCrashed", "message": "exit 137", "phase": "measure"}
            )
            continue
        ms = []
        for bs, med in ((1, 10.0 + i), (8, 60.0 + i)):
            raw = lat(200, med)
            ms.append(
                {
                    "scenario": "single_stream",
                    "batch_size": bs,
                    "latency_ms": summary(raw),
                    "throughput": bs / (med / 1000),
                    "validity": {"valid": i != 7, "reasons": [] if i != 7 else ["unstable: cv 0.4 > 0.25"]},
                    "latencies_ns": raw,
                    "duration_s": 2.0,
                    "stop_reason": "stable",
                }
            )
        store.finish_evaluation(
            eid,
            system=sysd,
            framework={"name": fw, "version": "2.14.1" if fw == "pytorch" else "1.23.0"},
            cold_start={"import_ms": 900.0, "load_ms": 120.0, "first_inference_ms": 30.0},
            measurements=ms,
            finished_at=created + timedelta(seconds=30),
        )
    spans = []
    base = int(t0.timestamp() * 1e9)
    for k in range(20):
        spans.append(
            {
                "trace_id": "0123456789abcdef" * 2,
                "span_id": f"{k + 1:016x}",
                "parent_id": None if k == 0 else f"{1:016x}",
                "name": "run" if k == 0 else "inference",
                "level": "APPLICATION" if k == 0 else "MODEL",
                "start_ns": base + k * 1000,
                "end_ns": base + k * 1000 + (20000 if k == 0 else 900),
                "attributes": {"mlscope.process": "cli"}
                if k == 0
                else {"pass": "MODEL", "batch_size": 1, "iteration": k},
            }
        )
    store.save_spans(ids[0], spans)
    print(store.count_evaluations(), "evaluations")
