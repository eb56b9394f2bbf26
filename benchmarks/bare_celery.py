"""Bare Celery, for benchmarks/dispatch.py: the same evaluation job run by a plain Celery task,
without mlscope's API, store, registry or routing.

    celery -A bare_celery worker --pool=solo --concurrency=1 --queues=bench.bare

The broker comes from MLSCOPE_BROKER_URL; each task writes the wall-clock time it started and ended
into Redis (MLSCOPE_REGISTRY_URL) under `bench:<task id>` and adds the id to the set `bench:done`,
where the benchmark reads them.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

from mlscope.contract.job import Job
from mlscope.runtime.execute import execute

app = Celery("bare", broker=os.environ["MLSCOPE_BROKER_URL"], set_as_current=True)
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
)
_times = redis.Redis.from_url(os.environ["MLSCOPE_REGISTRY_URL"])


def _done(task_id: str, started: float, ended: float) -> None:
    pipe = _times.pipeline()
    pipe.hset(f"bench:{task_id}", mapping={"started": started, "ended": ended})
    pipe.sadd("bench:done", task_id)
    pipe.execute()


@app.task(name="bench.evaluate", bind=True)
def evaluate(task: Any, job: dict[str, Any]) -> None:
    started = time.time()
    execute(Job.from_dict(job), lambda event: None)
    _done(task.request.id, started, time.time())


@app.task(name="bench.empty", bind=True)
def empty(task: Any) -> None:
    now = time.time()
    _done(task.request.id, now, now)
