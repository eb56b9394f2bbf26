"""Bricks on the farm: `mlscope bricks --on` against `mlscope api` and real `mlscope worker` processes
on the real Redis and PostgreSQL. Two workers with different capabilities are two systems: each
measures the bricks it has not stored yet, all of a model's in one predictor job, each brick still an
evaluation of its own, and reuses them for the next model that shares them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnxruntime  # noqa: F401 - the project installs it: a missing install fails here, never skips
import pytest

from mlscope.client import ApiError
from tests.fixtures.brick_graphs import mlp
from tests.integration.farm import TOKEN, Farm

pytestmark = pytest.mark.slow

# The whole model's measurement: short (a loaded CI machine), a real evaluation all the same.
WHOLE = ("--min-seconds", "0.3", "--max-seconds", "3", "--min-count", "50")


def _bricks(farm: Farm, tmp: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    env = {**farm.env, "MLSCOPE_API_TOKEN": TOKEN, "MLSCOPE_STORE_URL": f"sqlite:///{tmp / 'cli.db'}"}
    done = subprocess.run(
        [sys.executable, "-m", "mlscope", "bricks", *args, "--threads", "1", *WHOLE, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, lines, done.stderr


@pytest.mark.parametrize("farm", ["redis"], indirect=True)
def test_bricks_are_measured_per_system_in_one_job_and_reused(farm: Farm, tmp_path: Path) -> None:
    # Given a farm of two systems (workers with different capabilities), and two MLPs whose first two
    # layers are alike
    farm.start_api()
    a, b = farm.capability("a"), farm.capability("b")
    farm.start_worker("agent-a", a)
    farm.start_worker("agent-b", b)
    first = mlp(tmp_path / "first.onnx", [256, 256, 256, 64], seed=1)
    second = mlp(tmp_path / "second.onnx", [256, 256, 256, 32], seed=2)

    # When both are estimated from bricks on both systems
    code, lines, stderr = _bricks(farm, tmp_path, str(first), str(second), "--on", f"{a},{b}")

    # Then every model has a report per agent, with an estimate and the model measured whole there
    assert code in (0, 3), stderr  # 3: a measurement not valid on this loaded machine, said as such
    *reports, total = lines
    assert [(r["model"], r["agent"]) for r in reports] == [
        (str(first), "agent-a"),
        (str(second), "agent-a"),
        (str(first), "agent-b"),
        (str(second), "agent-b"),
    ]
    for report in reports:
        assert report["estimate_ms"] > 0 and report["measured_ms"] > 0, report
        assert report["bounds"]["critical_path_ms"] <= report["bounds"]["sequential_ms"] + 1e-9
    assert len({r["system_id"] for r in reports}) == 2  # each agent is a system of its own
    assert set(total["agents"]) == {"agent-a", "agent-b"}
    # and on each system the first model measured all its bricks, the second reused the shared ones
    for agent in ("agent-a", "agent-b"):
        one, two = (r for r in reports if r["agent"] == agent)
        assert one["bricks"]["measured_now"] == one["bricks"]["unique"] > 0
        assert two["bricks"]["reused"] >= 1
        assert two["bricks"]["measured_now"] == two["bricks"]["unique"] - two["bricks"]["reused"]

    # and each brick is an ordinary evaluation of its own on its agent, measured by the brick method
    page = farm.client.evaluations(status="succeeded", limit=200)
    bricks = [e for e in page["items"] if e["model"]["name"].startswith("brick-")]
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for evaluation in bricks:
        by_agent.setdefault(evaluation["system"]["agent"]["id"], []).append(evaluation)
        assert evaluation["request"]["options"]["brick"] is True
        assert evaluation["runner"] == "process"
        assert evaluation["measurements"][0]["scenario"] == "single_stream"
    # (each model's new bricks, with the calibrations the first time: two jobs per agent)
    for agent in ("agent-a", "agent-b"):
        measured = sum(r["bricks"]["measured_now"] for r in reports if r["agent"] == agent)
        assert len(by_agent[agent]) == measured + 2
        jobs = {json.dumps(e["measurements"][0]["environment"], sort_keys=True) for e in by_agent[agent]}
        assert len(jobs) == 2, "each model's bricks are measured in one predictor job"


@pytest.mark.parametrize("farm", ["redis"], indirect=True)
def test_what_is_not_a_brick_is_refused_naming_the_field(farm: Farm, tmp_path: Path) -> None:
    farm.start_api()
    graph = farm.client.upload_model(mlp(tmp_path / "m.onnx", [8, 8], seed=1))["ref"]
    cases = [
        ({"models": ["test_tiny_mlp"], "frameworks": ["onnxruntime"]}, "model"),
        ({"models": [graph], "frameworks": ["onnxruntime"], "scenarios": ["offline"]}, "scenarios"),
        ({"models": [graph], "frameworks": ["onnxruntime"], "batch_sizes": [1, 2]}, "batch_sizes"),
    ]
    before = farm.client.evaluations()["total"]  # the store is the session's: other tests' are in it
    for body, field in cases:
        with pytest.raises(ApiError) as refused:
            farm.client.submit_batch({**body, "bricks": True})
        assert refused.value.status == 422, body
        assert field in json.dumps(refused.value.problem.get("errors")), refused.value.problem
    # and nothing was stored
    assert farm.client.evaluations()["total"] == before


@pytest.mark.parametrize("farm", ["redis"], indirect=True)
def test_bricks_on_a_target_no_live_agent_serves_exit_2(farm: Farm, tmp_path: Path) -> None:
    farm.start_api()
    model = mlp(tmp_path / "m.onnx", [8, 8], seed=1)
    code, _, stderr = _bricks(farm, tmp_path, str(model), "--on", "gpu.nvidia")
    assert code == 2
    assert "no live agent with onnxruntime matches gpu.nvidia" in stderr
    code, _, stderr = _bricks(farm, tmp_path, str(model), "--on", "cpu", "--framework", "pytorch")
    assert code == 2
    assert "the farm measures ONNX Runtime's bricks only; pytorch's are measured on this machine" in stderr


@pytest.mark.parametrize("farm", ["redis"], indirect=True)
def test_a_brick_cancelled_before_its_job_starts_stays_cancelled(farm: Farm, tmp_path: Path) -> None:
    # Given three bricks queued as one job on a capability no worker serves yet
    farm.start_api()
    capability = farm.capability("c")
    refs = [
        farm.client.upload_model(mlp(tmp_path / f"m{n}.onnx", [16 * n, 8], seed=n))["ref"] for n in (1, 2, 3)
    ]
    answer = farm.client.submit_batch(
        {
            "models": refs,
            "frameworks": ["onnxruntime"],
            "targets": [capability],
            "bricks": True,
            "measure": {"warmup_count": 3, "min_count": 15, "min_seconds": 0.0, "max_seconds": 0.25},
        }
    )
    ids = [item["id"] for item in answer["evaluations"]]
    assert len(ids) == 3 and len({item["queue"] for item in answer["evaluations"]}) == 1
    # When the second is cancelled, then a worker takes the job
    farm.client.cancel(ids[1])
    farm.start_worker("agent-c", capability)
    ended = farm.client.wait(ids, timeout_s=120)
    # Then it stays cancelled, and the other two are measured, in one job
    assert [e["status"] for e in ended] == ["succeeded", "cancelled", "succeeded"], [
        e["error"] for e in ended
    ]
    first, _, third = ended
    assert first["measurements"][0]["environment"] == third["measurements"][0]["environment"]
    # and a brick sent alone (as the sweeper sends back one whose worker died) is measured the same way
    alone = farm.client.submit(
        {"model": refs[1], "framework": "onnxruntime", "target": capability, "options": {"brick": True}}
    )
    (result,) = farm.client.wait([alone["id"]], timeout_s=120)
    assert result["status"] == "succeeded", result["error"]
    assert result["measurements"][0]["environment"] != first["measurements"][0]["environment"]
    assert result["cold_start"]["load_ms"] > 0
