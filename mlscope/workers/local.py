"""Evaluations on this machine, one after another, into the store: the core `mlscope run` and the
Python API (`mlscope.evaluate`) share.

    model + frameworks + request document ─ admit each (all of them before the first runs)
        ─▶ open the store ─▶ pipeline.evaluate each ─▶ the stored results, in the frameworks' order
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mlscope.contract.errors import UserError
from mlscope.contract.events import EvaluationEvent
from mlscope.contract.options import FRAMEWORK_OPTIONS
from mlscope.contract.result import EvaluationResult
from mlscope.contract.settings import Settings
from mlscope.registry.models import ModelRegistry
from mlscope.registry.resolvers.forms import absolute_reference
from mlscope.runtime.frameworks import get_framework
from mlscope.runtime.scenarios import SCENARIOS
from mlscope.store import open_store
from mlscope.workers.admission import Admission, admit, default_frameworks
from mlscope.workers.leases import Lease, run_owner
from mlscope.workers.pipeline import evaluate, job_for
from mlscope.workers.runners import prestart
from mlscope.workers.runners.process import ProcessRunner
from mlscope.workers.sweeper import Sweeper

if TYPE_CHECKING:
    from mlscope.runtime.measure.scenario_base import Scenario

__all__ = ["Watch", "admit_all", "default_frameworks", "evaluate_here"]

# Told of every event of every evaluation, with the admission it belongs to: {"event": "start"} before
# it runs, then the pipeline's and the predictor's events ("created", "phase", "progress",
# "measurement"), then {"event": "end", "id", "status"}.
Watch = Callable[[Admission, EvaluationEvent], None]


def admit_all(
    model: str,
    frameworks: Sequence[str] | None,
    document: Mapping[str, Any],
    *,
    settings: Settings,
    registry: ModelRegistry | None = None,
) -> list[Admission]:
    """Admit `model` on each framework (None: `default_frameworks`) with the request fields of
    `document`, to run here, once per value of an option given several (`_variants`). A relative
    path to a model is admitted (and so recorded) absolute.

    Raises:
        UserError: the first request that would not be admitted, naming its field.
    """
    registry = registry or ModelRegistry.load(settings.manifests, cache_dir=settings.cache_dir)
    # Recorded as a path from anywhere: a rerun from another directory reads the same file.
    model = absolute_reference(model)
    if frameworks is None:
        names = default_frameworks(registry, model)
        for scenario in _scenarios(document):
            serving = [name for name in names if scenario.runs_on(get_framework(name))]
            if not serving:
                raise UserError(
                    f"none of {model!r}'s installed frameworks ({', '.join(names)}) runs the "
                    f"{scenario.NAME} scenario: it needs {scenario.NEEDS or 'another framework'}",
                    field="framework",
                )
            names = serving
    else:
        names = list(frameworks)
    if not names:
        raise UserError(
            "no framework named: name one or more, or none for every installed one", field="framework"
        )
    return [
        admit({**variant, "model": model, "framework": name}, registry, here=settings)
        for name in names
        for variant in _variants(document)
    ]


def _variants(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The request once per value of each framework option given several (`compile=none,default`:
    the model eager, then compiled; two such options: every pair), so that one command measures
    them all; else the request as it is."""
    variants = [document]
    for name in sorted(FRAMEWORK_OPTIONS):
        options = document.get("options") or {}
        value = options.get(name)
        if isinstance(value, str) and "," in value:
            value = [item.strip() for item in value.split(",") if item.strip()]
        if isinstance(value, list) and value:
            variants = [
                {**variant, "options": {**(variant.get("options") or {}), name: each}}
                for variant in variants
                for each in value
            ]
    return variants


def _start_predictors(admitted: Sequence[Admission], settings: Settings) -> str | None:
    """Start the predictor processes of the evaluations the process runner runs (runners/prestart.py):
    the first one's now, given its job at once when it is untraced, so its framework's import and its
    model's load overlap the store's opening (its measurement waits for its runner); the others'
    planned, each started when the one before it ends. Returns the id the first evaluation must be
    stored under when its job was given ahead (its runner claims the process by that id), else None.
    None of it where `prestart.enabled` says no (a single core)."""
    if not prestart.enabled():
        return None
    runner = ProcessRunner.from_settings(settings)
    ran = [item for item in admitted if item.request.runner == ProcessRunner.NAME]
    keys = [runner.key(item.request.framework, item.request.options) for item in ran]
    prestart.plan(keys[1:])
    if not ran or ran[0] is not admitted[0]:
        return None  # another runner's evaluation comes first: nothing may import while it measures
    if ran[0].request.trace_level != "NO_TRACE":
        # Its job needs the trace context the pipeline opens; its process imports meanwhile.
        prestart.start(keys[0])
        return None
    evaluation_id = uuid.uuid4().hex
    job = job_for(ran[0], evaluation_id, settings)
    prestart.dispatch(keys[0], evaluation_id, json.dumps(job.to_dict()))
    return evaluation_id


def _scenarios(document: Mapping[str, Any]) -> list[Scenario]:
    """The request's scenarios that a known scenario owns (admission names the unknown ones)."""
    names = document.get("scenarios") or ()
    return [SCENARIOS[name]() for name in names if isinstance(name, str) and name in SCENARIOS]


def evaluate_here(
    model: str,
    frameworks: Sequence[str] | None,
    document: Mapping[str, Any],
    *,
    settings: Settings,
    watch: Watch | None = None,
    admitted: list[Admission] | None = None,
) -> list[EvaluationResult]:
    """Evaluate `model` on each framework on this machine, one after another, into the settings' store.

    Every request is admitted before the first runs: a typo in the third framework must not cost the
    user the first two runs' time, and leaves the store untouched (not even created).

    Args:
        frameworks: the frameworks' names; None: every installed one with a manifest for the model.
        document: the request's other fields (batch_sizes, scenarios, device, runner, measure, ...).
        watch: told of each evaluation's events (see `Watch`), e.g. to draw progress bars.
        admitted: the requests as `admit_all` already admitted them (a caller that checked them
            first); None: admitted here.

    Returns:
        The stored results (docs/design.md's result shape), one per framework; a failed evaluation is
        among them with its error.

    Raises:
        UserError: a request that would not be admitted; nothing was stored.
        KeyboardInterrupt: the running evaluation was cancelled (and stored as cancelled).
    """
    if admitted is None:
        admitted = admit_all(model, frameworks, document, settings=settings)
    results: list[EvaluationResult] = []
    first_id = _start_predictors(admitted, settings)
    try:
        with open_store(settings.store_url) as store:
            # An earlier `mlscope run` killed mid-evaluation (SIGKILL, a power cut) left it running: its
            # lease has lapsed, and it is marked failed ("interrupted") before this run adds its own.
            Sweeper(store).sweep()
            lease = Lease(run_owner())
            for index, item in enumerate(admitted):

                def emit(event: EvaluationEvent, item: Admission = item) -> None:
                    if watch is not None:
                        watch(item, event)

                emit({"event": "start"})
                given = first_id if index == 0 else None
                result = evaluate(
                    item, store=store, settings=settings, emit=emit, lease=lease, evaluation_id=given
                )
                emit({"event": "end", "id": result["id"], "status": result["status"]})
                results.append(result)
    finally:
        prestart.discard()
    return results
