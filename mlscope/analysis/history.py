"""History series read with their change points, the regressions since a date, and one result judged
against its series: what `mlscope history`, `mlscope regressions`, `/api/v1/history` and
`mlscope diff --against-history` show.

A series (records.history) is keyed by model + manifest hash, framework + version, machine + software
stack + device (contract.system_ids), scenario and batch size; its values are the points' medians
(latency, ms), so "worse" is "up". The store reads the points; the change points are computed here
(changepoints.py), over at most the latest DEFAULT_HISTORY_POINTS of a series.

A series' key does not hold every setting that shapes the workload (load and generation settings,
predictor options: contract.workload), so a regression compares the run before its first change
point with the series' latest one, and one between different workloads is refused (listed apart,
naming each difference) unless allowed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

import numpy as np

from mlscope.analysis.changepoints import ChangePoint, DetectionSettings, detect_change_points, points_needed
from mlscope.contract.errors import UserError
from mlscope.contract.system_ids import system_ids
from mlscope.contract.workload import display_name, workload_differences, workload_key
from mlscope.store import Store
from mlscope.store.records.history import DEFAULT_HISTORY_POINTS, SERIES_KEY_FIELDS

__all__ = [
    "DEFAULT_THRESHOLD",
    "VERDICTS",
    "against_history",
    "change_point_dict",
    "read_series",
    "regressions",
]

METHOD = "e-divisive means, permutation test"
# The relative change a verdict or a regression must reach to be called one: 2%.
DEFAULT_THRESHOLD = 0.02
VERDICTS = ("faster", "slower", "no detectable difference", "series too short")
# The two-sided 95% normal quantile of a verdict's interval.
_Z95 = 1.959964


def read_series(
    store: Store,
    *,
    model: str,
    framework: str,
    scenario: str = "single_stream",
    batch_size: int = 1,
    manifest_sha256: str | None = None,
    framework_version: str | None = None,
    system_id: str | None = None,
    device: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = DEFAULT_HISTORY_POINTS,
    settings: DetectionSettings | None = None,
    machine_id: str | None = None,
    stack_id: str | None = None,
) -> dict[str, Any]:
    """A history series (Store.history, same arguments and errors) with its change points.

    Returns:
        {"points": [...], "change_points": [change_point_dict...] or None, "detection": {"method",
        the settings, "points" (how many were searched: with a median, and valid when
        settings.valid_only), "note"}}. change_points is None, with a note
        saying why, when the series is too short (how many more points it needs) or when the points
        belong to several series (the filter named no manifest, framework version, system, machine,
        stack or device and they differ): a change between series is not a change point.
    """
    settings = settings or DetectionSettings()
    points = store.history(
        model=model,
        framework=framework,
        scenario=scenario,
        batch_size=batch_size,
        manifest_sha256=manifest_sha256,
        framework_version=framework_version,
        system_id=system_id,
        machine_id=machine_id,
        stack_id=stack_id,
        device=device,
        since=since,
        until=until,
        limit=limit,
    )
    change_points, note = _change_points_of(points, settings)
    measured = len(_usable(points, settings))
    return {
        "points": points,
        "change_points": change_points,
        "detection": {"method": METHOD, **asdict(settings), "points": measured, "note": note},
    }


def change_point_dict(change_point: ChangePoint, point: dict[str, Any]) -> dict[str, Any]:
    """A change point as the API and `--json` give it: where (the first point after the shift: its
    index among the series' points, evaluation and time), by how much, and how surely."""
    return {
        "index": change_point.index,
        "evaluation_id": point["evaluation_id"],
        "created_at": point["created_at"],
        "median_before_ms": change_point.median_before,
        "median_after_ms": change_point.median_after,
        "ratio": change_point.ratio,
        "shift_pct": change_point.shift_pct,
        "confidence": change_point.confidence,
        "p_value": change_point.p_value,
    }


def _change_points_of(
    points: Sequence[dict[str, Any]], settings: DetectionSettings
) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The change points of the points' medians (`_usable` points only), indexed among `points`; or
    None and the reason there are none to look for."""
    keys = {_point_key(point) for point in points}
    if len(keys) > 1:
        return None, (
            f"the points belong to {len(keys)} series (manifest, framework version, machine, stack or "
            "device differ): name one to look for change points"
        )
    positions = [i for i, point in enumerate(points) if _searched(point, settings)]
    try:
        found = detect_change_points([points[i]["median_ms"] for i in positions], settings)
    except UserError as too_short:
        return None, str(too_short)
    return [
        change_point_dict(
            ChangePoint(positions[c.index], c.median_before, c.median_after, c.p_value),
            points[positions[c.index]],
        )
        for c in found
    ], None


def _searched(point: dict[str, Any], settings: DetectionSettings) -> bool:
    """Whether change points are looked for among this point: it has a median, and is valid when
    settings.valid_only."""
    return point["median_ms"] is not None and (bool(point["valid"]) or not settings.valid_only)


def _usable(points: Sequence[dict[str, Any]], settings: DetectionSettings) -> list[dict[str, Any]]:
    """The points `_searched` keeps, in order."""
    return [point for point in points if _searched(point, settings)]


def _point_key(point: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(
        point[name] for name in ("manifest_sha256", "framework_version", "machine_id", "stack_id", "device")
    )


def _check_threshold(threshold: Any) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold < 1:
        raise UserError(
            f"threshold={threshold!r} must be a fraction from 0 to 1 (0.02 is 2%)", field="threshold"
        )
    return float(threshold)


def _whole_series(store: Store, key: dict[str, Any], *, until: datetime | None) -> list[dict[str, Any]]:
    """The latest points (up to DEFAULT_HISTORY_POINTS) of the series `key` names exactly: a key value
    that is None (no manifest hash recorded, say) matches only None, not any."""
    points = store.history(**{name: key[name] for name in SERIES_KEY_FIELDS}, until=until)
    wanted = _point_key(key)
    return [point for point in points if _point_key(point) == wanted]


def regressions(
    store: Store,
    *,
    since: datetime,
    until: datetime | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    model: str | None = None,
    framework: str | None = None,
    system_id: str | None = None,
    settings: DetectionSettings | None = None,
    allow_different: bool = False,
) -> dict[str, Any]:
    """The series that shifted for the worse since `since`: every series with points from `since`
    (to `until`), read whole (its points before `since` are the baseline), whose change points at or
    after `since` together raised the median latency by more than `threshold`: the median of its
    latest segment over that of the segment before its first change point since then. A series that
    rose and fell back is not one.

    Args:
        since, until: aware datetimes; since inclusive, until exclusive.
        threshold: the smallest rise counted, as a fraction (0.02: 2%).
        model, framework, system_id: only series of these; any when None.
        settings: how change points are looked for.
        allow_different: count a rise whose runs before and after measured different workloads
            (`contract.workload`) as a regression, its differences listed, instead of refusing it.

    Returns:
        {"since", "until", "threshold", "series" (how many were examined), "too_short": [series keys
        with "points" and "needed"], "regressions": [{"series": key, "display_name" (the model with
        its options), "median_before_ms", "median_after_ms", "ratio", "shift_pct", "change_points":
        [those since `since`], "points", "differences": [workload differences between the run
        before the first change point and the latest; [] unless allowed]}], "refused": [the same
        for rises between different workloads, not counted as regressions; [] when allowed]} with
        the regressions largest shift first.

    Raises:
        UserError: naming an invalid argument.
    """
    if since is None:
        raise UserError("since is required: regressions since when?", field="since")
    threshold = _check_threshold(threshold)
    settings = settings or DetectionSettings()
    examined = store.history_series(
        model=model, framework=framework, system_id=system_id, since=since, until=until
    )
    found: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    too_short: list[dict[str, Any]] = []
    for summary in examined:
        # With a system id the series was measured under, as before machine and stack ids keyed series.
        key = {**{name: summary[name] for name in SERIES_KEY_FIELDS}, "system_id": summary.get("system_id")}
        points = _whole_series(store, key, until=until)
        change_points, _ = _change_points_of(points, settings)
        if change_points is None:
            usable = len(_usable(points, settings))
            too_short.append({**key, "points": usable, "needed": max(points_needed(settings) - usable, 1)})
            continue
        recent = [c for c in change_points if datetime.fromisoformat(c["created_at"]) >= since]
        if recent:
            before, after = recent[0]["median_before_ms"], recent[-1]["median_after_ms"]
            if after / before > 1 + threshold:
                name, differences = _workloads(store, points, recent[0]["index"], key["scenario"])
                (refused if differences and not allow_different else found).append(
                    {
                        "series": key,
                        "display_name": name,
                        "median_before_ms": before,
                        "median_after_ms": after,
                        "ratio": after / before,
                        "shift_pct": (after / before - 1) * 100,
                        "change_points": recent,
                        "points": len(points),
                        "differences": differences,
                    }
                )
    found.sort(key=lambda regression: -regression["ratio"])
    refused.sort(key=lambda regression: -regression["ratio"])
    return {
        "since": since.isoformat(),
        "until": None if until is None else until.isoformat(),
        "threshold": threshold,
        "series": len(examined),
        "too_short": too_short,
        "regressions": found,
        "refused": refused,
    }


def _workloads(
    store: Store, points: Sequence[dict[str, Any]], index: int, scenario: str
) -> tuple[str, list[dict[str, Any]]]:
    """The display name of the series' latest run, and how the run just before the change point at
    `index` and the latest one measured different workloads ([] when alike)."""
    latest = store.get_evaluation(points[-1]["evaluation_id"])
    before = store.get_evaluation(points[max(index - 1, 0)]["evaluation_id"])
    differences = workload_differences(before, latest, scenarios={scenario})
    return display_name(latest), [difference.to_dict("before", "now") for difference in differences]


def against_history(
    store: Store,
    evaluation_id: str,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    settings: DetectionSettings | None = None,
) -> list[dict[str, Any]]:
    """One stored result judged against its series: per measurement, the ratio of its median to the
    median of the series' latest segment (its points before this result, after their last change
    point), with a 95% interval and a verdict. Only the series' points of the same workload
    (contract.workload.workload_key: load and generation settings, model and predictor options) are
    judged against: a run at another rate or with other options is not a baseline, and how many were
    left out is said.

    The interval is the ratio's under the segment's run-to-run spread (1.4826 × the median absolute
    deviation of the log medians) plus the uncertainty of the segment's median: what one more run
    like the segment's would give. A single run's own median CI is far narrower than the run-to-run
    spread, so it is not used.

    Args:
        evaluation_id: a succeeded evaluation's id, or a unique prefix of it.
        threshold: the smallest change called faster or slower, as a fraction (0.02: 2%).
        settings: how change points are looked for; its min_segment is also the fewest points a
            segment needs for a verdict.

    Returns:
        Per measurement with a median, in the result's order: {"scenario", "batch_size",
        "median_ms", "verdict" (one of VERDICTS), "ratio", "ci" ([low, high], None with the ratio
        when the series is too short), "segment": {"points", "median_ms", "since" (its first point's
        created_at), "change_point" (the last one, or None)}, "needed" (the points the series
        lacks for a verdict, 0 when it has enough), "other_workloads" (the series' points left out
        for measuring another workload), "threshold"}. "faster"/"slower" when the
        interval excludes 1 and the change reaches the threshold; else "no detectable difference".

    Raises:
        EvaluationNotFound, AmbiguousEvaluationId: as Store.get_evaluation.
        UserError: the evaluation did not succeed (it has no points); an invalid threshold.
    """
    threshold = _check_threshold(threshold)
    settings = settings or DetectionSettings()
    result = store.get_evaluation(evaluation_id)
    if result["status"] != "succeeded":
        raise UserError(
            f"evaluation {result['id']} is {result['status']}: only a succeeded result can be judged",
            field="evaluation_id",
        )
    created_at = datetime.fromisoformat(result["created_at"])
    judged = []
    for measurement in result["measurements"]:
        median = measurement["latency_ms"].get("median")
        if median is None:
            continue
        key = _result_key(result, measurement)
        series = _whole_series(store, key, until=created_at)
        wanted = workload_key(result, measurement["scenario"])
        alike = [point for point in series if point.get("workload_key") == wanted]
        points = _usable(alike, settings)
        judged.append(
            {
                "scenario": measurement["scenario"],
                "batch_size": measurement["batch_size"],
                "median_ms": median,
                **_judged(median, points, threshold, settings),
                "other_workloads": len(series) - len(alike),
                "threshold": threshold,
            }
        )
    return judged


def _result_key(result: Mapping[str, Any], measurement: Mapping[str, Any]) -> dict[str, Any]:
    system = result.get("system")
    machine_id, stack_id = system_ids(system, result["framework"]) if system else (None, None)
    return {
        "model": result["model"]["name"],
        "manifest_sha256": result["model"].get("manifest_sha256"),
        "framework": result["framework"]["name"],
        "framework_version": result["framework"].get("version"),
        "machine_id": machine_id,
        "stack_id": stack_id,
        "device": result["device"],
        "scenario": measurement["scenario"],
        "batch_size": measurement["batch_size"],
    }


def _judged(
    median: float, points: list[dict[str, Any]], threshold: float, settings: DetectionSettings
) -> dict[str, Any]:
    """The verdict on `median` against the latest segment of `points` (each with a median)."""
    change_points, _ = _change_points_of(points, settings)
    last = change_points[-1] if change_points else None
    segment = points[last["index"] :] if last else points
    described = {
        "points": len(segment),
        "median_ms": float(np.median([p["median_ms"] for p in segment])) if segment else None,
        "since": segment[0]["created_at"] if segment else None,
        "change_point": last,
    }
    if len(segment) < settings.min_segment:
        return {
            "verdict": "series too short",
            "ratio": None,
            "ci": None,
            "segment": described,
            "needed": settings.min_segment - len(segment),
        }
    ratio, low, high = _ratio_interval(median, [p["median_ms"] for p in segment])
    if low > 1 and ratio - 1 >= threshold:
        verdict = "slower"
    elif high < 1 and 1 - ratio >= threshold:
        verdict = "faster"
    else:
        verdict = "no detectable difference"
    return {"verdict": verdict, "ratio": ratio, "ci": [low, high], "segment": described, "needed": 0}


def _ratio_interval(median: float, segment: Sequence[float]) -> tuple[float, float, float]:
    """median / the segment's median, and its 95% interval on the log scale: the run-to-run spread
    (robust: 1.4826 × MAD of the logs) and the segment median's own (≈ √(π/2k) of it) combined."""
    logs = np.log(np.asarray(segment, dtype=float))
    spread = 1.4826 * float(np.median(np.abs(logs - np.median(logs))))
    width = _Z95 * spread * math.sqrt(1 + math.pi / (2 * len(logs)))
    ratio = median / float(np.median(segment))
    return ratio, ratio * math.exp(-width), ratio * math.exp(width)
