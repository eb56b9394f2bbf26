"""Output parity: the same inputs through two or more frameworks, their outputs compared.

A check attached to an evaluation (`--check-parity`):

    evaluated job (returned its first samples' outputs) ─┐
    reference job (same dataset or seed, no measuring) ──┴─▶ compare_outputs ─▶ result["parity"]

The reference runs through the same runner as the evaluation, after it, so it never shares the
machine with the measured pass. `parity_across` is `mlscope parity`: no measuring, no store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.job import Job
from mlscope.contract.settings import Settings
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.measure.parity import compare_outputs, decode_outputs, score_outputs
from mlscope.workers.admission import Admission, admit, outputs_only
from mlscope.workers.runners import get_runner
from mlscope.workers.runners.base import Outcome, Runner

__all__ = ["parity_across", "run_parity_check"]

Emit = Callable[[dict[str, Any]], None]


def run_parity_check(
    admitted: Admission,
    job: Job,
    outputs: dict[str, Any],
    runner: Runner,
    emit: Emit,
    *,
    timeout_s: float,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """Run the reference framework on the evaluated job's inputs and compare the outputs.

    Args:
        job: the evaluated job; `outputs` is what it returned (encoded, see `encode_outputs`).

    Returns:
        The result's `parity` section; when the reference could not run, {"against", "verdict":
        "unavailable", "error"}: the evaluation stands, but no parity is claimed.
    """
    reference_job = admitted.parity_job(job)
    against = reference_job.framework
    emit({"event": "phase", "phase": "parity", "against": against})
    outcome = runner.run(reference_job, lambda event: None, timeout_s=timeout_s, cancel=cancel)
    if outcome.result is None or "outputs" not in outcome.result:
        error = outcome.error or {"message": "the reference run returned no outputs"}
        return {"against": against, "verdict": "unavailable", "error": error.get("message", "")}
    try:
        return compare_outputs(
            decode_outputs(outcome.result["outputs"]),
            decode_outputs(outputs),
            against=against,
            rtol=admitted.request.tolerance,
            scores=score_outputs(admitted.manifest),
        )
    except UserError as exc:
        return {"against": against, "verdict": "unavailable", "error": exc.message}


def parity_across(
    model: str,
    frameworks: Sequence[str],
    document: Mapping[str, Any],
    *,
    settings: Settings,
    samples: int,
    rtol: float | None = None,
    emit: Callable[[str, dict[str, Any]], None] = lambda framework, event: None,
) -> dict[str, Any]:
    """`mlscope parity`: the same inputs through each framework, each compared with the first.

    Nothing is measured or stored: each framework's predictor loads the model and returns its
    outputs for the first `samples` samples of the dataset (or seeded synthetic inputs).

    Args:
        frameworks: two or more; the first is the reference.
        document: the request's other fields (dataset, limit, batch_sizes, runner, ...).
        rtol: the relative tolerance; None for the outputs' dtype's default.
        emit: told of each framework's events.

    Returns:
        {"model", "reference", "samples", "dataset", "verdict", "frameworks": [{"framework",
        "version", **the parity section} or {"framework", "verdict": "unavailable", "error"}]};
        the verdict is "same" only when every framework's is.

    Raises:
        UserError: fewer than two frameworks, or a request that would not be admitted.
    """
    if len(frameworks) < 2:
        raise UserError(
            "parity compares two or more frameworks: name them with --frameworks a,b", field="framework"
        )
    registry = ModelRegistry.load(settings.manifests)
    admitted = [
        admit({**document, "model": model, "framework": name}, registry, here=settings) for name in frameworks
    ]
    runs: list[tuple[str, Outcome]] = []
    for item in admitted:
        request = item.request
        job = outputs_only(
            item.job(f"parity-{request.framework}", cache_dir=str(settings.cache_dir)), samples
        )
        runner = get_runner(request.runner, settings)

        def told(event: dict[str, Any], name: str = request.framework) -> None:
            emit(name, event)

        outcome = runner.run(job, told, timeout_s=request.timeout_s, memory_limit_mb=request.memory_limit_mb)
        runs.append((request.framework, outcome))
    reference_name, reference = runs[0]
    if reference.result is None:
        error = reference.error or {}
        raise UserError(
            f"the reference framework {reference_name} could not run {model}: {error.get('type')}: "
            f"{error.get('message')}"
        )
    reference_outputs = decode_outputs(reference.result["outputs"])
    rows = []
    for name, outcome in runs[1:]:
        if outcome.result is None:
            error = outcome.error or {}
            rows.append(
                {
                    "framework": name,
                    "verdict": "unavailable",
                    "error": f"{error.get('type')}: {error.get('message')}",
                }
            )
            continue
        section = compare_outputs(
            reference_outputs,
            decode_outputs(outcome.result["outputs"]),
            against=reference_name,
            rtol=rtol,
            scores=score_outputs(admitted[0].manifest),
        )
        rows.append({"framework": name, "version": outcome.result["framework"].get("version"), **section})
    dataset = admitted[0].dataset
    return {
        "model": model,
        "reference": {"framework": reference_name, "version": reference.result["framework"].get("version")},
        "samples": rows[0].get("count", samples) if rows else samples,
        "dataset": None if dataset is None else {"name": dataset.name, "sha256": dataset.sha256},
        "verdict": "same" if rows and all(row["verdict"] == "same" for row in rows) else "different",
        "frameworks": rows,
    }
