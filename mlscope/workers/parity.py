"""Output parity: the same inputs through two or more frameworks, their outputs compared.

A check attached to an evaluation (`--check-parity`):

    evaluated job (returned its first samples' outputs) ─┐
    reference job (same dataset or seed, no measuring) ──┴─▶ compare_outputs ─▶ result["parity"]

The reference runs through the same runner as the evaluation, after it, so it never shares the
machine with the measured pass. `parity_across` is `mlscope parity`: no measuring, no store;
across frameworks, or between a converted model and its source (`--against`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from mlscope.contract.errors import UserError
from mlscope.contract.events import Emit, PredictorEvent
from mlscope.contract.job import Job
from mlscope.contract.result import Parity
from mlscope.contract.settings import Settings
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.measure.parity import compare_outputs, decode_outputs, score_outputs
from mlscope.workers.admission import Admission, admit, default_frameworks, outputs_only
from mlscope.workers.runners import get_runner
from mlscope.workers.runners.base import Runner, RunOutcome

__all__ = ["parity_across", "run_parity_check"]


def run_parity_check(
    admitted: Admission,
    job: Job,
    outputs: dict[str, Any],
    runner: Runner,
    emit: Emit,
    *,
    timeout_s: float,
    cancel: threading.Event | None = None,
) -> Parity:
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
        return cast(
            Parity,
            compare_outputs(
                decode_outputs(outcome.result["outputs"]),
                decode_outputs(outputs),
                against=against,
                rtol=admitted.request.tolerance,
                scores=score_outputs(admitted.manifest),
            ),
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
    emit: Callable[[str, PredictorEvent], None] = lambda framework, event: None,
    against: str | None = None,
    against_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`mlscope parity`: the same inputs through each framework, each compared with the first; or,
    with `against`, through two model references (a converted model and its source).

    Nothing is measured or stored: each framework's predictor loads the model and returns its
    outputs for the first `samples` samples of the dataset (or seeded synthetic inputs, made from
    the inputs' shapes and dtypes in order, so two models with the same inputs get the same ones).

    Args:
        frameworks: without `against`, two or more, the first the reference; with it, `model`'s
            framework and `against`'s, in that order.
        document: the request's other fields (dataset, limit, batch_sizes, runner, ...); its
            `model_options` are `model`'s.
        rtol: the relative tolerance; None for the outputs' dtype's default.
        emit: told of each framework's events.
        against: a second model reference, the candidate compared with `model`.
        against_options: its model options (input_shapes, input_dtypes, config, weights); a Python
            factory given no input shapes takes `model`'s inputs, which it must accept anyway.

    Returns:
        {"model", "reference", "samples", "dataset", "verdict", "frameworks": [{"framework",
        "version", **the parity section} or {"framework", "verdict": "unavailable", "error"}]};
        with `against`, the reference and the row also carry "model". The verdict is "same" only
        when every row's is.

    Raises:
        UserError: fewer than two frameworks (without `against`), two references whose inputs
            differ, or a request that would not be admitted.
    """
    registry = ModelRegistry.load(settings.manifests)
    if against is None:
        if len(frameworks) < 2:
            raise UserError(
                "parity compares two or more frameworks: name them with --frameworks a,b", field="framework"
            )
        admitted = [
            admit({**document, "model": model, "framework": name}, registry, here=settings)
            for name in frameworks
        ]
    else:
        admitted = _admit_pair(
            model, against, frameworks, document, against_options or {}, registry, settings
        )
    runs: list[tuple[str, RunOutcome]] = []
    for item in admitted:
        request = item.request
        job = outputs_only(
            item.job(f"parity-{request.framework}", cache_dir=str(settings.cache_dir)), samples
        )
        runner = get_runner(request.runner, settings)

        def told(event: PredictorEvent, name: str = request.framework) -> None:
            emit(name, event)

        outcome = runner.run(job, told, timeout_s=request.timeout_s, memory_limit_mb=request.memory_limit_mb)
        runs.append((request.framework, outcome))
    reference_name, reference = runs[0]
    if reference.result is None:
        error: Mapping[str, Any] = reference.error or {}
        raise UserError(
            f"the reference framework {reference_name} could not run {model}: {error.get('type')}: "
            f"{error.get('message')}"
        )
    reference_outputs = decode_outputs(reference.result["outputs"])
    rows = []
    for name, outcome in runs[1:]:
        named: dict[str, Any] = (
            {"framework": name} if against is None else {"framework": name, "model": against}
        )
        if outcome.result is None:
            error = outcome.error or {}
            rows.append(
                {**named, "verdict": "unavailable", "error": f"{error.get('type')}: {error.get('message')}"}
            )
            continue
        candidate = decode_outputs(outcome.result["outputs"])
        if against is not None:
            candidate = _by_reference_names(reference_outputs, candidate, model, against)
        section = compare_outputs(
            reference_outputs,
            candidate,
            against=reference_name,
            rtol=rtol,
            scores=score_outputs(admitted[0].manifest),
        )
        rows.append({**named, "version": outcome.result["framework"].get("version"), **section})
    dataset = admitted[0].dataset
    reference_row = {"framework": reference_name, "version": reference.result["framework"].get("version")}
    if against is not None:
        reference_row["model"] = model
    return {
        "model": model,
        "reference": reference_row,
        "samples": rows[0].get("count", samples) if rows else samples,
        "dataset": None if dataset is None else {"name": dataset.name, "sha256": dataset.sha256},
        "verdict": "same" if rows and all(row["verdict"] == "same" for row in rows) else "different",
        "frameworks": rows,
    }


def _admit_pair(
    model: str,
    against: str,
    frameworks: Sequence[str],
    document: Mapping[str, Any],
    against_options: Mapping[str, Any],
    registry: ModelRegistry,
    settings: Settings,
) -> list[Admission]:
    """`model` and `against`, each on its framework (the given ones in order, else each reference's
    first installed), admitted with the same dataset and inputs; their inputs must agree."""
    from mlscope.registry.references import reference_kind
    from mlscope.runtime.frameworks import in_framework_order

    if len(frameworks) > 2:
        raise UserError(
            "with --against, --frameworks names at most two: the model's and the --against model's",
            field="framework",
        )
    chosen = list(frameworks)
    for ref in (model, against)[len(chosen) :]:
        chosen.append(in_framework_order(default_frameworks(registry, ref))[0])
    first = admit({**document, "model": model, "framework": chosen[0]}, registry, here=settings)
    options = dict(against_options)
    if "input_shapes" not in options and reference_kind(against) == "factory":
        # The same inputs are the point: a factory, whose inputs cannot be read from it, takes the
        # reference's (batch axis first, as --input-shape gives them).
        options["input_shapes"] = {spec.name: [1, *spec.shape] for spec in first.manifest.inputs}
        dtypes = {spec.name: spec.dtype for spec in first.manifest.inputs if spec.dtype != "float32"}
        if dtypes:
            options["input_dtypes"] = dtypes
    second_document = {**document, "model": against, "framework": chosen[1], "model_options": options}
    if not options:
        second_document.pop("model_options", None)
    second = admit(second_document, registry, here=settings)
    ours, theirs = _input_specs(first), _input_specs(second)
    if ours != theirs:
        raise UserError(
            f"{model} and {against} take different inputs ({_describe(ours)} against {_describe(theirs)}): "
            "parity compares the same inputs",
            field="against",
        )
    return [first, second]


def _input_specs(admitted: Admission) -> list[tuple[tuple[int, ...], str, Any]]:
    return [(tuple(spec.shape), spec.dtype, spec.value_range) for spec in admitted.manifest.inputs]


def _describe(specs: list[tuple[tuple[int, ...], str, Any]]) -> str:
    return ", ".join("x".join(str(d) for d in shape) + f" {dtype}" for shape, dtype, _ in specs) or "none"


def _by_reference_names(
    reference: dict[str, Any], candidate: dict[str, Any], model: str, against: str
) -> dict[str, Any]:
    """The candidate's outputs under the reference's names: by name where they share them, else in
    order (an export renames outputs: torch's "output" becomes the graph's "logits")."""
    if any(name in candidate for name in reference):
        return candidate
    if len(candidate) != len(reference):
        raise UserError(
            f"{against} gives {len(candidate)} outputs ({', '.join(candidate)}) and {model} "
            f"{len(reference)} ({', '.join(reference)}): parity compares outputs one to one",
            field="against",
        )
    return dict(zip(reference, candidate.values(), strict=True))
