"""The result and event types (contract/result.py, contract/events.py) against what a real run
makes: a tiny PyTorch model evaluated here, inline, into a SQLite store, and a predictor process run
as the docker runner runs it (its final event written to a file). Every dict the run produces has
the keys its type requires and none it does not declare, so the types cannot drift from the code
without this failing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from mlscope.contract import events, result
from mlscope.contract.job import Job
from mlscope.contract.settings import load_settings
from mlscope.registry.models import ModelRegistry
from mlscope.workers.admission import Admission
from mlscope.workers.local import evaluate_here
from mlscope.workers.runners import InlineRunner
from tests.conftest import REPO, RUNTIME_MANIFESTS
from tests.fixtures.typed_keys import declared_keys, required_keys, tag

pytestmark = pytest.mark.slow

FAST = {"min_seconds": 0.2, "min_count": 5, "max_seconds": 5, "warmup_seconds": 0.05}
EVENT_TYPES = {
    tag(kind): kind
    for kind in (*typing.get_args(events.EvaluationEvent), *typing.get_args(events.FinalEvent))
}


def _conforms(value: dict[str, Any], kind: Any, where: str) -> None:
    """`value` holds every key `kind` requires and only keys it declares."""
    declared, required, keys = declared_keys(kind), required_keys(kind), set(value)
    assert required <= keys, f"{where}: missing {required - keys}"
    assert keys <= declared, f"{where}: undeclared {keys - declared}"
    # Exactly the required keys once the optional ones it has are set aside
    assert keys - (declared - required) == required, where


def _measurement_conforms(measurement: dict[str, Any], where: str) -> None:
    _conforms(measurement, result.ResultMeasurement, where)
    _conforms(measurement["latency_ms"], result.LatencyMs, f"{where}.latency_ms")
    _conforms(measurement["validity"], result.ValidityVerdict, f"{where}.validity")


def _job(name: str, tmp_path: Path) -> Job:
    manifest = ModelRegistry.load([RUNTIME_MANIFESTS]).get(name, "pytorch")
    return Job(
        evaluation_id="types",
        manifest=manifest.to_dict(),
        origin=manifest.origin,
        framework="pytorch",
        device="cpu",
        batch_sizes=(1,),
        scenarios=("single_stream",),
        measure=FAST,
        cache_dir=str(tmp_path / "cache"),
    )


def test_a_stored_result_and_its_events_have_the_keys_their_types_declare(
    mlscope_env: dict[str, str],
) -> None:
    # Given a tiny model evaluated here, inline, with every event it told of kept
    told: list[dict[str, Any]] = []

    def watch(admitted: Admission, event: Any) -> None:
        told.append(dict(event))

    document = {"batch_sizes": [1], "scenarios": ["single_stream"], "runner": "inline", "measure": FAST}
    (stored,) = evaluate_here("test_tiny_mlp", ["pytorch"], document, settings=load_settings(), watch=watch)
    # Then the stored result has exactly the keys EvaluationResult requires, plus declared sections
    assert stored["status"] == "succeeded", stored["error"]
    _conforms(dict(stored), result.EvaluationResult, "result")
    _conforms(dict(stored["model"]), result.ModelInfo, "result.model")
    assert required_keys(result.FrameworkInfo) <= set(stored["framework"])
    assert set(stored["cold_start"] or {}) <= declared_keys(result.ColdStart)
    if "memory" in stored:
        _conforms(dict(stored["memory"]), result.Memory, "result.memory")
    (measurement,) = stored["measurements"]
    _measurement_conforms(dict(measurement), "result.measurements[0]")
    # And each event has the type its tag names, with that type's keys
    kinds = [event["event"] for event in told]
    assert kinds[0] == "start" and kinds[1] == "created" and kinds[-1] == "end"
    assert {"phase", "progress", "measurement"} <= set(kinds)
    for index, event in enumerate(told):
        _conforms(event, EVENT_TYPES[event["event"]], f"event {index} ({event['event']})")


def test_a_predictor_result_has_the_keys_its_type_declares(tmp_path: Path) -> None:
    # Given the tiny model's job run by the inline runner
    outcome = InlineRunner().run(_job("test_tiny_mlp", tmp_path), lambda event: None, timeout_s=120)
    # Then its result is a PredictorResult: measurements with their raw latencies and run facts
    assert outcome.result is not None, outcome.error
    predicted = dict(outcome.result)
    _conforms(predicted, result.PredictorResult, "predictor result")
    _conforms(dict(predicted["trace"]), result.Trace, "predictor result.trace")
    assert set(predicted["cold_start"]) <= declared_keys(result.ColdStart)
    (measurement,) = predicted["measurements"]
    _measurement_conforms(dict(measurement), "predictor result.measurements[0]")
    assert {"latencies_ns", "duration_s", "stop_reason", "warmup_count", "environment", "settings"} <= set(
        measurement
    )


@pytest.mark.parametrize("model", ["test_tiny_mlp", "test_broken_factory"])
def test_a_predictor_process_ends_with_a_typed_final_event(tmp_path: Path, model: str) -> None:
    # Given a job run in a predictor process of its own, its final event written to a file
    job_file, final_file = tmp_path / "job.json", tmp_path / "final.json"
    job_file.write_text(json.dumps(_job(model, tmp_path).to_dict()))
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlscope.runtime.execute",
            "--job",
            str(job_file),
            "--result",
            str(final_file),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    final = json.loads(final_file.read_text())
    # Then it is a result, or for a model that cannot be built an error, each with its type's keys
    _conforms(final, EVENT_TYPES[final["event"]], f"final event of {model}")
    if model == "test_broken_factory":
        assert final["event"] == "error" and ran.returncode == 1
    else:
        assert final["event"] == "result" and ran.returncode == 0
        _conforms(final["result"], result.PredictorResult, "final result")
    # And each progress event on stdout has the type its tag names
    lines = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
    assert lines and lines[0] == {"event": "phase", "phase": "import"}
    for event in lines:
        _conforms(event, EVENT_TYPES[event["event"]], f"event of {model}")
