"""The Python API: evaluate a model on this machine from a script or a notebook.

    import mlscope

    results = mlscope.evaluate("resnet18", frameworks=["pytorch", "onnxruntime"], batch_sizes=[1, 8])
    results                 # one line per evaluation: model, framework, status, median per batch size
    results.ok              # every evaluation succeeded, every measurement is valid, no parity differs
    results.to_pandas()     # one row per (evaluation, measurement); needs pandas

`evaluate` runs what `mlscope run` runs (`mlscope.workers.local.evaluate_here`: every request admitted
before the first runs, then each evaluated into the store) and returns the same result dicts
`mlscope run --json` prints. A mistake raises `UserError` naming the field, with nothing stored.

`bricks` runs what `mlscope bricks` runs (`mlscope.services.bricks.run_bricks`): each model's latency
estimated from its layers measured one by one, beside the model measured whole (docs/bricks.md).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, SupportsIndex, TypedDict, TypeVar, cast, overload

from mlscope.contract.errors import UserError
from mlscope.contract.events import EvaluationEvent
from mlscope.contract.request import ContractRequestSchema
from mlscope.contract.result import EvaluationResult, ResultMeasurement, parity_failure
from mlscope.contract.settings import load_settings
from mlscope.workers.local import evaluate_here

if TYPE_CHECKING:
    import pandas

    from mlscope.services.bricks.run import BrickRunReports
    from mlscope.workers.admission import Admission

__all__ = [
    "ACCURACY_COLUMNS",
    "RESOURCE_COLUMNS",
    "ROW_COLUMNS",
    "Progress",
    "ResultRow",
    "ResultSet",
    "bricks",
    "evaluate",
]

# Told of every event of every evaluation, each with the evaluation's "model" and "framework" added:
# {"event": "start"}, "created" (its "id"), "phase" ("phase": import, fetch, load, first_inference,
# measure with its "scenario" and "batch_size"), "progress" ("fraction" of a point), "measurement"
# (a point's "latency_ms", "throughput", "validity"), and {"event": "end", "id", "status"}.
Progress = Callable[[dict[str, Any]], None]

# The columns of `ResultSet.rows()` and `ResultSet.to_pandas()`, in order.
ROW_COLUMNS = (
    "id",
    "model",
    "framework",
    "framework_version",
    "device",
    "scenario",
    "batch_size",
    "status",
    "valid",
    "mean_ms",
    "median_ms",
    "p90_ms",
    "p99_ms",
    "throughput",
    "count",
    "reasons",
    "error",
)


class ResultRow(TypedDict):
    """One row of `ResultSet.rows()`: an evaluation at one of its measured points (scenario and
    batch size; None for an evaluation with no measurement, whose figures are None too), latencies
    in milliseconds; `reasons` joins the measurement's validity reasons, `error` is the evaluation's
    error in one line."""

    id: str
    model: str
    framework: str
    framework_version: str | None
    device: str | None
    scenario: str | None
    batch_size: int | None
    status: str
    valid: bool
    mean_ms: float | None
    median_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    throughput: float | None
    count: int | None
    reasons: str | None
    error: str | None


# The columns `ResultSet.to_pandas()` adds after "throughput" when some result measured accuracy
# (per evaluation, so the same on each of its measurement rows), and "parity" (its verdict) when some
# result has a parity section: absent, not empty, when none was measured.
ACCURACY_COLUMNS = ("top1", "top5")
# The columns `ResultSet.to_pandas()` adds after those when some measurement has a cost section, or an
# energy figure (docs/cost.md): per measurement, absent when none has one.
RESOURCE_COLUMNS = ("cost_per_1k", "joules_per_inference")


P = ParamSpec("P")
R = TypeVar("R")


def _short_user_errors(function: Callable[P, R]) -> Callable[P, R]:
    """A UserError leaves `function` with none of mlscope's frames behind it: it is the caller's mistake,
    its message names the field, and a notebook should show that, not a page of internals
    (MLSCOPE_DEBUG=1 keeps them)."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except UserError as exc:
            if os.environ.get("MLSCOPE_DEBUG"):
                raise
            raise exc.with_traceback(None) from None

    return wrapper


@_short_user_errors
def evaluate(
    model: str | os.PathLike[str],
    frameworks: str | Sequence[str] | None = None,
    batch_sizes: int | Sequence[int] = (1,),
    scenarios: str | Sequence[str] = ("single_stream",),
    *,
    device: str = "cpu",
    runner: str = "process",
    trace_level: str = "NO_TRACE",
    measure: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    timeout_s: float = 1800.0,
    memory_limit_mb: int | None = None,
    load: Mapping[str, Any] | None = None,
    store_url: str | None = None,
    progress: bool | Progress = False,
    on: str | None = None,
    **fields: Any,
) -> ResultSet:
    """Evaluate `model` on each framework here, one after another, and store the results; with
    `on`, on the farm instead (through the API the settings name, MLSCOPE_API_URL).

    Args:
        model: a model reference, as `mlscope run` takes it: a manifest name (`resnet18`), a
            catalogue name (`torchvision:resnet18`, `hf:bert`), ...
        frameworks: framework names (a string may list several, comma-separated); None: every
            installed framework that has a manifest for the model, as `mlscope run` does.
        batch_sizes: batch sizes to measure (an int: one).
        scenarios: `single_stream` (back-to-back latency), `offline` (throughput), `server`
            (Poisson arrivals at load["qps"]), `multi_stream` (load["samples_per_query"] samples
            every load["interval_ms"], or each when the last completed with load["back_to_back"]),
            `generate` (a generative model's requests token by token,
            set by the `generation` field, e.g. generation={"output_tokens": 64, "slo":
            "ttft_ms=200"}: docs/generate.md); a string: one.
        device: `cpu`, `cuda` or `cuda:N`.
        runner: `process` (a child process), `docker` (the framework's image) or `inline` (this
            process: the framework stays imported, so its cold start is a warm one).
        trace_level: NO_TRACE, APPLICATION, MODEL, FRAMEWORK, LIBRARY, HARDWARE or FULL.
        measure: measurement settings, e.g. {"min_seconds": 5, "min_count": 100}
            (docs/measuring.md lists them).
        options: predictor options, e.g. {"threads": 2}.
        timeout_s: each evaluation's time limit in seconds.
        memory_limit_mb: the predictor process's resident-memory limit.
        load: load settings of the server and multi_stream scenarios, e.g. {"qps": 20} or
            {"find_max_qps": True, "latency_bound_ms": 50} (docs/load.md lists them).
        store_url: where the results are stored; None: the settings' store (MLSCOPE_STORE_URL).
        progress: True prints a line on stderr per phase of each evaluation; a callable is told of
            every event (see `Progress`); False says nothing.
        on: a farm target (a capability, or agent:<id>): each framework's evaluation is submitted
            to the farm and waited for. With load={"qps": Q, "agents": N}, the schedule is split
            across N live agents the target matches and the result is the merged one
            (docs/farm.md, "Load from many hosts").
        **fields: any other field of the evaluation request, passed on as it is.

    Returns:
        A ResultSet: the stored results, one per framework in the order asked (by name when none
            was); a failed evaluation is among them with its status and error.

    Raises:
        UserError: a request that would not be admitted, naming the field (`batch_sizes.0`, `model`
            with close names, an unknown field by its name); nothing was stored.
        KeyboardInterrupt: the running evaluation was cancelled (and stored as cancelled).
    """
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str):
        raise UserError(f"model: expected a model reference (a string), got {model!r}", field="model")
    _check_fields(fields)
    document = {
        "batch_sizes": _as_list(batch_sizes),
        "scenarios": _as_list(scenarios),
        "device": device,
        "runner": runner,
        "trace_level": trace_level.upper() if isinstance(trace_level, str) else trace_level,
        "measure": dict(measure or {}),
        "options": dict(options or {}),
        "timeout_s": timeout_s,
        "memory_limit_mb": memory_limit_mb,
        **({"load": dict(load)} if load else {}),
        **fields,
    }
    if isinstance(frameworks, str):
        frameworks = [name.strip() for name in frameworks.split(",") if name.strip()]
    if on is not None:
        return _on_the_farm(model, frameworks, {**document, "target": on})
    settings = load_settings()
    if store_url is not None:
        settings = dataclasses.replace(settings, store_url=store_url)
    watch = _watch(progress)
    return ResultSet(evaluate_here(model, frameworks, document, settings=settings, watch=watch))


@_short_user_errors
def bricks(
    models: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    framework: str = "onnxruntime",
    *,
    threads: int | None = None,
    device: str = "cpu",
    runner: str = "process",
    min_seconds: float | None = None,
    max_seconds: float | None = None,
    min_count: int | None = None,
    store_url: str | None = None,
    progress: bool = False,
) -> BrickRunReports:
    """Estimate each model's latency from its layers (bricks) and measure it whole, on this machine:
    what `mlscope bricks` runs (`mlscope.services.bricks.run_bricks`, docs/bricks.md).

        reports, summary = mlscope.bricks("resnet18")
        reports[0]["estimate_ms"], reports[0]["measured_ms"], reports[0]["error_pct"]

    Every unique brick is measured once per system and framework version and stored: a later model
    that shares it reuses the stored result.

    Args:
        models: a model reference, or several (as `mlscope run` takes them: a manifest name, a
            catalogue name, an .onnx file).
        framework: whose decomposition: onnxruntime (its optimised graph) or pytorch (torch.fx); the
            `mlscope.bricks` registry's names.
        threads: intra-op threads of every measurement (None: the framework's default).
        device: where the bricks and the whole model run: cpu, or cuda[:N] for PyTorch's.
        runner: how each model is measured whole: process, inline or docker (bricks run inline).
        min_seconds, max_seconds, min_count: the whole-model measurement's stopping rule (None:
            2 s, 60 s and 30 runs).
        store_url: where the bricks are looked up and stored; None: the settings' store.
        progress: print a line on stderr per step.

    Returns:
        (reports, summary): one report per model as `mlscope bricks --json` prints it (estimate_ms,
            interval_ms, measured_ms, error_pct, bounds, bricks, validity, ...), and the run's summary.

    Raises:
        UserError: a framework whose models cannot be cut into bricks (naming the supported ones), a
            device its bricks cannot run on, or a model no manifest resolves; nothing was measured.
    """
    from mlscope.services.bricks.run import run_bricks

    given = [models] if isinstance(models, str | os.PathLike) else list(models)
    refs = [os.fspath(model) if isinstance(model, os.PathLike) else model for model in given]
    for index, ref in enumerate(refs):
        if not isinstance(ref, str):
            raise UserError(
                f"models.{index}: expected a model reference (a string), got {ref!r}", field="models"
            )
    settings = load_settings()
    if store_url is not None:
        settings = dataclasses.replace(settings, store_url=store_url)
    return run_bricks(
        refs,
        framework=framework,
        settings=settings,
        threads=threads,
        device=device,
        runner=runner,
        min_seconds=min_seconds,
        max_seconds=max_seconds,
        min_count=min_count,
        note=(lambda line: print(f"mlscope: {line}", file=sys.stderr, flush=True)) if progress else None,
    )


def _on_the_farm(model: str, frameworks: Sequence[str] | None, document: dict[str, Any]) -> ResultSet:
    """Each framework's evaluation submitted to the farm through the API, in order, and waited for.

    Raises:
        UserError: no framework named (the farm's agents decide what they have); the API refused a
            request (naming the field).
    """
    from mlscope.client import Client

    if not frameworks:
        generation = document.get("generation") or {}
        if not generation.get("endpoint"):
            raise UserError(
                "on: name the frameworks to run on the farm (frameworks=[...])", field="frameworks"
            )
        frameworks = ["endpoint"]
    client = Client(settings=load_settings())
    ids = [client.submit({**document, "model": model, "framework": name})["id"] for name in frameworks]
    return ResultSet(cast(EvaluationResult, result) for result in client.wait(ids))


def _check_fields(fields: Mapping[str, Any]) -> None:
    """Refuses a keyword that is not a field of the evaluation request, listing the ones there are
    (the request schema would refuse it too, but a notebook user wants the list)."""
    if "framework" in fields:
        raise UserError("framework: evaluate takes frameworks=[...], a list of names", field="framework")
    named = ContractRequestSchema().load_fields.items()
    known = {field.data_key or name for name, field in named} - {"model", "framework"}
    for name in fields:
        if name not in known:
            raise UserError(
                f"{name}: not a field of the evaluation request; its fields: {', '.join(sorted(known))}",
                field=name,
            )


def _as_list(value: Any) -> list[Any]:
    """A sequence as a list, and a single value (a string, a number) as a list of it."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        return [value]
    return list(value)


def _watch(progress: bool | Progress) -> Callable[[Admission, EvaluationEvent], None] | None:
    if progress is False:
        return None
    tell = _print_line if progress is True else progress
    if not callable(tell):
        raise UserError(f"progress: expected True, False or a callable, got {progress!r}", field="progress")

    def watch(admitted: Admission, event: EvaluationEvent) -> None:
        request = admitted.request
        tell({**event, "model": request.model, "framework": request.framework})

    return watch


def _print_line(event: dict[str, Any]) -> None:
    """progress=True: a line on stderr per phase, per measured point and per end."""
    kind = event["event"]
    if kind == "phase":
        phase = event["phase"]
        if phase == "measure":
            phase = f"measure {event['scenario']} batch {event['batch_size']}"
        text = phase
    elif kind == "measurement":
        median = _ms(event["latency_ms"]["median"])
        valid = "" if event["validity"]["valid"] else ", INVALID"
        text = f"{event['scenario']} batch {event['batch_size']}: median {median}{valid}"
    elif kind in ("start", "end"):
        text = "starting" if kind == "start" else f"{event['status']} ({event['id'][:8]})"
    else:
        return
    print(f"mlscope: {event['model']} on {event['framework']}: {text}", file=sys.stderr, flush=True)


class ResultSet(list[EvaluationResult]):
    """Evaluation results: the result dicts (docs/design.md's result shape) `mlscope run --json` prints,
    one per evaluation, in a list that can say how they went and become a table.

    A result never looks better than it is: a failed evaluation shows its error, and a measurement
    whose validity verdict is negative says INVALID in the repr and valid=False in the table.
    """

    @overload
    def __getitem__(self, index: SupportsIndex) -> EvaluationResult: ...

    @overload
    def __getitem__(self, index: slice) -> ResultSet: ...

    def __getitem__(self, index: SupportsIndex | slice) -> EvaluationResult | ResultSet:
        if isinstance(index, slice):
            return ResultSet(super().__getitem__(index))
        return super().__getitem__(index)

    @property
    def ok(self) -> bool:
        """True when there is at least one result, every one succeeded, every measurement of each is
        valid, and none has a parity check that found its outputs different."""
        return bool(self) and all(_problem(result) is None for result in self)

    def rows(self) -> list[ResultRow]:
        """One row per (evaluation, measurement), with the columns of ROW_COLUMNS; an evaluation with
        no measurement (failed, cancelled, still running) gets one row with its status and error,
        valid=False and no figures. A row is valid when its measurement is and the evaluation's parity
        check (if any) did not find its outputs different."""
        rows: list[ResultRow] = []
        for result in self:
            measurements = result.get("measurements") or []
            # Outputs that differ from the reference framework's make every figure of it suspect.
            parity_ok = parity_failure(result.get("parity")) is None
            if not measurements:
                rows.append(_row(result, None, valid=False))
                continue
            for m in measurements:
                validity: Mapping[str, Any] = m.get("validity") or {}
                rows.append(_row(result, m, valid=validity.get("valid") is True and parity_ok))
        return rows

    def to_pandas(self) -> pandas.DataFrame:
        """The rows (see `rows`) as a pandas DataFrame; batch_size and count are nullable integers.

        When some result measured accuracy, the columns "top1" and "top5" (fractions; NaN for a result
        without) follow "throughput", and "parity" (the verdict, "same" or "different") when some
        result has a parity check; then "cost_per_1k" when some measurement has a price, and
        "joules_per_inference" when some has an energy figure (NaN for a measurement without).

        Raises:
            ImportError: pandas is not installed.
        """
        try:
            import pandas
        except ImportError:
            raise ImportError("ResultSet.to_pandas() needs pandas: pip install pandas") from None
        # Plain dicts: the section and resource columns join the typed ones.
        rows: list[dict[str, Any]] = [dict(row) for row in self.rows()]
        columns = list(ROW_COLUMNS)
        added = [*(ACCURACY_COLUMNS if any(r.get("accuracy") for r in self) else ())]
        if any(r.get("parity") for r in self):
            added.append("parity")
        resources = {
            (r["id"], m["scenario"], m["batch_size"]): _resource_cells(m)
            for r in self
            for m in r.get("measurements") or []
        }
        added += [c for c in RESOURCE_COLUMNS if any(cells[c] is not None for cells in resources.values())]
        if added:
            at = columns.index("throughput") + 1
            columns[at:at] = added
            sections = {r["id"]: _section_cells(r) for r in self}
            for row in rows:
                cells = {
                    **sections[row["id"]],
                    **resources.get((row["id"], row["scenario"], row["batch_size"]), {}),
                }
                row.update({column: cells.get(column) for column in added})
        frame = pandas.DataFrame(rows, columns=columns)
        types: dict[str, Any] = {"batch_size": "Int64", "count": "Int64", "valid": bool}
        types.update({c: "Float64" for c in added if c in ACCURACY_COLUMNS or c in RESOURCE_COLUMNS})
        return frame.astype(types)

    def __repr__(self) -> str:
        if not self:
            return "ResultSet: no evaluations"
        problems = [p for p in (_problem(r) for r in self) if p is not None]
        verdict = "ok" if not problems else f"NOT ok: {', '.join(problems)}"
        lines = [f"ResultSet: {len(self)} evaluation{'s' if len(self) != 1 else ''}, {verdict}"]
        cells = [_line_cells(result) for result in self]
        widths = [max(len(row[i]) for row in cells) for i in range(3)]
        for model, framework, status, detail in cells:
            padded = (
                cell.ljust(width) for cell, width in zip((model, framework, status), widths, strict=True)
            )
            lines.append("  " + "  ".join(padded) + "  " + detail)
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython and Jupyter print the same lines as repr."""
        printer.text(repr(self))


def _row(result: EvaluationResult, measurement: ResultMeasurement | None, *, valid: bool) -> ResultRow:
    """The table row of `result` at `measurement` (None: its one row without figures)."""
    latency = measurement["latency_ms"] if measurement is not None else None
    validity: Mapping[str, Any] = (measurement.get("validity") or {}) if measurement is not None else {}
    return {
        "id": result["id"],
        "model": result["model"]["name"],
        "framework": result["framework"]["name"],
        "framework_version": result["framework"].get("version"),
        "device": result.get("device"),
        "scenario": measurement["scenario"] if measurement is not None else None,
        "batch_size": measurement["batch_size"] if measurement is not None else None,
        "status": result["status"],
        "valid": valid,
        "mean_ms": latency["mean"] if latency is not None else None,
        "median_ms": latency["median"] if latency is not None else None,
        "p90_ms": latency["p90"] if latency is not None else None,
        "p99_ms": latency["p99"] if latency is not None else None,
        "throughput": measurement["throughput"] if measurement is not None else None,
        "count": latency["count"] if latency is not None else None,
        "reasons": "; ".join(validity.get("reasons") or []) or None,
        "error": _error_text(result),
    }


def _section_cells(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result's top1, top5 and parity verdict for its table rows; None where it has none."""
    accuracy, parity = result.get("accuracy") or {}, result.get("parity") or {}
    return {"top1": accuracy.get("top1"), "top5": accuracy.get("top5"), "parity": parity.get("verdict")}


def _resource_cells(measurement: Mapping[str, Any]) -> dict[str, Any]:
    """A measurement's cost per 1k inferences and joules per inference; None where it has none."""
    cost, energy = measurement.get("cost") or {}, measurement.get("energy") or {}
    return {
        "cost_per_1k": cost.get("per_1k_inferences"),
        "joules_per_inference": energy.get("joules_per_inference"),
    }


def _problem(result: Mapping[str, Any]) -> str | None:
    """What keeps a result from being ok, in a few words; None when it is."""
    if result["status"] != "succeeded":
        return f"{result['framework']['name']} {result['status']}"
    measurements = result.get("measurements") or []
    if not measurements:
        return f"{result['framework']['name']} has no measurements"
    invalid = sum(1 for m in measurements if (m.get("validity") or {}).get("valid") is not True)
    if invalid:
        return f"{result['framework']['name']} {invalid} of {len(measurements)} measurements INVALID"
    failure = parity_failure(result.get("parity"))
    if failure is not None:
        return f"{result['framework']['name']} {failure.replace('different', 'DIFFERENT', 1)}"
    return None


def _line_cells(result: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """The repr's columns for one result: model, framework and version, status, what it measured."""
    framework = result["framework"]
    name = f"{framework['name']} {framework.get('version') or ''}".strip()
    status = result["status"]
    measurements = result.get("measurements") or []
    invalid = sum(1 for m in measurements if (m.get("validity") or {}).get("valid") is not True)
    if status == "succeeded" and measurements and invalid == len(measurements):
        status += ", ALL INVALID"
    elif status == "succeeded" and invalid:
        status += f", {invalid} INVALID"
    if status.startswith("succeeded") and parity_failure(result.get("parity")) is not None:
        status += ", PARITY DIFFERENT"
    if status != "succeeded" and not measurements:
        detail = _error_text(result) or "no measurements"
    else:
        by_scenario: dict[str, list[str]] = {}
        for m in measurements:
            point = f"b{m['batch_size']} {_ms(m['latency_ms']['median'])}"
            if (m.get("validity") or {}).get("valid") is not True:
                point += " INVALID"
            by_scenario.setdefault(m["scenario"], []).append(point)
        detail = "; ".join(f"{scenario} median {', '.join(p)}" for scenario, p in by_scenario.items())
        top1 = (result.get("accuracy") or {}).get("top1")
        if top1 is not None:
            detail += f"; top-1 {top1 * 100:.1f}% on {result['accuracy'].get('dataset')}"
    return result["model"]["name"], name, status, f"{detail}  [{result['id'][:8]}]"


def _error_text(result: Mapping[str, Any]) -> str | None:
    error = result.get("error")
    if not error:
        return None
    message = " ".join(str(error.get("message") or "").split())
    if len(message) > 200:
        message = message[:197] + "..."
    phase = f" in {error['phase']}" if error.get("phase") else ""
    return f"{error.get('type') or 'Error'}{phase}: {message}"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f} ms" if value < 10 else f"{value:.2f} ms" if value < 1000 else f"{value:,.0f} ms"
