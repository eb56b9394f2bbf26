"""A brick group as a job of its own, end to end on the real Redis and PostgreSQL with `mlscope api` and
a real `mlscope worker`: the api queues a farm's bricks as one brick group's message, and a brick
group queued in an older api's form (an evaluation's message carrying "companions") is still
measured as one group, each brick an evaluation of its own.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import onnxruntime  # noqa: F401 - the project installs it: a missing install fails here, never skips
import pytest
import redis

from mlscope.broker.app import make_celery
from mlscope.broker.tasks import EVALUATE_TASK, EvaluationMessage
from mlscope.contract.request import parse_request
from mlscope.contract.settings import Settings
from tests.fixtures.brick_graphs import mlp
from tests.integration.farm import REDIS_URL, Farm

pytestmark = pytest.mark.slow

MEASURE = {"warmup_count": 3, "min_count": 15, "min_seconds": 0.0, "max_seconds": 0.25}


def _take_queued(queue: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(Celery headers, message dict) of each job waiting on `queue`, taken off it (kombu's Redis
    transport keeps a JSON envelope whose body is base64 JSON [args, kwargs, embed])."""
    connection = redis.Redis.from_url(REDIS_URL)
    try:
        found = []
        while (raw := connection.lpop(queue)) is not None:
            envelope = json.loads(raw)
            _, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
            found.append((envelope["headers"], kwargs["message"]))
        return found
    finally:
        connection.close()


@pytest.mark.parametrize("farm", ["redis"], indirect=True)
def test_an_older_apis_brick_group_still_queued_is_measured_as_one_group(farm: Farm, tmp_path: Path) -> None:
    # Given three bricks submitted as one group on a capability no worker serves yet
    farm.start_api()
    capability = farm.capability("g")
    refs = [
        farm.client.upload_model(mlp(tmp_path / f"g{n}.onnx", [8 * n, 8], seed=n))["ref"] for n in (1, 2, 3)
    ]
    answer = farm.client.submit_batch(
        {
            "models": refs,
            "frameworks": ["onnxruntime"],
            "targets": [capability],
            "bricks": True,
            "measure": MEASURE,
        }
    )
    ids = [item["id"] for item in answer["evaluations"]]
    (queue,) = {item["queue"] for item in answer["evaluations"]}
    # Then the api queued one brick group's message, its task id the first brick's evaluation
    [(headers, message)] = _take_queued(queue)
    assert headers["task"] == EVALUATE_TASK and headers["id"] == ids[0]
    assert message["kind"] == "bricks" and [m["evaluation_id"] for m in message["members"]] == ids
    assert "companions" not in message and "evaluation_id" not in message

    # When the same group is queued in an older api's form instead, and a worker takes it
    first, *others = message["members"]
    older = {
        **EvaluationMessage(ids[0], parse_request(first["request"]), queue).to_dict(),
        "companions": others,
    }
    app = make_celery(Settings(broker_url=REDIS_URL, store_url=f"sqlite:///{tmp_path / 'unused.db'}"))
    app.send_task(EVALUATE_TASK, kwargs={"message": older}, queue=queue, routing_key=queue, task_id=ids[0])
    farm.start_worker("agent-g", capability)
    ended = farm.client.wait(ids, timeout_s=120)

    # Then every brick is measured, each an evaluation of its own, in one predictor job
    assert [e["status"] for e in ended] == ["succeeded"] * 3, [e["error"] for e in ended]
    assert len({json.dumps(e["measurements"][0]["environment"], sort_keys=True) for e in ended}) == 1
    assert all(e["request"]["options"]["brick"] is True for e in ended)
    assert "a brick group" in farm.log("agent-g")
