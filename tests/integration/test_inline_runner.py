"""The inline runner's time limit: it can only act between the job's events, and does."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlscope.contract.job import PHASES, Job
from mlscope.registry.models import ModelRegistry
from mlscope.workers.runners import InlineRunner
from tests.conftest import RUNTIME_MANIFESTS

pytestmark = pytest.mark.slow


def test_an_inline_job_past_its_time_limit_ends_as_a_timeout(tmp_path: Path) -> None:
    # Given a job that measures for at least 5 s
    manifest = ModelRegistry.load([RUNTIME_MANIFESTS]).get("test_tiny_mlp", "pytorch")
    job = Job(
        evaluation_id="t",
        manifest=manifest.to_dict(),
        origin=manifest.origin,
        framework="pytorch",
        device="cpu",
        batch_sizes=(1, 2),
        scenarios=("single_stream",),
        measure={"min_seconds": 5, "max_seconds": 10},
        cache_dir=str(tmp_path),
    )
    events: list[dict] = []
    # When it runs inline with a 1-second limit
    outcome = InlineRunner().run(job, events.append, timeout_s=1.0)
    # Then it ends as a timeout at the first event past the limit (which phase that is depends on
    # how long the import took), well before the second batch size
    assert outcome.error is not None and outcome.error["type"] == "Timeout"
    assert outcome.error["phase"] in PHASES
    assert outcome.result is None
    assert not any(e.get("batch_size") == 2 for e in events)
