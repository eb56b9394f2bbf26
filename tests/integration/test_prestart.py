"""Predictor processes started ahead of their jobs (mlscope/workers/runners/prestart.py), run for real:
a job runs in the process started for it, which imported its framework before the job came; a
process started for another framework or thread count is left alone; one whose job never comes
exits by itself, and every one left over is ended with the command."""

from __future__ import annotations

import dataclasses
import json
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from mlscope.contract.job import Job
from mlscope.contract.settings import load_settings
from mlscope.registry.models import ModelRegistry
from mlscope.runtime import execute
from mlscope.workers.local import evaluate_here
from mlscope.workers.runners import prestart
from mlscope.workers.runners.process import ProcessRunner
from tests.conftest import RUNTIME_MANIFESTS

pytestmark = pytest.mark.slow

FAST = {"min_seconds": 0.1, "min_count": 5, "max_seconds": 5, "warmup_seconds": 0.02}


@pytest.fixture(autouse=True)
def _none_left() -> Iterator[None]:
    """Each test starts and ends with no process waiting."""
    prestart.discard()
    yield
    prestart.discard()


def _job(tmp_path: Path, framework: str = "onnxruntime", **options: Any) -> Job:
    manifest = ModelRegistry.load([RUNTIME_MANIFESTS]).get("test_tiny_mlp", framework)
    return Job(
        evaluation_id="prestarted",
        manifest=manifest.to_dict(),
        origin=manifest.origin,
        framework=framework,
        device="cpu",
        batch_sizes=(1,),
        scenarios=("single_stream",),
        measure=FAST,
        options=options,
        cache_dir=str(tmp_path / "cache"),
        trace_level="APPLICATION",
    )


def _ran_in(outcome: Any) -> tuple[int, dict[str, Any]]:
    """The pid of the predictor process that ran a job, and its import span's attributes."""
    assert outcome.result is not None, outcome.error
    spans = outcome.result["trace"]["spans"]
    root = next(span for span in spans if span["name"] == "evaluation")
    imported = next(span for span in spans if span["name"] == "import")
    return root["attributes"]["pid"], imported["attributes"]


def test_a_job_runs_in_the_process_started_for_it_which_imported_its_framework_first(tmp_path: Path) -> None:
    runner = ProcessRunner()
    # Given a process started for ONNX Runtime jobs before any job exists
    started = prestart.start(runner.key("onnxruntime", {}))
    # When an ONNX Runtime job runs
    outcome = runner.run(_job(tmp_path), lambda event: None, timeout_s=120)
    # Then it ran in that process, whose import was the prepared one, timed as a cold import
    pid, imported = _ran_in(outcome)
    assert pid == started.pid
    assert imported["prepared"] is True and imported["warm_process"] is False
    assert outcome.result is not None and outcome.result["cold_start"]["import_ms"] > 0
    # And the process is no longer waiting
    assert prestart.waiting() == {}


def test_a_process_started_for_another_framework_or_thread_count_is_left_waiting(tmp_path: Path) -> None:
    runner = ProcessRunner()
    other_framework = prestart.start(runner.key("pytorch", {}))
    other_threads = prestart.start(runner.key("onnxruntime", {"threads": 1}))
    # When an ONNX Runtime job with the framework's own thread count runs
    outcome = runner.run(_job(tmp_path), lambda event: None, timeout_s=120)
    # Then a process of its own ran it, which imported the framework as the job's first phase
    pid, imported = _ran_in(outcome)
    assert pid not in (other_framework.pid, other_threads.pid)
    assert "prepared" not in imported
    # And both others still wait, until discarded
    assert set(prestart.waiting().values()) == {other_framework.pid, other_threads.pid}
    prestart.discard()
    assert other_framework.poll() is not None and other_threads.poll() is not None


def test_a_process_started_without_a_framework_takes_a_job_of_any_and_imports_its_own(tmp_path: Path) -> None:
    runner = ProcessRunner()
    # Given a process started before the run knew its framework (`mlscope run MODEL` without -f)
    started = prestart.start(prestart.Key(sys.executable, None, None))
    # and one prepared for another thread count, which this job must not take
    other_threads = prestart.start(prestart.Key(sys.executable, None, 1))
    # When an ONNX Runtime job runs
    outcome = runner.run(_job(tmp_path), lambda event: None, timeout_s=120)
    # Then it ran in the framework-less process, which imported ONNX Runtime as the job's first phase
    pid, imported = _ran_in(outcome)
    assert pid == started.pid
    assert "prepared" not in imported and imported["warm_process"] is False
    assert prestart.waiting() == {prestart.Key(sys.executable, None, 1): other_threads.pid}


def test_a_process_prepared_for_the_framework_is_taken_before_one_without(tmp_path: Path) -> None:
    runner = ProcessRunner()
    plain = prestart.start(prestart.Key(sys.executable, None, None))
    prepared = prestart.start(runner.key("onnxruntime", {}))
    assert _ran_in(runner.run(_job(tmp_path), lambda event: None, timeout_s=120))[0] == prepared.pid
    assert prestart.waiting() == {prestart.Key(sys.executable, None, None): plain.pid}


def test_a_job_asking_for_threads_takes_the_process_started_with_them(tmp_path: Path) -> None:
    runner = ProcessRunner()
    started = prestart.start(runner.key("onnxruntime", {"threads": 1}))
    outcome = runner.run(_job(tmp_path, threads=1), lambda event: None, timeout_s=120)
    assert _ran_in(outcome)[0] == started.pid


@pytest.mark.parametrize("framework", ["onnxruntime", "no-such-framework", None])
def test_a_process_whose_job_never_comes_exits_by_itself(framework: str | None) -> None:
    # Given a process started ahead (for a framework that may not even exist, or for none yet)
    child = prestart.spawn(sys.executable, framework, None)
    assert child.stdin is not None
    # When its parent closes its stdin without a job
    child.stdin.close()
    # Then it exits 0 having said nothing
    assert child.wait(timeout=60) == 0
    assert child.stdout is not None and child.stdout.read() == ""


def test_a_process_whose_parent_died_while_it_started_ends_itself() -> None:
    # Given a process whose stated parent (runtime.execute.PARENT_ENV, as prestart sets it) is a
    # process that has already ended: its parent died while it imported its modules, before it
    # could ask to die with it; this test keeps its stdin open, as an inherited pipe would
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    environ = {**prestart.child_environment(None), execute.PARENT_ENV: str(gone.pid)}
    child = subprocess.Popen(
        [sys.executable, "-m", "mlscope.runtime.execute", "--prepare", "onnxruntime"],
        env=environ,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Then it exits 1 at once rather than import its framework and wait for a job forever
        assert child.wait(timeout=60) == 1
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()


def test_prestart_names_the_parent_where_the_predictor_process_reads_it() -> None:
    assert prestart.PARENT_ENV == execute.PARENT_ENV
    assert prestart.child_environment(None)[prestart.PARENT_ENV] == str(os.getpid())


def test_a_job_of_a_framework_its_process_could_not_import_fails_as_it_would_have(tmp_path: Path) -> None:
    # Given a process prepared for a framework that does not exist, and a job naming it
    job = dataclasses.replace(_job(tmp_path), framework="no-such-framework")
    child = prestart.spawn(sys.executable, "no-such-framework", None)
    out, _ = child.communicate(json.dumps(job.to_dict()), timeout=60)
    # Then the job fails in its import phase, naming the framework
    final = [line for line in out.splitlines() if '"error"' in line][-1]
    assert '"phase":"import"' in final and "no-such-framework" in final
    assert child.returncode == 1


def test_the_planned_next_process_starts_when_a_run_ends(tmp_path: Path) -> None:
    runner = ProcessRunner()
    following = runner.key("pytorch", {})
    prestart.plan([following])
    assert following not in prestart.waiting()
    runner.run(_job(tmp_path), lambda event: None, timeout_s=120)
    assert following in prestart.waiting()


def test_a_run_here_leaves_no_process_waiting(mlscope_env: dict[str, str]) -> None:
    # Given two evaluations in one call: the second's process is started when the first ends
    document = {"batch_sizes": [1], "scenarios": ["single_stream"], "runner": "process", "measure": FAST}
    results = evaluate_here("test_tiny_mlp", ["onnxruntime", "pytorch"], document, settings=load_settings())
    assert [r["status"] for r in results] == ["succeeded", "succeeded"], [r.get("error") for r in results]
    # Then nothing is left waiting after it
    assert prestart.waiting() == {}
    # (this process's own: another test worker's runs start theirs)
    leftover = [
        child.cmdline()
        for child in psutil.Process().children(recursive=True)
        if "--prepare" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE
    ]
    assert leftover == []


def test_a_job_given_ahead_runs_there_and_measures_only_once_its_runner_says_go(tmp_path: Path) -> None:
    runner = ProcessRunner()
    job = _job(tmp_path)
    # Given a job given to its process before its runner runs it
    child = prestart.dispatch(runner.key("onnxruntime", {}), job.evaluation_id, json.dumps(job.to_dict()))
    assert child.stdout is not None
    # Then the process loads the model and runs its first inference, and goes no further
    phases = []
    while "first_inference" not in phases:
        phases.append(json.loads(child.stdout.readline())["phase"])
    assert phases == ["import", "fetch", "load", "first_inference"]
    ready, _, _ = select.select([child.stdout], [], [], 1.0)
    assert ready == [], "it went on before its runner said go"
    # When the runner runs the job, it claims that process, which measures and reports
    outcome = runner.run(job, lambda event: None, timeout_s=120)
    assert _ran_in(outcome)[0] == child.pid
    assert outcome.result is not None and outcome.result["measurements"][0]["latency_ms"]["count"] >= 5


def test_a_process_given_another_job_under_the_same_id_is_ended_not_run(tmp_path: Path) -> None:
    runner = ProcessRunner()
    job = _job(tmp_path)
    other = dataclasses.replace(job, batch_sizes=(2,))
    given = prestart.dispatch(runner.key("onnxruntime", {}), job.evaluation_id, json.dumps(other.to_dict()))
    outcome = runner.run(job, lambda event: None, timeout_s=120)
    assert _ran_in(outcome)[0] != given.pid
    assert given.poll() is not None
    assert outcome.result is not None and outcome.result["measurements"][0]["batch_size"] == 1
