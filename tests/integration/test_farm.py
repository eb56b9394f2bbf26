"""The farm end to end: `mlscope api` and real `mlscope worker` processes on the real brokers
(Redis and RabbitMQ, by the `farm` fixture's parameter) and the real PostgreSQL store.

Workers started with different capability overrides act as different systems on this one machine.
"""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest

from mlscope.client import ApiError
from tests.integration.farm import TOKEN, Farm, wait_until
from tests.integration.test_run_cli import ran_valid

MODEL = "test_tiny_mlp"
# Enough measuring to be a real evaluation, short enough for a test; the machine's other load and any
# spread allowed, so the tiny model's points are valid (these tests check the farm, not the machine).
QUICK = {
    "warmup_count": 2,
    "warmup_seconds": 0.0,
    "min_count": 10,
    "min_seconds": 0.2,
    "max_seconds": 5,
    "contention_limit": 1.0,
    "stability": 0.99,
}


def _request(target: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "framework": "pytorch", "target": target, "measure": QUICK, **extra}


def _running_on(farm: Farm, agent_id: str, evaluation_id: str) -> bool:
    info = farm.registry.get(agent_id)
    return bool(info and info.current_job == evaluation_id and farm.status(evaluation_id) == "running")


def _ended(farm: Farm, ids: list[str], timeout_s: float = 180) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = farm.client.wait(ids, timeout_s=timeout_s)
    return results


def test_a_batch_comparison_fans_out_to_two_systems(farm: Farm) -> None:
    farm.start_api()
    a, b = farm.capability("a"), farm.capability("b")
    farm.start_worker("agent-a", a)
    farm.start_worker("agent-b", b)

    answer = farm.client.submit_batch(
        {
            "models": [MODEL],
            "frameworks": ["pytorch", "onnxruntime"],
            "targets": ["cpu.x86_64"],
            "batch_sizes": [1, 4],
            "fan_out": True,
            "measure": QUICK,
        }
    )

    jobs = answer["evaluations"]
    assert sorted((j["framework"], j["target"]) for j in jobs) == sorted(
        (f, f"agent:{agent}") for f in ("pytorch", "onnxruntime") for agent in ("agent-a", "agent-b")
    )
    assert all(not j["warnings"] for j in jobs)
    results = _ended(farm, [j["id"] for j in jobs])
    assert [r["status"] for r in results] == ["succeeded"] * 4, [r["error"] for r in results]
    ran_on = {(r["framework"]["name"], r["system"]["agent"]["id"]) for r in results}
    assert ran_on == {(f, agent) for f in ("pytorch", "onnxruntime") for agent in ("agent-a", "agent-b")}

    table = farm.client.compare(ids=[j["id"] for j in jobs])
    rows = table["rows"]
    # model × framework × system × batch size: 1 × 2 × 2 × 2.
    assert len(rows) == 8
    assert {r["agent_id"] for r in rows} == {"agent-a", "agent-b"}
    assert len({r["system_id"] for r in rows}) == 2
    assert {(r["framework"], r["batch_size"]) for r in rows} == {
        (f, n) for f in ("pytorch", "onnxruntime") for n in (1, 4)
    }
    assert all(r["median_ms"] > 0 and r["throughput"] > 0 for r in rows)
    csv_text = farm.client.compare_csv(ids=[j["id"] for j in jobs])
    assert csv_text.splitlines()[0].split(",") == table["columns"]
    assert len(csv_text.strip().splitlines()) == 1 + len(rows)


def test_a_job_of_a_worker_killed_mid_run_completes_elsewhere_once(farm: Farm) -> None:
    farm.start_api()
    capability = farm.capability("k")
    farm.start_worker("doomed", capability)
    slow = {**QUICK, "min_seconds": 6.0, "max_seconds": 20}
    answer = farm.client.submit(_request(capability, batch_sizes=[1, 2], measure=slow))
    evaluation_id = answer["id"]

    wait_until(lambda: _running_on(farm, "doomed", evaluation_id), 90, "the job to run on the doomed worker")
    doomed = psutil.Process(farm.processes["doomed"].pid)
    predictors = doomed.children(recursive=True)
    assert predictors, "the process runner should have started a predictor process"
    farm.signal("doomed", signal.SIGKILL)
    farm.wait_exit("doomed")
    # The predictor dies with its worker instead of running on as an orphan.
    _, alive = psutil.wait_procs(predictors, timeout=10)
    assert not alive, f"orphaned predictor processes: {alive}"
    assert farm.status(evaluation_id) == "running"

    farm.start_worker("rescuer", capability)
    (result,) = _ended(farm, [evaluation_id])

    assert result["status"] == "succeeded", result["error"]
    assert result["system"]["agent"]["id"] == "rescuer"
    assert sorted(m["batch_size"] for m in result["measurements"]) == [1, 2]  # one set, not two
    listed = farm.client.evaluations(model=MODEL, limit=1000)["items"]
    assert [e["id"] for e in listed].count(evaluation_id) == 1
    assert "(redelivered)" in farm.log("rescuer")


def test_a_job_no_worker_serves_waits_queued_until_one_starts(farm: Farm) -> None:
    farm.start_api()
    capability = farm.capability("late")
    farm.start_worker("bystander", farm.capability("other"))

    answer = farm.client.submit(_request(capability))

    assert any("no live worker" in w for w in answer["warnings"]), answer
    queue = answer["queue"]
    assert queue == f"pytorch@{capability}"
    time.sleep(2)  # the bystander serves other queues: nothing may take the job meanwhile
    assert farm.status(answer["id"]) == "queued"
    depths = {q["queue"]: q["depth"] for q in farm.client.queues()}
    assert depths.get(queue) == 1

    farm.start_worker("latecomer", capability)
    (result,) = _ended(farm, [answer["id"]])
    assert result["status"] == "succeeded", result["error"]
    assert result["system"]["agent"]["id"] == "latecomer"
    assert {q["queue"]: q["depth"] for q in farm.client.queues()}.get(queue) == 0


def test_sigterm_lets_the_running_job_finish_then_stops(farm: Farm) -> None:
    farm.start_api()
    capability = farm.capability("t")
    farm.start_worker("graceful", capability)
    answer = farm.client.submit(_request(capability, measure={**QUICK, "min_seconds": 3.0}))
    wait_until(lambda: _running_on(farm, "graceful", answer["id"]), 90, "the job to run")

    farm.signal("graceful", signal.SIGTERM)

    assert farm.wait_exit("graceful", timeout_s=120) == 0, farm.log("graceful")
    result = farm.client.evaluation(answer["id"])
    assert result["status"] == "succeeded", result["error"]
    assert farm.registry.get("graceful") is None  # it said goodbye to the registry


def test_cancelling_a_running_job_ends_it_and_the_worker_goes_on(farm: Farm) -> None:
    farm.start_api()
    capability = farm.capability("c")
    farm.start_worker("steady", capability)
    long = farm.client.submit(_request(capability, measure={**QUICK, "min_seconds": 120, "max_seconds": 120}))
    wait_until(lambda: _running_on(farm, "steady", long["id"]), 90, "the long job to run")

    answer = farm.client.cancel(long["id"])

    assert answer["cancelled"] is True
    wait_until(lambda: (farm.registry.get("steady") or long).current_job is None, 30, "the worker to drop it")
    assert farm.status(long["id"]) == "cancelled"
    short = farm.client.submit(_request(capability))
    (result,) = _ended(farm, [short["id"]])
    assert result["status"] == "succeeded", result["error"]


def test_bad_requests_over_http_get_4xx_naming_the_field(farm: Farm) -> None:
    farm.start_api()
    stored_before = farm.client.evaluations(limit=1)["total"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"framework": "pytorch"}, "model"),
        ({"model": MODEL, "framework": "pytorch", "batch_sizes": [0]}, "batch_sizes.0"),
        ({"model": MODEL, "framework": "pytorch", "batch_sizes": "8"}, "batch_sizes"),
        ({"model": "no_such_model", "framework": "pytorch"}, "model"),
        ({"model": MODEL, "framework": "tensorflowish"}, "framework"),
        ({"model": MODEL, "framework": "pytorch", "target": "CPU!!"}, "target"),
    ]
    for body, field in cases:
        with pytest.raises(ApiError) as caught:
            farm.client.submit(body)
        assert 400 <= caught.value.status < 500, (body, caught.value)
        assert field in caught.value.errors, (body, caught.value.errors)
    assert farm.client.evaluations(limit=1)["total"] == stored_before  # nothing was stored

    from mlscope.client import Client

    anonymous = Client(farm.api_url, "")  # "" is no token; None would mean the default one
    with pytest.raises(ApiError) as caught:
        anonymous.submit(_request("cpu"))
    assert caught.value.status == 401


def _mlscope(farm: Farm, *args: str, progress: str = "auto") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlscope", *args],
        env={**farm.env, "MLSCOPE_API_TOKEN": TOKEN, "MLSCOPE_PROGRESS": progress},
        cwd=farm.tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_cli_lists_agents_submits_and_compares(farm: Farm) -> None:
    farm.start_api()
    farm.start_worker("cli-a", farm.capability("a"))
    farm.start_worker("cli-b", farm.capability("b"))
    quick = [item for key, value in QUICK.items() for item in ("--measure", f"{key}={value}")]

    agents = _mlscope(farm, "agents", "--json")
    assert agents.returncode == 0, agents.stderr
    listed = [json.loads(line) for line in agents.stdout.splitlines()]
    assert sorted(agent["id"] for agent in listed) == ["cli-a", "cli-b"]
    # What each agent publishes: its hardware and software stack, runners and queues.
    assert all(agent["system"]["python"] and agent["system"]["memory_bytes"] > 0 for agent in listed)
    assert all("pytorch" in agent["frameworks"] and "process" in agent["runners"] for agent in listed)

    submitted = _mlscope(
        farm, "submit", MODEL, "-f", "pytorch", "--on", "agent:cli-b", "--wait", "--json", *quick,
        progress="always",
    )  # fmt: skip
    [result] = ran_valid(submitted)
    # --json: no progress on stderr even when it is forced
    assert "evaluations" not in submitted.stderr and "\x1b[" not in submitted.stderr, submitted.stderr
    assert result["status"] == "succeeded" and result["system"]["agent"]["id"] == "cli-b"
    # Without --json, a line under the table says which agent ran it, and when
    shown = _mlscope(farm, "submit", MODEL, "-f", "pytorch", "--on", "agent:cli-b", "--wait", *quick)
    assert shown.returncode == 0, shown.stderr
    assert re.search(
        r"^ran on agent cli-b \(host .+\), \d{4}-\d\d-\d\d [\d:]{8} → [\d: -]+ UTC$", shown.stdout, re.M
    )

    # A rerun of it on the other system, through the API: the very request, there, and the diff.
    rerun = _mlscope(farm, "rerun", result["id"], "--on", "agent:cli-a", "--json")
    assert rerun.returncode == 0, rerun.stderr
    answer = json.loads(rerun.stdout)
    assert answer["recorded"] == result["id"] and answer["rerun"] != result["id"]
    again = farm.client.evaluation(answer["rerun"])
    assert again["system"]["agent"]["id"] == "cli-a"
    assert {k: v for k, v in again["request"].items() if k != "target"} == {
        k: v for k, v in result["request"].items() if k != "target"
    }
    assert again["request"]["target"] == "agent:cli-a"
    assert answer["diff"] is not None and "points" in answer["diff"]

    compared = _mlscope(
        farm, "compare", "--models", MODEL, "--frameworks", "pytorch", "--on", "cpu.x86_64",
        "--batch-sizes", "1,2", "--output", "cmp", *quick, progress="always",
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    # Progress, forced into this pipe: what ran (model/framework, batch sizes, agent), then 2/2
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", compared.stderr)
    assert re.search(r"test_tiny_mlp/pytorch batch 1,2 on agent:cli-[ab]", shown), shown
    assert re.search(r"evaluations\s.*2/2 .*\d:\d\d:\d\d", shown), shown
    assert "cli-a" in compared.stdout and "cli-b" in compared.stdout  # the table names both systems
    with open(farm.tmp / "cmp.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted((r["agent_id"], r["batch_size"]) for r in rows) == [
        ("cli-a", "1"), ("cli-a", "2"), ("cli-b", "1"), ("cli-b", "2")
    ]  # fmt: skip
    saved = json.loads((farm.tmp / "cmp.json").read_text())
    assert len(saved["evaluations"]) == 2 and len(saved["rows"]) == 4


def test_cli_mistakes_exit_2_with_a_message(farm: Farm) -> None:
    farm.start_api()
    unknown = _mlscope(farm, "submit", "no_such_model", "-f", "pytorch")
    assert unknown.returncode == 2
    assert "model" in unknown.stderr and "Traceback" not in unknown.stderr
    bad_target = _mlscope(farm, "compare", "--models", MODEL, "--frameworks", "pytorch", "--on", "CPU!")
    assert bad_target.returncode == 2 and "targets" in bad_target.stderr
    farm.processes["api"].terminate()
    farm.wait_exit("api")
    down = _mlscope(farm, "agents")
    assert down.returncode == 2 and "cannot reach the mlscope API" in down.stderr
