"""Builders of realistic evaluations for the store contract suite, so each test's Given fits in a
few lines."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from mlscope.store import Store
from tests.result_shape import RESULT_KEYS as BASE_RESULT_KEYS

__all__ = [
    "COLD_START",
    "ERROR",
    "RESULT_KEYS",
    "T0",
    "finish",
    "ids_of",
    "make_measurement",
    "make_system",
    "run_to",
    "submit",
]

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
COLD_START = {"import_ms": 812.5, "load_ms": 95.25, "first_inference_ms": 12.0}
ERROR = {"type": "RuntimeError", "message": "CUDA out of memory", "phase": "load"}
RESULT_KEYS = BASE_RESULT_KEYS | {"request", "manifest"}


def make_system(n: int = 1, **overrides: Any) -> dict[str, Any]:
    return {
        "id": f"sys-{n}",
        "hostname": f"host-{n}",
        "cpu": {"model": "Xeon Gold 6230", "cores": 20, "flags": ["avx2", "avx512f"]},
        "gpus": [{"name": "A100", "memory_bytes": 40 * 2**30}] if n % 2 == 0 else [],
        "memory_bytes": 64 * 2**30,
        "os": "Linux-6.1",
        "python": "3.11.7",
        "software": {"numpy": "2.0.0"},
        **overrides,
    }


def make_measurement(
    scenario: str = "single_stream", batch_size: int = 1, *, mean: float = 2.0
) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "batch_size": batch_size,
        "latency_ms": {
            "count": 5,
            "mean": mean,
            "median": mean,
            "p90": mean * 1.1,
            "p95": mean * 1.2,
            "p99": mean * 1.3,
            "p999": mean * 1.4,
            "min": mean * 0.9,
            "max": mean * 1.5,
            "stdev": 0.1,
            "iqr": 0.05,
            "cv": 0.05,
            "trimmed_mean": mean,
            "median_ci": [mean * 0.95, mean * 1.05],
        },
        "throughput": 1000.0 / mean * batch_size,
        "validity": {"valid": False, "reasons": ["too few samples"]},
        "latencies_ns": [int(mean * 1e6) + i for i in range(5)],
        "duration_s": 2.5,
        "stop_reason": "max_duration",
        "environment": {"governor": "performance", "throttled": False},
        "settings": {"warmup": 10, "min_count": 5},
    }


def submit(
    store: Store,
    *,
    model: str = "resnet18",
    framework: str = "pytorch",
    id: str | None = None,
    created_at: datetime | None = None,
    queue: str | None = None,
    request: dict[str, Any] | None = None,
) -> str:
    """A queued evaluation; `request`: settings added to its request (model_options, load, ...)."""
    return store.create_evaluation(
        model={"name": model, "version": "1.0", "manifest_sha256": "a" * 64},
        manifest={
            "name": model,
            "framework": {"name": framework, "version": "*"},
            "task": "image_classification",
        },
        framework={"name": framework, "version": None},
        runner="inline",
        device="cpu",
        request={"model": model, "framework": framework, "batch_sizes": [1, 8], **(request or {})},
        id=id,
        created_at=created_at,
        queue=queue,
    )


def finish(
    store: Store,
    id: str,
    *,
    system: dict[str, Any] | None = None,
    measurements: list[dict[str, Any]] | None = None,
    cold_start: dict[str, Any] | None = None,
) -> None:
    store.finish_evaluation(
        id,
        system=system or make_system(),
        framework={"name": "pytorch", "version": "2.3.0"},
        cold_start=cold_start or COLD_START,
        measurements=[make_measurement()] if measurements is None else measurements,
    )


def run_to(store: Store, status: str, **submit_args: Any) -> str:
    """A new evaluation taken through the lifecycle to `status`."""
    id = submit(store, **submit_args)
    if status != "queued":
        store.start_evaluation(id)
    if status == "succeeded":
        finish(store, id)
    elif status == "failed":
        store.fail_evaluation(id, error=ERROR)
    elif status == "cancelled":
        store.cancel_evaluation(id)
    return id


def ids_of(evaluations: list[dict[str, Any]]) -> list[str]:
    return [evaluation["id"] for evaluation in evaluations]


# A server point's `load` section with a latency search, every key docs/design.md fixes and docs/load.md
# describes, plus one a newer runtime might add: a store must give it back unchanged.
SERVER_LOAD: dict[str, Any] = {
    "certified": {
        "percentile": 99.0,
        "confidence": 0.99,
        "ok": True,
        "queries": 1200,
        "queries_needed": 0,
        "estimate_ms": 4.1,
        "bound_ms": 50.0,
        "over_bound": 3,
    },
    "target_qps": 20.0,
    "scheduled_qps": 19.7,
    "achieved_qps": 19.7,
    "completed_qps": 19.6,
    "issue_lateness_ms": {"mean": 0.12, "p50": 0.05, "p99": 0.9, "max": 2.5},
    "queries": 1200,
    "late": 0,
    "queued": 14,
    "unfinished": 0,
    "max_in_flight": 1,
    "seed": 0,
    "in_flight": {"observed": 0.21, "littles_law": 0.2, "ratio": 1.03},
    "service_ms": {"median": 3.9, "p90": 4.2, "p99": 4.6},
    "search": {
        "latency_bound_ms": 50.0,
        "percentile": 99.0,
        "max_qps": 183.0,
        "probes": [
            {
                "target_qps": 183.0,
                "achieved_qps": 182.4,
                "queries": 5490,
                "duration_s": 30.0,
                "p50_ms": 9.0,
                "p90_ms": 20.0,
                "p99_ms": 44.0,
                "percentile_ms": 44.0,
                "certified": True,
                "passed": True,
                "reason": "p99 44.0 ms ≤ 50 ms",
            },
            {
                "target_qps": 400.0,
                "achieved_qps": 350.2,
                "queries": 10506,
                "duration_s": 30.0,
                "p50_ms": None,
                "p90_ms": None,
                "p99_ms": None,
                "percentile_ms": None,
                "certified": False,
                "passed": False,
                "reason": "could not issue at 400 qps",
            },
        ],
    },
    "a_newer_key": {"nested": [1, 2.5, None]},
}


def make_loaded_measurement(scenario: str = "server", batch_size: int = 1) -> dict[str, Any]:
    """A measurement with SERVER_LOAD as its `load` section (multi_stream's keys added for that
    scenario)."""
    load = dict(SERVER_LOAD)
    if scenario == "multi_stream":
        load = {**load, "samples_per_query": 8, "interval_ms": 50.0, "overruns": 2}
        del load["search"]
    return {**make_measurement(scenario, batch_size), "load": load}
