"""`mlscope history MODEL`: a series' points over time with its change points marked, or, when the
filters match several series, the list of them. The change-point options and the way a series and a
change point are printed are shared with `mlscope regressions` (regressions.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

import click

from mlscope.cli.options import json_flag
from mlscope.cli.render import Column, console, new_table, note, print_json_lines, short_id
from mlscope.contract.errors import UserError
from mlscope.contract.series import DEFAULT_HISTORY_POINTS, SERIES_KEY_FIELDS
from mlscope.contract.settings import load_settings

__all__ = ["change_text", "detection_options", "history", "parse_moment", "series_label"]

F = TypeVar("F", bound=Callable[..., Any])

# The option that narrows each part of a series key, for the hint when several series match.
_KEY_OPTIONS = {
    "model": "MODEL",
    "manifest_sha256": "--manifest",
    "framework": "--framework",
    "framework_version": "--framework-version",
    "system_id": "--system",
    "machine_id": "--system",
    "stack_id": "--stack",
    "device": "--device",
    "scenario": "--scenario",
    "batch_size": "--batch-size",
}


def parse_moment(text: str | None, option: str) -> datetime | None:
    """An ISO 8601 date or time (`2026-11-24`, `2026-11-24T18:00+01:00`) as an aware datetime; one
    without a time zone is UTC.

    Raises:
        UserError: naming the option, when `text` is neither.
    """
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UserError(
            f"{option} {text!r} is not a date or time: expected ISO 8601, e.g. 2026-11-24 or "
            "2026-11-24T18:00+01:00 (UTC when no zone is given)",
            field=option.lstrip("-").replace("-", "_"),
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def detection_options(command: F) -> F:
    """`--significance`, `--min-segment` and `--valid-only` (the parameters `significance`,
    `min_segment`, `valid_only`)."""
    command = click.option(
        "--valid-only",
        is_flag=True,
        help="Look for change points among valid points only (a busy machine's can pass for a shift).",
    )(command)
    command = click.option(
        "--min-segment",
        type=int,
        default=5,
        show_default=True,
        help="The fewest points either side of a change point.",
    )(command)
    return click.option(
        "--significance",
        type=float,
        default=0.01,  # DetectionSettings.significance
        show_default=True,
        help="Keep a change point when its permutation p-value is at most this.",
    )(command)


def series_label(key: dict[str, Any]) -> str:
    """One line naming a series: `resnet18 (manifest 3f2a…) on onnxruntime 1.17.0, sys-1 cpu,
    single_stream batch 1`, the system one it was measured under; or, without one, its machine and
    stack ids' starts (`machine 1a2b3c4d stack 5e6f7a8b cpu`)."""
    manifest = f" (manifest {key['manifest_sha256'][:12]})" if key.get("manifest_sha256") else ""
    version = f" {key['framework_version']}" if key.get("framework_version") else ""
    where = key.get("system_id") or (
        f"machine {(key.get('machine_id') or '-')[:8]} stack {(key.get('stack_id') or '-')[:8]}"
    )
    return (
        f"{key['model']}{manifest} on {key['framework']}{version}, {where} "
        f"{key['device']}, {key['scenario']} batch {key['batch_size']}"
    )


def change_text(change_point: dict[str, Any]) -> str:
    """`+3.1% (confidence 99.5%)`: a change point's shift and how sure it is."""
    return f"{change_point['shift_pct']:+.1f}% (confidence {change_point['confidence'] * 100:.1f}%)"


@click.command()
@click.argument("model")
@click.option("-f", "--framework", help="The framework's name.")
@click.option("--framework-version", help="Only this framework version.")
@click.option("--manifest", metavar="SHA256", help="Only this manifest (its hash, or a prefix of it).")
@click.option(
    "--system",
    "system_id",
    metavar="ID",
    help="Only the machine and software stack of this system (its id or a unique prefix), or only this "
    "machine (a prefix of its id).",
)
@click.option("--stack", metavar="ID", help="Only this software stack (a prefix of its id).")
@click.option("--device", help="Only this device (cpu, cuda:0, ...).")
@click.option("--scenario", help="Only this scenario (single_stream, offline, ...).")
@click.option("-b", "--batch-size", type=int, help="Only this batch size.")
@click.option("--since", metavar="DATE", help="Only points created at or after (ISO 8601; UTC if no zone).")
@click.option("--until", metavar="DATE", help="Only points created before.")
@click.option(
    "-n", "--limit", type=int, default=DEFAULT_HISTORY_POINTS, show_default=True, help="The latest this many."
)
@detection_options
@json_flag("Print the series (points, change points) as one JSON document.")
def history(
    model: str,
    framework: str | None,
    framework_version: str | None,
    manifest: str | None,
    system_id: str | None,
    stack: str | None,
    device: str | None,
    scenario: str | None,
    batch_size: int | None,
    since: str | None,
    until: str | None,
    limit: int,
    significance: float,
    min_segment: int,
    valid_only: bool,
    as_json: bool,
) -> None:
    """A model's performance over time: one series' points, oldest first, with the change points
    where it shifted (by how much, how surely).

    A series is one model manifest on one framework version, machine, software stack and device, at
    one scenario and batch size, whichever hosts, agents or containers measured it (docs/history.md).
    When the options match several, they are listed with the options that tell them apart.
    """
    from mlscope.analysis.changepoints import DetectionSettings
    from mlscope.analysis.history import read_series
    from mlscope.store import open_store
    from mlscope.store.errors import SystemNotFound

    settings = DetectionSettings(significance=significance, min_segment=min_segment, valid_only=valid_only)
    bounds: dict[str, Any] = {
        "since": parse_moment(since, "--since"),
        "until": parse_moment(until, "--until"),
    }
    filters: dict[str, Any] = {
        "model": model,
        "framework": framework,
        "framework_version": framework_version,
        "system_id": system_id,
        "device": device,
        "scenario": scenario,
        "batch_size": batch_size,
    }
    prefixes = {"manifest_sha256": manifest, "stack_id": stack}
    with open_store(load_settings().store_url) as store:
        if system_id:
            try:
                filters["system_id"] = store.resolve_system_id(system_id)
            except SystemNotFound:
                # Not a system's: a machine id's prefix, if any series is on such a machine.
                filters["system_id"] = None
                prefixes["machine_id"] = system_id
        matches = [
            series
            for series in store.history_series(**filters, **bounds)
            if all((series[name] or "").startswith(prefix) for name, prefix in prefixes.items() if prefix)
        ]
        if not matches:
            if "machine_id" in prefixes:
                raise SystemNotFound(system_id or "")
            raise UserError(f"no stored series {_asked(filters, manifest)}", field="model")
        if len(matches) > 1:
            _print_matches(matches, as_json)
            return
        key = {name: matches[0][name] for name in SERIES_KEY_FIELDS}
        found = read_series(store, **key, **bounds, limit=limit, settings=settings)
    # With a system id it was measured under, as the series' key had before machine and stack ids.
    key = {**key, "system_id": matches[0]["system_id"]}
    if as_json:
        print(json.dumps({"series": key, **found}, indent=2))
        return
    _print_series(key, found)


_MATCH_COLUMNS: tuple[Column, ...] = (
    "model",
    "manifest",
    "framework",
    "version",
    "system",
    "machine",
    "stack",
    "device",
    "scenario",
    ("batch", "right"),
    ("points", "right"),
    "first",
    "last",
)
_POINT_COLUMNS: tuple[Column, ...] = (
    "created",
    "evaluation",
    ("median ms", "right"),
    ("95% CI ms", "right"),
    ("p99 ms", "right"),
    "valid",
    "change point",
)


def _asked(filters: dict[str, Any], manifest: str | None) -> str:
    """`of MODEL with --framework F, --batch-size 8`: what the user asked for."""
    given = {**filters, "manifest_sha256": manifest}
    options = [f"{_KEY_OPTIONS[n]} {v}" for n, v in given.items() if v is not None and n != "model"]
    return f"of {filters['model']}" + (f" with {', '.join(options)}" if options else "")


def _print_matches(matches: list[dict[str, Any]], as_json: bool) -> None:
    differing = [name for name in SERIES_KEY_FIELDS if len({m[name] for m in matches}) > 1]
    hint = f"{len(matches)} series match: name one with {', '.join(_KEY_OPTIONS[n] for n in differing)}"
    if as_json:
        print_json_lines(matches)
        note(hint)
        return
    table = new_table(f"{len(matches)} series", _MATCH_COLUMNS)
    for series in matches:
        table.add_row(
            series["model"],
            (series["manifest_sha256"] or "-")[:12],
            series["framework"],
            series["framework_version"] or "-",
            series["system_id"] or "-",
            (series["machine_id"] or "-")[:12],
            (series["stack_id"] or "-")[:12],
            series["device"],
            series["scenario"],
            str(series["batch_size"]),
            str(series["points"]),
            series["first_at"][:19].replace("T", " "),
            series["last_at"][:19].replace("T", " "),
        )
    console.print(table)
    note(hint)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}" if value < 10 else f"{value:.2f}"


def _print_series(key: dict[str, Any], found: dict[str, Any]) -> None:
    points, change_points = found["points"], found["change_points"] or []
    starts = {change["index"]: change for change in change_points}
    table = new_table(f"{series_label(key)}: {len(points)} point(s)", _POINT_COLUMNS)
    for index, point in enumerate(points):
        low, high = point["ci_low_ms"], point["ci_high_ms"]
        change = starts.get(index)
        table.add_row(
            point["created_at"][:19].replace("T", " "),
            short_id(point["evaluation_id"]),
            _ms(point["median_ms"]),
            "-" if low is None or high is None else f"{_ms(low)}–{_ms(high)}",
            _ms(point["p99_ms"]),
            "-" if point["valid"] is None else "yes" if point["valid"] else "[red]NO[/red]",
            f"[bold]▶ {change_text(change)}[/bold]" if change else "",
        )
    console.print(table)
    detection = found["detection"]
    if found["change_points"] is None:
        note(f"no change points looked for: {detection['note']}")
        return
    console.print(
        f"{len(change_points)} change point(s) at significance {detection['significance']} "
        f"({detection['method']}, segments of at least {detection['min_segment']} points)"
    )
    for change in change_points:
        console.print(
            f"  from {change['created_at'][:19].replace('T', ' ')} ({short_id(change['evaluation_id'])}): "
            f"{_ms(change['median_before_ms'])} → {_ms(change['median_after_ms'])} ms, {change_text(change)}"
        )
