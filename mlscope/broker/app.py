"""The Celery app, configured so that delivery loses nothing.

- late acknowledgement: a job is acknowledged when it has ended, not when it was received;
- a worker that dies mid-job leaves its job unacknowledged, and the broker hands it to another
  (RabbitMQ at once, when the connection drops; on Redis the sweeper gives it back once the worker's
  heartbeat has lapsed, and Redis's own visibility timeout follows the longest job's time limit);
- prefetch of one: a worker holds no job it is not running, so a busy worker never hoards jobs
  another idle one could serve;
- per-task time limits, from the request's own limit;
- the result is written by the store, idempotently per evaluation id, so a redelivered job never
  produces two results (Store.finish_evaluation).
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from mlscope.broker.tasks import EVALUATE_TASK, TaskMessage
from mlscope.contract.request import MAX_TIMEOUT_S
from mlscope.contract.settings import Settings

__all__ = [
    "TIME_LIMIT_MARGIN_S",
    "broker_ping",
    "make_celery",
    "queue_depths",
    "send_evaluation",
    "visibility_timeout_s",
]

# Beyond the request's own limit (which the runner enforces on the predictor), the task gets this
# long to store what happened before Celery's own limit ends it.
TIME_LIMIT_MARGIN_S = 60.0


def visibility_timeout_s(settings: Settings) -> float:
    """How long Redis keeps a message a worker took and never acknowledged before it hands it to
    another worker.

    Redis applies one timeout to every message, so unless the setting names one, it is the longest
    time limit a job may have (MAX_TIMEOUT_S and the task's margin): no job is ever handed out a second
    time while it may still be running within its own limit (with a fixed two hours, a three-hour job
    got a twin). A dead worker's job does not wait for it: the sweeper (workers.sweeper) puts it back
    within two heartbeat lifetimes of the death.
    """
    if settings.visibility_timeout_s is not None:
        return settings.visibility_timeout_s
    return MAX_TIMEOUT_S + 2 * TIME_LIMIT_MARGIN_S


def _transport_options(settings: Settings) -> dict[str, Any]:
    """Redis's delivery options. Kombu looks for messages past the visibility timeout every
    `unacked_restore_interval` seconds: at most every 10 s, sooner for a short timeout.
    (RabbitMQ redelivers when the connection drops, and ignores these.)
    """
    timeout = visibility_timeout_s(settings)
    return {
        "visibility_timeout": timeout,
        "unacked_restore_interval": max(1, min(10, int(timeout / 4))),
        "unacked_restore_throttle": 1,
    }


def make_celery(settings: Settings, *, name: str = "mlscope") -> Celery:
    """A Celery app on `settings.broker_url` (redis:// or amqp://)."""
    app = Celery(name, broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        result_backend=None,
        task_create_missing_queues=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options=_transport_options(settings),
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        enable_utc=True,
    )
    return app


def send_evaluation(app: Celery, message: TaskMessage) -> None:
    """Put one job on its queue: an evaluation, or a brick group (the task id is its first member's
    evaluation id, the time limit its first member's)."""
    limit = message.request.timeout_s + TIME_LIMIT_MARGIN_S
    app.send_task(
        EVALUATE_TASK,
        kwargs={"message": message.to_dict()},
        queue=message.queue,
        routing_key=message.queue,
        task_id=message.evaluation_id,
        time_limit=limit,
        soft_time_limit=limit - TIME_LIMIT_MARGIN_S / 2,
    )


def queue_depths(app: Celery, queues: list[str]) -> dict[str, int]:
    """How many messages wait in each queue (not counting ones a worker holds); 0 for a queue the
    broker does not know yet."""
    depths: dict[str, int] = {}
    with app.connection_for_write() as connection:
        channel: Any = connection.default_channel
        for queue in queues:
            try:
                depths[queue] = int(channel.queue_declare(queue=queue, passive=True).message_count)
            except Exception:
                depths[queue] = 0
                channel = connection.channel()  # an AMQP channel is closed by a failed passive declare
    return depths


def broker_ping(app: Celery, timeout_s: float = 3.0) -> None:
    """Raises when the broker cannot be reached within `timeout_s`."""
    with app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1, timeout=timeout_s)
