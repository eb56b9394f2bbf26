"""Realistic evaluations for benchmarks/store_scale.py, and filling a store with them.

`Evaluations` makes result documents in the shape `Store.get_evaluation(id, include_raw=True)` returns:
~20 models × 5 frameworks × 10 systems × 2 devices, each succeeded evaluation with two single_stream
points (batch 1 and 8) of raw latencies drawn lognormally around a median fixed per (model,
framework, system, device); ~5 % failed, ~4 % of points invalid, created_at spread over the year
before `now`. The stream is seeded, so a run makes the same store every time, and it continues across
calls, so a store grows without being refilled.

`fill` writes them with `Store.import_evaluations` when the store has it, else replays each one
through the lifecycle (create → start → finish | fail). `SQLiteBackend` and `PostgresBackend` are
the stores filled: a file in the run's temporary directory, a database created and dropped by it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from mlscope.store import Store

MODELS = (
    "resnet18", "resnet50", "resnet101", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0",
    "efficientnet_b4", "densenet121", "inception_v3", "vgg16", "squeezenet1_1", "shufflenet_v2",
    "vit_b_16", "convnext_tiny", "regnet_y_8gf", "bert_base", "distilbert", "gpt2", "yolov5s", "unet",
)  # fmt: skip
FRAMEWORKS = ("pytorch", "onnxruntime", "tensorflow", "openvino", "tvm")
FRAMEWORK_VERSIONS = {
    "pytorch": "2.4.1",
    "onnxruntime": "1.19.2",
    "tensorflow": "2.17.0",
    "openvino": "2024.4.0",
    "tvm": "0.17.0",
}
DEVICES = ("cpu", "cuda:0")
RUNNERS = ("process", "process", "process", "docker", "inline")
BATCH_SIZES = (1, 8)
FAILED_SHARE = 0.05
INVALID_SHARE = 0.04
ERRORS = (
    ("PredictorCrashed", "the predictor exited with status 137", "measure"),
    ("ModelLoadError", "cannot load weights: checksum mismatch", "load"),
    ("TimeoutError", "no result within 600 s", "measure"),
)


def _system(index: int) -> dict[str, Any]:
    gpu = {"name": f"NVIDIA GPU model {index % 3}", "memory_mb": 16384 * (1 + index % 3), "driver": "550.54"}
    body = {
        "hostname": f"bench-{index:02d}",
        "cpu": {"model": f"x86-64 CPU model {index % 4}", "cores": 4 * (1 + index % 4), "threads": 8},
        "gpus": [gpu] if index % 2 == 0 else [],
        "memory_mb": 32768 * (1 + index % 2),
        "os": "Linux 6.1.0",
        "python": "3.11.2",
    }
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return {"id": digest[:16], **body}


SYSTEMS = tuple(_system(i) for i in range(10))


def _iso(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat()


class Evaluations:
    """A seeded, endless stream of result documents.

    Args:
        raw_per_point: raw latencies kept per point.
        now: the newest created_at; the oldest is a year before.
        seed: the random stream's seed.
    """

    def __init__(self, *, raw_per_point: int = 200, now: datetime, seed: int = 13) -> None:
        self.raw_per_point = raw_per_point
        self.now = now
        self.made = 0
        self.first_id: str | None = None
        self._rng = np.random.default_rng(seed)
        shape = (len(MODELS), len(FRAMEWORKS), len(SYSTEMS), len(DEVICES))
        rng = np.random.default_rng(seed + 1)
        model_ms = np.exp(rng.uniform(np.log(2.0), np.log(80.0), shape[0]))
        framework_factor = rng.uniform(0.7, 1.4, shape[1])
        system_factor = rng.uniform(0.5, 2.0, shape[2])
        device_factor = np.array([1.0, 0.2])
        # Median latency in ms of batch 1 per (model, framework, system, device); batch 8 costs ~5×.
        self._median_ms = (
            model_ms[:, None, None, None]
            * framework_factor[None, :, None, None]
            * system_factor[None, None, :, None]
            * device_factor[None, None, None, :]
        )
        self._sigma = rng.uniform(0.03, 0.15, shape)
        self._manifests = {name: self._manifest(name) for name in MODELS}

    @staticmethod
    def _manifest(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "version": "1",
            "task": "image-classification",
            "framework": {"name": "pytorch", "version": ">=2.0"},
            "source": {"python": f"torchvision.models:{name}"},
            "weights": "random",
            "inputs": [{"name": "x", "shape": [1, 3, 224, 224], "dtype": "float32", "layout": "NCHW"}],
            "outputs": [{"name": "y"}],
        }

    def take(self, count: int) -> list[dict[str, Any]]:
        """The next `count` documents of the stream."""
        rng = self._rng
        n, points = count, len(BATCH_SIZES)
        combo = [rng.integers(0, size, n) for size in self._median_ms.shape]
        age_s = rng.uniform(0, 365 * 24 * 3600, n)
        queued_s = rng.uniform(0.5, 30, n)
        run_s = rng.uniform(10, 120, n)
        failed = rng.random(n) < FAILED_SHARE
        invalid = rng.random((n, points)) < INVALID_SHARE
        runner = rng.integers(0, len(RUNNERS), n)
        error = rng.integers(0, len(ERRORS), n)
        ids = [bytes(row).hex() for row in rng.integers(0, 256, (n, 16), dtype=np.uint8)]
        median_ms = self._median_ms[tuple(combo)][:, None] * (1 + 0.6 * (np.array(BATCH_SIZES) - 1))
        sigma = self._sigma[tuple(combo)][:, None, None]
        raw_ns = (
            median_ms[:, :, None] * 1e6 * np.exp(sigma * rng.standard_normal((n, points, self.raw_per_point)))
        )
        raw_ns = raw_ns.astype(np.int64)
        ms = np.sort(raw_ns, axis=-1) / 1e6
        q = np.percentile(ms, [25, 50, 75, 90, 95, 99, 99.9], axis=-1)
        mean, stdev = ms.mean(axis=-1), ms.std(axis=-1, ddof=1)
        documents = []
        for i in range(n):
            m, f, s, d = (int(c[i]) for c in combo)
            created = self.now - timedelta(seconds=float(age_s[i]))
            started = created + timedelta(seconds=float(queued_s[i]))
            finished = started + timedelta(seconds=float(run_s[i]))
            model, framework, system = MODELS[m], FRAMEWORKS[f], SYSTEMS[s]
            document: dict[str, Any] = {
                "id": ids[i],
                "status": "failed" if failed[i] else "succeeded",
                "model": {"name": model, "version": "1", "manifest_sha256": _sha(model)},
                "framework": {"name": framework, "version": FRAMEWORK_VERSIONS[framework]},
                "system": None,
                "runner": RUNNERS[runner[i]],
                "device": DEVICES[d],
                "trace_level": "NO_TRACE",
                "trace_id": None,
                "request": {
                    "model": model,
                    "framework": framework,
                    "device": DEVICES[d],
                    "batch_sizes": list(BATCH_SIZES),
                    "scenario": "single_stream",
                },
                "manifest": self._manifests[model],
                "cold_start": None,
                "measurements": [],
                "error": None,
                "created_at": _iso(created),
                "started_at": _iso(started),
                "finished_at": _iso(finished),
            }
            if failed[i]:
                kind, message, phase = ERRORS[error[i]]
                document["error"] = {"type": kind, "message": message, "phase": phase}
                document["framework"]["version"] = None  # as a lifecycle that failed leaves it
            else:
                document["system"] = system
                document["cold_start"] = {
                    "import_ms": 800.0 + 40 * f,
                    "load_ms": 20.0 * float(median_ms[i, 0]),
                    "first_inference_ms": 3.0 * float(median_ms[i, 0]),
                }
                document["measurements"] = [
                    _point(BATCH_SIZES[j], raw_ns[i, j], q[:, i, j], float(mean[i, j]), float(stdev[i, j]))
                    for j in range(points)
                ]
                for j in np.flatnonzero(invalid[i]):
                    document["measurements"][j]["validity"] = {
                        "valid": False,
                        "reasons": ["unstable: median CI half-width 7.2% > 5%"],
                    }
            documents.append(document)
        if self.first_id is None and documents:
            self.first_id = documents[0]["id"]
        self.made += n
        return documents


def _point(batch_size: int, raw: np.ndarray, q: np.ndarray, mean: float, stdev: float) -> dict[str, Any]:
    p25, median, p75, p90, p95, p99, p999 = (float(v) for v in q)
    return {
        "scenario": "single_stream",
        "batch_size": batch_size,
        "latency_ms": {
            "count": int(raw.size),
            "mean": mean,
            "median": median,
            "p90": p90,
            "p95": p95,
            "p99": p99,
            "p999": p999,
            "min": float(raw.min()) / 1e6,
            "max": float(raw.max()) / 1e6,
            "stdev": stdev,
            "iqr": p75 - p25,
            "cv": stdev / mean,
            "trimmed_mean": mean,
            "median_ci": [median * 0.99, median * 1.01],
        },
        "throughput": batch_size * 1000.0 / median,
        "validity": {"valid": True, "reasons": []},
        "latencies_ns": raw.tolist(),
        "duration_s": round(float(raw.sum()) / 1e9, 3),
        "stop_reason": "stable",
    }


def _sha(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


# ----- the stores filled ---------------------------------------------------------------------------


class SQLiteBackend:
    name = "sqlite"

    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "store.db"
        self.url = f"sqlite:///{self.path}"

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*"))

    def after_fill(self) -> None:
        pass

    def drop(self) -> None:
        pass  # the temporary directory goes with the run


class PostgresBackend:
    name = "postgresql"

    # psycopg comes with mlscope's postgresql extra: imported only when this backend is run.

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url.rstrip("/")
        self.database = f"mlscope_bench_{os.getpid()}"
        self.url = f"{self.admin_url}/{self.database}"
        self.created = False
        with _psycopg().connect(f"{self.admin_url}/postgres", autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.database}"')
        self.created = True  # only a database this script created is ever dropped

    def size_bytes(self) -> int:
        with _psycopg().connect(self.url) as connection:
            row = connection.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row else 0

    def after_fill(self) -> None:
        # As autovacuum (on by default; since PostgreSQL 13 it also vacuums tables that are only
        # inserted into) would have by the time anyone reads a store this size: fresh planner
        # statistics, and a visibility map that lets a deep page be read from the index alone.
        with _psycopg().connect(self.url, autocommit=True) as connection:
            connection.execute("VACUUM (ANALYZE)")

    def drop(self) -> None:
        if self.created:
            with _psycopg().connect(f"{self.admin_url}/postgres", autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            self.created = False


def _psycopg() -> Any:
    import psycopg

    return psycopg


def has_bulk_import(store: Store) -> bool:
    """Whether this branch's Store has `import_evaluations`."""
    return callable(getattr(store, "import_evaluations", None))


def fill(store: Store, documents: Sequence[Mapping[str, Any]], *, batch_size: int = 1000) -> int:
    """Writes `documents`: in bulk when the store can, else one lifecycle at a time.

    Returns:
        How many evaluations were inserted.
    """
    if has_bulk_import(store):
        return int(getattr(store, "import_evaluations")(documents, batch_size=batch_size))  # noqa: B009
    for document in documents:
        _replay(store, document)
    return len(documents)


def _replay(store: Store, document: Mapping[str, Any]) -> None:
    at = {key: datetime.fromisoformat(document[key]) for key in ("created_at", "started_at", "finished_at")}
    id = store.create_evaluation(
        id=document["id"],
        model=document["model"],
        manifest=document["manifest"],
        framework={"name": document["framework"]["name"], "version": None},
        runner=document["runner"],
        device=document["device"],
        request=document["request"],
        trace_level=document["trace_level"],
        trace_id=document["trace_id"],
        created_at=at["created_at"],
    )
    store.start_evaluation(id, started_at=at["started_at"])
    if document["status"] == "failed":
        store.fail_evaluation(id, error=document["error"], finished_at=at["finished_at"])
        return
    store.finish_evaluation(
        id,
        system=document["system"],
        framework=document["framework"],
        cold_start=document["cold_start"],
        measurements=document["measurements"],
        finished_at=at["finished_at"],
    )
