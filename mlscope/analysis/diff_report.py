"""`mlscope diff A B` over a store: pick the two evaluations, match their points on (scenario, batch
size), refuse a pair that measured different workloads (`contract.workload`: another model
definition, model options, predictor options, load or generation settings; unless allowed, when the
report lists them) and the points that cannot be compared (saying why), and compare the rest with
`analysis.diff.compare_samples`. The CLI and `GET /api/v1/compare/diff` both answer with
`diff_evaluations`'s report.

A side is an evaluation id (or a unique prefix of one), or a filter `model=resnet18,framework=
onnxruntime[,system=...,device=...,scenario=...,batch_size=...]` that picks the latest succeeded
evaluation matching it (`system` may be a prefix of the system id).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlscope.analysis.diff import (
    DEFAULT_BETWEEN_RUNS,
    DEFAULT_CONFIDENCE,
    DEFAULT_THRESHOLD,
    MIN_OTHER_RUNS,
    compare_samples,
)
from mlscope.analysis.diff_prior import pooled_spread, series_spread
from mlscope.contract.errors import UserError
from mlscope.contract.result import EvaluationResult
from mlscope.contract.system_ids import system_ids
from mlscope.contract.workload import Difference, display_name, workload_differences
from mlscope.store import Store
from mlscope.store.paging import MAX_LIST_LIMIT

__all__ = [
    "FILTER_KEYS",
    "MAX_SCANNED",
    "DifferentWorkloads",
    "Picked",
    "check_levels",
    "diff_evaluations",
    "matches_filter",
    "measures_filter",
    "newest_succeeded",
    "parse_filter",
    "pick_evaluation",
]

# The keys a side's filter may name.
FILTER_KEYS = ("model", "framework", "system", "device", "scenario", "batch_size")
# A filter looks through at most this many of the newest succeeded evaluations.
MAX_SCANNED = 5 * MAX_LIST_LIMIT
SIDES = ("a", "b")
# A side's between-run spread is read from at most this many of its series' latest runs.
SERIES_RUNS = 50


@dataclass(frozen=True)
class Picked:
    """One side of a diff: the evaluation (with its raw latencies) and how it was picked."""

    evaluation: Mapping[str, Any]
    how: str
    # The filter's scenario and batch_size, which narrow the side to those points.
    only: Mapping[str, str] = field(default_factory=dict)

    def measurements(self) -> list[dict[str, Any]]:
        """The side's measurements, narrowed to the filter's scenario and batch size where it named them."""
        return [m for m in self.evaluation["measurements"] if measures_filter(m, self.only)]

    @property
    def system_id(self) -> str | None:
        return (self.evaluation.get("system") or {}).get("id")

    @property
    def machine_and_stack(self) -> tuple[str | None, str | None]:
        """Its machine id and stack id (contract.system_ids): what a series and --same-system go by."""
        system = self.evaluation.get("system")
        return system_ids(system, self.evaluation["framework"]) if system else (None, None)

    def describe(self) -> dict[str, Any]:
        """The side as the report shows it: which evaluation, of what, where, and how it was picked."""
        evaluation = self.evaluation
        return {
            "id": evaluation["id"],
            "model": evaluation["model"]["name"],
            "display_name": display_name(evaluation),
            "framework": evaluation["framework"]["name"],
            "framework_version": evaluation["framework"].get("version"),
            "system_id": self.system_id,
            "machine_id": self.machine_and_stack[0],
            "stack_id": self.machine_and_stack[1],
            "hostname": (evaluation.get("system") or {}).get("hostname"),
            "device": evaluation["device"],
            "created_at": evaluation["created_at"],
            "picked": self.how,
        }


class DifferentWorkloads(UserError):
    """A and B measured different workloads (`contract.workload.workload_differences`): refused unless
    the caller allows it. `differences` names each; the message lists them all on one line."""

    def __init__(self, differences: list[Difference]) -> None:
        named = "; ".join(d.text for d in differences)
        super().__init__(
            f"A and B measured different workloads, so their latencies are not comparable: {named} "
            "(--allow-different, allow_different=true over HTTP, compares them anyway)",
            field=differences[0].field,
        )
        self.differences = differences


def check_levels(threshold: float, confidence: float) -> None:
    """Refuses a threshold outside (0, 1) or a confidence outside [0.5, 1).

    Raises:
        UserError: naming "threshold" or "confidence" and the range expected.
    """
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and 0 < threshold < 1):
        raise UserError(
            f"threshold: expected a relative difference between 0 and 1 (0.02 = 2%), got {threshold!r}",
            field="threshold",
        )
    if not (isinstance(confidence, (int, float)) and math.isfinite(confidence) and 0.5 <= confidence < 1):
        raise UserError(
            f"confidence: expected a level from 0.5 up to (not including) 1, e.g. 0.95, got {confidence!r}",
            field="confidence",
        )


def pick_evaluation(store: Store, selector: str, *, side: str = "a") -> Picked:
    """The evaluation `selector` names, with its raw latencies.

    Args:
        selector: an id or unique id prefix, or a filter `key=value,...` (FILTER_KEYS).
        side: "a" or "b": the field errors name.

    Raises:
        UserError (field `side`): an unknown or failed evaluation, an ambiguous prefix, a malformed
            filter, or a filter nothing matches.
    """
    selector = selector.strip()
    if "=" in selector:
        return _pick_by_filter(store, parse_filter(selector, side), side)
    try:
        evaluation = store.get_evaluation(store.resolve_id(selector), include_raw=True)
    except UserError as exc:
        raise UserError(f"{side}: {exc.message}", field=side) from None
    if evaluation["status"] != "succeeded":
        raise UserError(
            f"{side}: evaluation {evaluation['id']} is {evaluation['status']}: only succeeded evaluations "
            "can be compared",
            field=side,
        )
    return Picked(evaluation, f"id {evaluation['id']}")


def parse_filter(selector: str, side: str) -> dict[str, str]:
    """A filter `key=value,...` as {key: value}.

    Raises:
        UserError (field `side`): a part that is not key=value, a key outside FILTER_KEYS, or a
            batch_size that is not a whole number.
    """
    wanted: dict[str, str] = {}
    for part in selector.split(","):
        key, equals, value = (text.strip() for text in part.partition("="))
        if not equals or not key or not value:
            raise UserError(
                f"{side}: {part.strip()!r} is not key=value: expected an evaluation id or a filter like "
                "model=resnet18,framework=onnxruntime",
                field=side,
            )
        if key not in FILTER_KEYS:
            raise UserError(
                f"{side}: unknown filter key {key!r}: expected some of {', '.join(FILTER_KEYS)}", field=side
            )
        wanted[key] = value
    if "batch_size" in wanted and not wanted["batch_size"].isdigit():
        raise UserError(
            f"{side}: batch_size={wanted['batch_size']}: expected a whole number of samples", field=side
        )
    return wanted


def matches_filter(evaluation: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    """Whether an evaluation (public shape) is on the system (id prefix) and device `wanted` names and
    measured a point at its scenario and batch size (model and framework are the listing's filters)."""
    system_id = (evaluation.get("system") or {}).get("id") or ""
    if "system" in wanted and not system_id.startswith(wanted["system"]):
        return False
    if "device" in wanted and evaluation["device"] != wanted["device"]:
        return False
    return any(measures_filter(measurement, wanted) for measurement in evaluation["measurements"])


def measures_filter(measurement: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    """Whether the measurement is at the scenario and batch size `wanted` names (any, where it names none)."""
    return measurement["scenario"] == wanted.get("scenario", measurement["scenario"]) and str(
        measurement["batch_size"]
    ) == wanted.get("batch_size", str(measurement["batch_size"]))


def newest_succeeded(
    store: Store, wanted: Mapping[str, str], *, scanned: int = MAX_SCANNED, page_size: int = MAX_LIST_LIMIT
) -> Iterator[EvaluationResult]:
    """The succeeded evaluations of the filter's model and framework, on its system, newest first, at
    most `scanned` of them, read `page_size` at a time (the filter's other keys are the caller's to
    match).

    Raises:
        SystemNotFound, AmbiguousSystemId: as `Store.resolve_system_id`, for the filter's system.
    """
    system_id = store.resolve_system_id(wanted["system"]) if "system" in wanted else None
    for offset in range(0, scanned, page_size):
        page = store.list_evaluations(
            model=wanted.get("model"),
            framework=wanted.get("framework"),
            system_id=system_id,
            status="succeeded",
            limit=page_size,
            offset=offset,
        )
        yield from page
        if len(page) < page_size:
            return


def _pick_by_filter(store: Store, wanted: dict[str, str], side: str) -> Picked:
    described = ",".join(f"{key}={value}" for key, value in wanted.items())
    try:
        for evaluation in newest_succeeded(store, wanted):
            if matches_filter(evaluation, wanted):
                full = store.get_evaluation(evaluation["id"], include_raw=True)
                how = f"the latest succeeded evaluation matching {described}: {full['id']}"
                point: dict[str, str] = {k: wanted[k] for k in ("scenario", "batch_size") if k in wanted}
                return Picked(full, how, point)
    except UserError as exc:
        raise UserError(f"{side}: {exc.message}", field=side) from None
    raise UserError(f"{side}: no succeeded evaluation matches {described}", field=side)


def _point_key(measurement: Mapping[str, Any]) -> tuple[str, int]:
    return (str(measurement["scenario"]), int(measurement["batch_size"]))


def _point_name(key: tuple[str, int]) -> str:
    return f"{key[0]} batch {key[1]}"


def _refusal(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """Why the pair of measurements cannot be compared; None when it can."""
    for side, measurement in (("A", a), ("B", b)):
        validity = measurement.get("validity") or {}
        if validity.get("valid") is False:
            reasons = "; ".join(validity.get("reasons") or []) or "no reason recorded"
            return f"{side}'s measurement is not valid: {reasons}"
        latencies = measurement.get("latencies_ns") or []
        if len(latencies) < 2:
            return f"{side}'s raw latencies are not stored (pruned, or fewer than 2)"
        if min(latencies) <= 0:
            return f"{side}'s raw latencies include {min(latencies)} ns: a latency must be positive"
    return None


def _between_runs(
    store: Store, side: Picked, key: tuple[str, int], pair: set[str], confidence: float
) -> dict[str, Any]:
    """The spread of log(median) over the side's valid runs of the same series (model, framework,
    machine, stack, device, scenario, batch size), as `diff_prior.series_spread` scales it; "runs" counts the
    runs besides the pair's own, and sd is None (unknown) when fewer than MIN_OTHER_RUNS. The pair's
    own runs of the series count in the spread: a run that is itself an outlier widens the spread it
    is judged by, rather than being judged by the others' narrower one."""
    evaluation = side.evaluation
    machine_id, stack_id = side.machine_and_stack
    points = store.history(
        model=evaluation["model"]["name"],
        framework=evaluation["framework"]["name"],
        machine_id=machine_id,
        stack_id=stack_id,
        device=evaluation["device"],
        scenario=key[0],
        batch_size=key[1],
        limit=SERIES_RUNS,
    )
    valid = [p for p in points if p.get("valid") and (p.get("median_ms") or 0) > 0]
    others = sum(p["evaluation_id"] not in pair for p in valid)
    sd = series_spread([p["median_ms"] for p in valid], confidence) if others >= MIN_OTHER_RUNS else None
    return {"runs": others, "sd": sd}


def _assumed_spread(
    store: Store, picked: Mapping[str, Picked], pair: set[str], confidence: float
) -> dict[str, Any]:
    """The between-run spread assumed where neither side's series has one: the pooled spread of the
    other series on the sides' systems (diff_prior), else DEFAULT_BETWEEN_RUNS; with its source."""
    where = {(side.system_id, side.evaluation["device"]) for side in picked.values()}
    pooled = pooled_spread(store, where, pair, confidence)
    if pooled["sd"] is None:
        return {"sd": DEFAULT_BETWEEN_RUNS, "source": "default", "series": 0, "runs": 0}
    return {**pooled, "source": "system"}


def _check_same_system(a: Picked, b: Picked) -> None:
    """Refuses a pair measured on different machines or software stacks; the same machine and stack
    under two system ids (another host name, agent or container) is the same system."""
    if a.machine_and_stack != b.machine_and_stack:

        def where(side: Picked) -> str:
            machine, stack = side.machine_and_stack
            host = (side.evaluation.get("system") or {}).get("hostname") or "?"
            return f"machine {machine} stack {stack} (system {side.system_id}, {host})"

        raise UserError(f"same_system: A ran on {where(a)}, B on {where(b)}", field="same_system")


def diff_evaluations(
    store: Store,
    a: str,
    b: str,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    same_system: bool = False,
    allow_different: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Compare evaluation B with evaluation A at every point both measured.

    Args:
        a, b: each an id, a unique id prefix or a filter (see the module docstring).
        threshold: the smallest relative difference that matters (0.02 = 2%).
        confidence: the level of every interval.
        same_system: refuse a pair that ran on different machines or software stacks.
        allow_different: compare a pair that measured different workloads (model, model options,
            predictor options, load or generation settings: `contract.workload`), the differences
            listed in the report, instead of refusing it.
        seed: seeds the bootstrap, so a diff is reproducible.

    Returns:
        {"a", "b": each side's `Picked.describe()`, "threshold", "confidence", "points": per compared
        point its "scenario", "batch_size", `PointDiff.to_dict()` (ratio, ci, verdict, power, ...) and
        "other_runs" (per side "A"/"B": the valid runs of its series besides the pair's own behind the
        between-run spread; a series that shifted widens it, which errs towards "no detectable
        difference"),
        "assumed_spread" (None when a series' spread is known; else the between-run spread assumed,
        {"sd", "source": "system" (pooled over "series" other series, "runs" runs) or "default"}),
        "refused": per point not compared its "scenario", "batch_size", "reason", "unmatched": per
        point measured by one side only its "side", "scenario", "batch_size", "differences": per
        workload difference (allowed by allow_different; [] when alike) its "field", "a", "b" and
        "text"}.

    Raises:
        UserError: a side that names nothing usable (field "a" or "b"), a bad threshold or
            confidence, different systems with same_system (field "same_system"), no point in
            common (field "b", naming what each side has), or every common point refused.
        DifferentWorkloads: A and B measured different workloads and allow_different is False.
    """
    check_levels(threshold, confidence)
    picked = {
        side: pick_evaluation(store, selector, side=side)
        for side, selector in zip(SIDES, (a, b), strict=True)
    }
    if same_system:
        _check_same_system(picked["a"], picked["b"])
    points = {side: {_point_key(m): m for m in picked[side].measurements()} for side in SIDES}
    common = sorted(points["a"].keys() & points["b"].keys())
    if not common:
        have = {side: ", ".join(_point_name(k) for k in sorted(points[side])) or "none" for side in SIDES}
        raise UserError(f"b: no point in common with a: A has {have['a']}; B has {have['b']}", field="b")
    differences = workload_differences(
        picked["a"].evaluation, picked["b"].evaluation, scenarios={key[0] for key in common}
    )
    if differences and not allow_different:
        raise DifferentWorkloads(differences)
    report: dict[str, Any] = {
        "a": picked["a"].describe(),
        "b": picked["b"].describe(),
        "threshold": threshold,
        "confidence": confidence,
        "points": [],
        "refused": [],
        "unmatched": [
            {"side": side.upper(), "scenario": key[0], "batch_size": key[1]}
            for side, other in (("a", "b"), ("b", "a"))
            for key in sorted(points[side].keys() - points[other].keys())
        ],
        "differences": [difference.to_dict() for difference in differences],
    }
    prior: dict[str, Any] | None = None  # the assumed spread, read once
    for key in common:
        where = {"scenario": key[0], "batch_size": key[1]}
        point_a, point_b = points["a"][key], points["b"][key]
        reason = _refusal(point_a, point_b)
        if reason is not None:
            report["refused"].append({**where, "reason": reason})
            continue
        pair = {picked["a"].evaluation["id"], picked["b"].evaluation["id"]}
        series = {side: _between_runs(store, picked[side], key, pair, confidence) for side in SIDES}
        assumed = None
        if series["a"]["sd"] is None and series["b"]["sd"] is None:
            prior = prior or _assumed_spread(store, picked, pair, confidence)
            assumed = prior
        compared = compare_samples(
            point_a["latencies_ns"],
            point_b["latencies_ns"],
            threshold=threshold,
            confidence=confidence,
            seed=seed,
            between_runs=(series["a"]["sd"], series["b"]["sd"]),
            assumed_between_runs=DEFAULT_BETWEEN_RUNS if assumed is None else assumed["sd"],
        )
        other_runs = {side.upper(): series[side]["runs"] for side in SIDES}
        point = {**where, **compared.to_dict(), "other_runs": other_runs, "assumed_spread": assumed}
        report["points"].append(point)
    if not report["points"]:
        reasons = "; ".join(
            f"{_point_name((r['scenario'], r['batch_size']))}: {r['reason']}" for r in report["refused"]
        )
        raise UserError(f"no point can be compared: {reasons}", field="b")
    return report
