"""The result sections an evaluation may carry beside its measurements (docs/design.md,
"Result sections"): `accuracy` (top-k on a labelled dataset, with its confidence interval), `parity`
(this framework's outputs against another's on the same inputs) and `memory` (the predictor
process's peaks); and those a measurement may carry, `energy` and `cost`. Checked as every backend
stores them (what a section does to validity is the contract's: mlscope.contract.result).

A section is absent when it was not measured, never zero-filled; keys beyond the documented ones are
kept as given, so a newer runtime's additions survive a store that does not know them yet.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.result import PARITY_VERDICTS
from mlscope.store.records.values import check_object, check_optional_text, check_text

__all__ = ["check_accuracy", "check_cost", "check_energy", "check_memory", "check_parity"]

# Cosine similarity computed in float32 can land a rounding error past ±1; beyond this it is wrong.
_COSINE_SLACK = 1e-6
_PARITY_FIGURES = ("max_abs", "mean_abs", "max_rel")


def _number(value: Any, field: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise UserError(f"{field} must be {what}, not {value!r}", field=field)
    return float(value)


def _fraction(value: Any, field: str) -> float:
    what = "a fraction in [0, 1]"
    number = _number(value, field, what)
    if not 0.0 <= number <= 1.0:
        raise UserError(f"{field} must be {what}, not {value!r}", field=field)
    return number


def _optional_fraction(section: Mapping[str, Any], key: str, field: str) -> None:
    if section.get(key) is not None:
        _fraction(section[key], f"{field}.{key}")


def _count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise UserError(f"{field} must be a whole number of samples, 1 or more, not {value!r}", field=field)
    return int(value)


def _interval(value: Any, field: str) -> None:
    if not isinstance(value, list) or len(value) != 2:
        raise UserError(f"{field} must be an interval [low, high], not {value!r}", field=field)
    low, high = (_fraction(bound, f"{field}[{index}]") for index, bound in enumerate(value))
    if low > high:
        raise UserError(
            f"{field} must be an interval [low, high] with low ≤ high, not {value!r}", field=field
        )


def check_accuracy(accuracy: Any) -> dict[str, Any]:
    """The accuracy section as stored: {"dataset", "dataset_sha256", "count", "task", "top1", "top5",
    "ci": {"method", "level", "top1": [lo, hi], "top5": [lo, hi]}, "limit", ...}.

    `dataset` and `count` are required; top1 and top5 are fractions in [0, 1] (either may be null or
    absent, for a task they do not apply to); other keys are kept as given.

    Raises:
        UserError: naming the first invalid field, e.g. "accuracy.top1".
    """
    checked = check_object(accuracy, "accuracy")
    check_text(checked.get("dataset"), "accuracy.dataset")
    check_optional_text(checked.get("dataset_sha256"), "accuracy.dataset_sha256")
    check_optional_text(checked.get("task"), "accuracy.task")
    _count(checked.get("count"), "accuracy.count")
    for key in ("top1", "top5"):
        _optional_fraction(checked, key, "accuracy")
    if checked.get("limit") is not None:
        _count(checked["limit"], "accuracy.limit")
    ci = checked.get("ci")
    if ci is not None:
        ci = check_object(ci, "accuracy.ci")
        check_optional_text(ci.get("method"), "accuracy.ci.method")
        if ci.get("level") is not None:
            level = _fraction(ci["level"], "accuracy.ci.level")
            if level in (0.0, 1.0):
                raise UserError(
                    f"accuracy.ci.level must be strictly between 0 and 1, not {level}",
                    field="accuracy.ci.level",
                )
        for key in ("top1", "top5"):
            if ci.get(key) is not None:
                _interval(ci[key], f"accuracy.ci.{key}")
    return checked


def _check_comparison(section: Mapping[str, Any], field: str, *, verdict_required: bool) -> None:
    """The figures a parity section and each of its outputs share."""
    verdict = section.get("verdict")
    if (verdict_required or verdict is not None) and verdict not in PARITY_VERDICTS:
        raise UserError(
            f"{field}.verdict={verdict!r} is not one of {', '.join(PARITY_VERDICTS)}",
            field=f"{field}.verdict",
        )
    # Null where an output held NaN or infinity (stored as null everywhere): the verdict says it.
    for key in _PARITY_FIGURES:
        if section.get(key) is not None and _number(section[key], f"{field}.{key}", "a number ≥ 0") < 0:
            raise UserError(
                f"{field}.{key} must be a number ≥ 0, not {section[key]!r}", field=f"{field}.{key}"
            )
    cosine = section.get("cosine")
    if cosine is not None:
        what = "a cosine similarity in [-1, 1]"
        if abs(_number(cosine, f"{field}.cosine", what)) > 1 + _COSINE_SLACK:
            raise UserError(f"{field}.cosine must be {what}, not {cosine!r}", field=f"{field}.cosine")
    _optional_fraction(section, "top1_agreement", field)


def check_parity(parity: Any) -> dict[str, Any]:
    """The parity section as stored: {"against", "count", "verdict", "max_abs", "mean_abs",
    "max_rel", "cosine", "top1_agreement", "tolerance": {"rtol", "atol"}, "outputs": {name: {...}},
    ...}.

    `against`, `count` and `verdict` ("same" or "different") are required (an "unavailable" verdict
    needs only `against` and the reference's `error`); the differences are numbers
    ≥ 0 (null when an output held NaN), cosine in [-1, 1], top1_agreement a fraction or null; each of
    `outputs` is checked as the whole is; other keys are kept as given.

    Raises:
        UserError: naming the first invalid field, e.g. "parity.verdict" or "parity.outputs.logits.cosine".
    """
    checked = check_object(parity, "parity")
    check_text(checked.get("against"), "parity.against")
    if checked.get("verdict") == "unavailable":
        check_text(checked.get("error"), "parity.error")
        return checked
    _count(checked.get("count"), "parity.count")
    _check_comparison(checked, "parity", verdict_required=True)
    tolerance = checked.get("tolerance")
    if tolerance is not None:
        tolerance = check_object(tolerance, "parity.tolerance")
        for key in ("rtol", "atol"):
            value = tolerance.get(key)
            if value is not None and _number(value, f"parity.tolerance.{key}", "a number ≥ 0") < 0:
                raise UserError(
                    f"parity.tolerance.{key} must be a number ≥ 0, not {value!r}",
                    field=f"parity.tolerance.{key}",
                )
    outputs = checked.get("outputs")
    if outputs is not None:
        for name, output in check_object(outputs, "parity.outputs").items():
            field = f"parity.outputs.{name}"
            _check_comparison(check_object(output, field), field, verdict_required=False)
    return checked


def _optional_amount(section: Mapping[str, Any], key: str, field: str) -> None:
    """A figure that may be null, else a number ≥ 0."""
    value = section.get(key)
    if value is not None and _number(value, f"{field}.{key}", "a number ≥ 0") < 0:
        raise UserError(f"{field}.{key} must be a number ≥ 0, not {value!r}", field=f"{field}.{key}")


def check_memory(memory: Any) -> dict[str, Any]:
    """The memory section as stored: {"peak_rss_mb", "peak_device_mb", "rss_scope", ...}.

    `peak_rss_mb` is required, a number ≥ 0; `peak_device_mb` is null without a device allocator.

    Raises:
        UserError: naming the first invalid field, e.g. "memory.peak_rss_mb".
    """
    checked = check_object(memory, "memory")
    if checked.get("peak_rss_mb") is None:
        raise UserError("memory.peak_rss_mb is missing: expected megabytes", field="memory.peak_rss_mb")
    for key in ("peak_rss_mb", "peak_device_mb"):
        _optional_amount(checked, key, "memory")
    check_optional_text(checked.get("rss_scope"), "memory.rss_scope")
    return checked


def check_energy(energy: Any, field: str = "energy") -> dict[str, Any]:
    """A measurement's energy section: {"joules_per_inference", "source", ...} when a counter was
    read, else {"unavailable": reason}.

    Raises:
        UserError: naming the first invalid field, e.g. "measurements[0].energy.source".
    """
    checked = check_object(energy, field)
    if "unavailable" in checked:
        check_text(checked.get("unavailable"), f"{field}.unavailable")
        return checked
    check_text(checked.get("source"), f"{field}.source")
    if checked.get("joules_per_inference") is None:
        raise UserError(
            f"{field} has neither joules_per_inference nor unavailable", field=f"{field}.joules_per_inference"
        )
    _optional_amount(checked, "joules_per_inference", field)
    return checked


def check_cost(cost: Any, field: str = "cost") -> dict[str, Any]:
    """A measurement's cost section: {"per_1k_inferences", "per_1m_tokens", "price_per_hour", "ci"}
    (mlscope.contract.cost); ci null or [low, high] around per_1k_inferences.

    Raises:
        UserError: naming the first invalid field, e.g. "measurements[0].cost.price_per_hour".
    """
    checked = check_object(cost, field)
    for key in ("per_1k_inferences", "price_per_hour"):
        if checked.get(key) is None:
            raise UserError(f"{field}.{key} is missing: expected a number ≥ 0", field=f"{field}.{key}")
        _optional_amount(checked, key, field)
    _optional_amount(checked, "per_1m_tokens", field)
    ci = checked.get("ci")
    if ci is not None:
        what = "an interval [low, high] with low ≤ high"
        if not isinstance(ci, list) or len(ci) != 2:
            raise UserError(f"{field}.ci must be {what}, not {ci!r}", field=f"{field}.ci")
        low, high = (_number(bound, f"{field}.ci[{index}]", "a number") for index, bound in enumerate(ci))
        if low > high:
            raise UserError(f"{field}.ci must be {what}, not {ci!r}", field=f"{field}.ci")
    return checked
