"""The comparison table: which succeeded evaluations it draws on, its columns, one row as every
backend formats it, and the whole table built from evaluations in the public shape (the default a
backend without a query language of its own serves).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.result import parity_failure
from mlscope.contract.workload import display_name as workload_display_name
from mlscope.contract.workload import workload_key

__all__ = [
    "COMPARE_COLUMNS",
    "CompareFilter",
    "check_batch_size",
    "compare_row",
    "compare_rows",
    "workload_view",
]


@dataclass(frozen=True)
class CompareFilter:
    """Which succeeded evaluations a comparison draws on; an empty tuple means "any"."""

    ids: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    system_ids: tuple[str, ...] = ()
    batch_sizes: tuple[int, ...] = ()
    scenarios: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None


# The columns of a comparison row, in the order tables and CSV files show them.
# display_name: the model with its options (contract.workload.display_name); workload_key: the
# workload the row measured (contract.workload.workload_key), one row per workload.
COMPARE_COLUMNS: tuple[str, ...] = (
    "model",
    "display_name",
    "framework",
    "framework_version",
    "system_id",
    "hostname",
    "agent_id",
    "instance_type",
    "cpu",
    "device",
    "scenario",
    "batch_size",
    "median_ms",
    "p90_ms",
    "p99_ms",
    "ci_low_ms",
    "ci_high_ms",
    "throughput",
    "count",
    "target_qps",
    "achieved_qps",
    "max_qps",
    "price_per_hour",
    "cost_per_1k",
    "cost_ci_low",
    "cost_ci_high",
    "valid",
    "reasons",
    "top1",
    "top5",
    "parity",
    "parity_against",
    "runs",
    "workload_key",
    "evaluation_id",
    "finished_at",
)


def workload_view(
    model_name: str,
    model_version: str | None,
    request: Mapping[str, Any] | None,
    manifest: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """What contract.workload reads of an evaluation (its model, request and manifest), from a
    backend's stored fields: display_name and workload_key of it are what the stores keep."""
    return {
        "model": {"name": model_name, "version": model_version},
        "request": dict(request or {}),
        "manifest": dict(manifest or {}),
    }


def check_batch_size(value: Any) -> int:
    """`value` if it is a batch size, an integer (not a bool) of at least 1.

    Raises:
        UserError: naming "batch_sizes" otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(
            f"batch_sizes: {value!r} is not a batch size: expected an integer ≥ 1", field="batch_sizes"
        )
    return value


def compare_row(
    *,
    model: str,
    display_name: str,
    workload_key: str,
    framework: str,
    framework_version: str | None,
    system_id: str | None,
    system: Mapping[str, Any],
    device: str,
    measurement: Mapping[str, Any],
    runs: int,
    evaluation_id: str,
    finished_at: str | None,
    accuracy: Mapping[str, Any] | None = None,
    parity: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One row of the comparison table, its keys in COMPARE_COLUMNS order.

    A row is valid when its measurement is and the evaluation's parity was not "different": a
    different parity makes it invalid, with the reason "parity different from <against>".

    Args:
        model, framework, framework_version, device: the evaluation's.
        display_name, workload_key: the evaluation's model with its options, and the workload the
            measurement measured (contract.workload).
        system_id, system: the id and the description of the system it ran on ({} when unknown).
        measurement: {"scenario", "batch_size", "latency_ms", "throughput", "validity"} in the public
            shape, and its `load` section where it has one (or as much as a row shows of it:
            {"target_qps", "achieved_qps", "search": {"max_qps"}}); a row's target_qps, achieved_qps
            and max_qps are None without one. Likewise its `cost` section ({"price_per_hour",
            "per_1k_inferences", "ci"}): price_per_hour, cost_per_1k and the cost interval are None
            without one.
        runs: how many succeeded evaluations share the row's key (its workload_key among them).
        evaluation_id, finished_at: the evaluation the figures are from, and when it finished (ISO 8601).
        accuracy: the evaluation's accuracy section, or as much of it as a row shows ({"top1",
            "top5"}); None or empty when it has none.
        parity: the evaluation's parity section, or as much of it as a row shows ({"verdict",
            "against"}); None or empty when it has none.
    """
    latency = measurement["latency_ms"]
    validity = measurement.get("validity") or {}
    ci = latency.get("median_ci") or [None, None]
    accuracy, parity = accuracy or {}, parity or {}
    load = measurement.get("load") or {}
    cost = measurement.get("cost") or {}
    cost_ci = cost.get("ci") or [None, None]
    valid, reasons = validity.get("valid"), list(validity.get("reasons") or [])
    failure = parity_failure(parity)
    if failure is not None:
        valid = False
        reasons.append(failure)
    return {
        "model": model,
        "display_name": display_name,
        "framework": framework,
        "framework_version": framework_version,
        "system_id": system_id,
        "hostname": system.get("hostname"),
        "agent_id": (system.get("agent") or {}).get("id"),
        "instance_type": system.get("instance_type"),
        "cpu": (system.get("cpu") or {}).get("model"),
        "device": device,
        "scenario": measurement["scenario"],
        "batch_size": measurement["batch_size"],
        "median_ms": latency.get("median"),
        "p90_ms": latency.get("p90"),
        "p99_ms": latency.get("p99"),
        "ci_low_ms": ci[0],
        "ci_high_ms": ci[1],
        "throughput": measurement.get("throughput"),
        "count": latency.get("count"),
        "target_qps": load.get("target_qps"),
        "achieved_qps": load.get("achieved_qps"),
        "max_qps": (load.get("search") or {}).get("max_qps"),
        "price_per_hour": cost.get("price_per_hour"),
        "cost_per_1k": cost.get("per_1k_inferences"),
        "cost_ci_low": cost_ci[0],
        "cost_ci_high": cost_ci[1],
        "valid": valid,
        "reasons": reasons,
        "top1": accuracy.get("top1"),
        "top5": accuracy.get("top5"),
        "parity": parity.get("verdict"),
        "parity_against": parity.get("against"),
        "runs": runs,
        "workload_key": workload_key,
        "evaluation_id": evaluation_id,
        "finished_at": finished_at,
    }


def compare_rows(evaluations: Sequence[Mapping[str, Any]], where: CompareFilter) -> list[dict[str, Any]]:
    """The comparison table from succeeded evaluations in the public shape.

    One row per (model, framework, system, device, scenario, batch size, workload key): the most
    recently finished evaluation's figures, with `runs` counting how many succeeded evaluations share
    the key; two workloads of one model (other `--config`, input shapes, rates, token counts) are two
    rows. Rows are ordered by model, display name, scenario, batch size, then median latency, so the
    fastest of a group comes first (ties: framework, system, device, workload key).
    """
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    runs: dict[tuple[Any, ...], int] = {}
    for evaluation in evaluations:
        system = evaluation.get("system") or {}
        for m in evaluation["measurements"]:
            if where.batch_sizes and m["batch_size"] not in where.batch_sizes:
                continue
            if where.scenarios and m["scenario"] not in where.scenarios:
                continue
            workload = workload_key(evaluation, m["scenario"])
            key = (
                evaluation["model"]["name"],
                evaluation["framework"]["name"],
                system.get("id"),
                evaluation["device"],
                m["scenario"],
                m["batch_size"],
                workload,
            )
            runs[key] = runs.get(key, 0) + 1
            row = compare_row(
                model=key[0],
                display_name=workload_display_name(evaluation),
                workload_key=workload,
                framework=key[1],
                framework_version=evaluation["framework"].get("version"),
                system_id=key[2],
                system=system,
                device=key[3],
                measurement=m,
                runs=0,
                evaluation_id=evaluation["id"],
                finished_at=evaluation["finished_at"],
                accuracy=evaluation.get("accuracy"),
                parity=evaluation.get("parity"),
            )
            held = latest.get(key)
            if held is None or (row["finished_at"] or "", row["evaluation_id"]) > (
                held["finished_at"] or "",
                held["evaluation_id"],
            ):
                latest[key] = row
    rows = []
    for key, row in latest.items():
        row["runs"] = runs[key]
        rows.append(row)
    inf = float("inf")
    rows.sort(
        key=lambda r: (
            r["model"],
            r["display_name"],
            r["scenario"],
            r["batch_size"],
            r["median_ms"] if r["median_ms"] is not None else inf,
            r["framework"],
            r["system_id"] or "",
            r["device"],
            r["workload_key"],
        )
    )
    return rows
