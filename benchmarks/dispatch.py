"""What the farm's dispatch costs: API → broker → two workers, against bare Celery on the same broker.

Prints, in one run on this machine:
  - submit-to-start latency, p50 and p99, of jobs submitted one at a time to an idle farm: from the
    moment the client sends POST /api/v1/evaluations to the moment a worker marks the evaluation
    running (target: p50 ≤ 50 ms); the same for bare Celery (send_task → the task body starts);
  - jobs per second through API → broker → two `mlscope worker`s for a burst of jobs, and through
    two bare Celery workers running the *same* job body (mlscope's predictor runtime on a model that
    does nothing: torch.nn.Identity, inline runner, ~10 timed iterations), and their ratio (target
    ≥ 0.8). What the ratio isolates is mlscope's own dispatch: HTTP, validation, the store's
    lifecycle writes, the agent registry and routing;
  - for context, the rate of empty Celery tasks on the same broker.

Needs Redis on 127.0.0.1:6379 (database 11 is emptied and used) or --broker-url for RabbitMQ.

Usage: python benchmarks/dispatch.py [--jobs 100] [--latency-jobs 40] [--broker-url URL]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from mlscope.client import Client
from mlscope.contract.job import Job
from mlscope.registry.models import ModelRegistry
from mlscope.store import open_store

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
REDIS_URL = "redis://127.0.0.1:6379/11"
TOKEN = "dispatch-benchmark"
CAPABILITY = "cpu.bench"
MEASURE = {"warmup_count": 1, "warmup_seconds": 0.0, "min_count": 10, "min_seconds": 0.0, "max_seconds": 1.0}
MANIFEST = """\
name: noop
version: "1.0"
task: other
description: a model that does nothing (torch.nn.Identity), for dispatch benchmarks
framework:
  name: pytorch
  version: ">=2.0"
source:
  python: benchmarks.noop_model:identity
weights: random
inputs:
  - name: x
    shape: [1]
    dtype: float32
    layout: NC
outputs:
  - name: y
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _wait(predicate: Any, timeout_s: float, what: str, poll_s: float = 0.01) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"dispatch: timed out waiting for {what}")
        time.sleep(poll_s)


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


class Processes:
    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs, self.running = env, logs, []

    def start(self, name: str, *args: str, cwd: Path = REPO) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
        process = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
        self.running.append(process)
        return process

    def stop(self) -> None:
        for process in self.running:
            process.send_signal(signal.SIGINT)
        for process in self.running:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        self.running = []


def bench_mlscope(env: dict[str, str], logs: Path, jobs: int, latency_jobs: int) -> dict[str, Any]:
    procs = Processes(env, logs)
    api_url = env["MLSCOPE_API_URL"]
    client = Client(api_url, TOKEN)
    try:
        procs.start("api", sys.executable, "-m", "mlscope", "api", "--port", api_url.rsplit(":", 1)[1])
        for name in ("bench-1", "bench-2"):
            procs.start(
                name, sys.executable, "-m", "mlscope", "worker", "--agent-id", name,
                "--capability", CAPABILITY, "--runner", "inline", "--shared-host", "--loglevel", "WARNING",
            )  # fmt: skip
        _wait(lambda: _answers(client), 60, "the api")
        _wait(lambda: len(client.agents()) == 2, 90, "two workers")
        request = {"model": "noop", "framework": "pytorch", "target": CAPABILITY, "runner": "inline",
                   "measure": MEASURE}  # fmt: skip
        # Warm-up: each worker imports torch once, on its first job; pinning two jobs to each makes
        # sure neither meets its first job inside the measurement (brokers need not share them out).
        warm = [{**request, "target": f"agent:{name}"} for name in ("bench-1", "bench-2") for _ in range(2)]
        client.wait([client.submit(job)["id"] for job in warm], timeout_s=120)

        latencies = []
        for _ in range(latency_jobs):
            sent = time.time()
            evaluation_id = client.submit(request)["id"]
            (done,) = client.wait([evaluation_id], poll_s=0.01, timeout_s=60)
            latencies.append((_ts(done["started_at"]) - sent) * 1000)

        first = time.time()
        ids = [client.submit(request)["id"] for _ in range(jobs)]
        # One cheap count a quarter-second, so that waiting does not take CPU from the workers.
        with open_store(env["MLSCOPE_STORE_URL"]) as store:

            def ended() -> bool:
                active = ("queued", "running")
                return all(store.count_evaluations(model="noop", status=s) == 0 for s in active)

            _wait(ended, 600, "the burst", 0.25)
            results = [store.get_evaluation(i) for i in ids]
        failed = [r for r in results if r["status"] != "succeeded"]
        if failed:
            raise SystemExit(f"dispatch: {len(failed)} mlscope jobs failed: {failed[0]['error']}")
        last = max(_ts(r["finished_at"]) for r in results)
        return {"latencies_ms": latencies, "jobs_per_s": jobs / (last - first)}
    finally:
        procs.stop()


def _answers(client: Client) -> bool:
    try:
        client.health()
    except Exception:
        return False
    return True


def bare_job(env: dict[str, str]) -> dict[str, Any]:
    """The no-op evaluation job as bare Celery's task receives it (the same body mlscope's worker runs)."""
    manifest = ModelRegistry.load([Path(env["MLSCOPE_MANIFESTS"])]).get("noop", "pytorch")
    return Job(
        evaluation_id="bare",
        manifest=manifest.to_dict(),
        origin=manifest.origin,
        framework="pytorch",
        device="cpu",
        batch_sizes=(1,),
        scenarios=("single_stream",),
        measure=dict(MEASURE),
        options={},
        cache_dir=env["MLSCOPE_CACHE_DIR"],
    ).to_dict()


def bench_bare(env: dict[str, str], logs: Path, jobs: int, latency_jobs: int) -> dict[str, Any]:
    procs = Processes(env, logs)
    app = Celery("bare-client", broker=env["MLSCOPE_BROKER_URL"], set_as_current=False)
    app.conf.update(task_serializer="json", task_ignore_result=True)
    times = redis.Redis.from_url(REDIS_URL)
    job = bare_job(env)

    def send(name: str, *args: Any, queue: str = "bench.bare") -> str:
        return str(app.send_task(name, args=args, queue=queue).id)

    def done(task_id: str) -> bool:
        return bool(times.exists(f"bench:{task_id}"))

    def started(task_id: str) -> float:
        return float(times.hget(f"bench:{task_id}", "started") or 0)

    def ended(task_id: str) -> float:
        return float(times.hget(f"bench:{task_id}", "ended") or 0)

    try:
        for name in ("bare-1", "bare-2"):
            procs.start(
                name, sys.executable, "-m", "celery", "-A", "bare_celery", "worker", "--pool=solo",
                "--concurrency=1", f"--queues=bench.bare,bench.{name}", f"--hostname={name}@%h",
                "--loglevel=WARNING", "--without-gossip", "--without-mingle", cwd=HERE,
            )  # fmt: skip
        warm = [
            send("bench.evaluate", job, queue=f"bench.{name}")
            for name in ("bare-1", "bare-2")
            for _ in range(2)
        ]
        _wait(lambda: all(done(t) for t in warm), 120, "bare workers to warm up")

        latencies = []
        for _ in range(latency_jobs):
            sent = time.time()
            task_id = send("bench.evaluate", job)
            _wait(lambda task_id=task_id: done(task_id), 60, "a bare job")
            latencies.append((started(task_id) - sent) * 1000)

        first = time.time()
        ids = [send("bench.evaluate", job) for _ in range(jobs)]
        _wait(
            lambda: times.scard("bench:done") >= len(ids) + len(warm) + latency_jobs, 600, "the burst", 0.25
        )
        jobs_per_s = jobs / (max(ended(t) for t in ids) - first)

        first = time.time()
        empties = [send("bench.empty") for _ in range(jobs * 5)]
        expected = len(empties) + len(ids) + len(warm) + latency_jobs
        _wait(lambda: times.scard("bench:done") >= expected, 600, "the empty tasks", 0.25)
        empty_per_s = len(empties) / (max(ended(t) for t in empties) - first)
        return {"latencies_ms": latencies, "jobs_per_s": jobs_per_s, "empty_per_s": empty_per_s}
    finally:
        procs.stop()
        times.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100, help="jobs in each throughput burst")
    parser.add_argument("--latency-jobs", type=int, default=40, help="jobs sent one at a time for latency")
    parser.add_argument("--broker-url", default=REDIS_URL, help="the broker both paths use")
    args = parser.parse_args()

    registry = redis.Redis.from_url(REDIS_URL)
    registry.flushdb()
    registry.close()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "manifests").mkdir()
        (tmp / "manifests" / "noop-pytorch.yaml").write_text(MANIFEST)
        env = {
            **os.environ,
            "MLSCOPE_STORE_URL": f"sqlite:///{tmp / 'store.db'}",
            "MLSCOPE_BROKER_URL": args.broker_url,
            "MLSCOPE_REGISTRY_URL": REDIS_URL,
            "MLSCOPE_API_URL": f"http://127.0.0.1:{_free_port()}",
            "MLSCOPE_API_TOKENS": TOKEN,
            "MLSCOPE_MANIFESTS": str(tmp / "manifests"),
            "MLSCOPE_CACHE_DIR": str(tmp / "cache"),
            "MLSCOPE_SETTINGS": str(tmp / "none.toml"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), str(HERE), os.environ.get("PYTHONPATH")])),
        }
        ours = bench_mlscope(env, tmp, args.jobs, args.latency_jobs)
        bare = bench_bare(env, tmp, args.jobs, args.latency_jobs)

    broker = args.broker_url.split("://")[0]
    for name, figures in (
        ("mlscope (API → broker → worker)", ours),
        ("bare Celery (send_task → task)", bare),
    ):
        lat = figures["latencies_ms"]
        print(
            f"{name}: submit-to-start p50 {statistics.median(lat):.1f} ms, "
            f"p99 {_percentile(lat, 0.99):.1f} ms over {len(lat)} jobs; "
            f"{figures['jobs_per_s']:.1f} jobs/s over a burst of {args.jobs}"
        )
    print(f"bare Celery, empty tasks: {bare['empty_per_s']:.0f} tasks/s (for context) on {broker}")
    ratio = ours["jobs_per_s"] / bare["jobs_per_s"]
    p50 = statistics.median(ours["latencies_ms"])
    print(
        f"submit-to-start p50 {p50:.1f} ms (target ≤ 50 ms: {'met' if p50 <= 50 else 'MISSED'}); "
        f"throughput ratio mlscope / bare Celery {ratio:.3f} "
        f"(target ≥ 0.8: {'met' if ratio >= 0.8 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
