"""`mlscope rerun ID`: reproducibility as a command. Re-submits exactly the request an evaluation
recorded, here or on a named system of the farm, and reports the diff of the two results with its
verdict, and every pin (model manifest, framework version, image, runner, system) that moved."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import click

from mlscope.cli.options import json_flag
from mlscope.cli.render import console, err_console, exit_code, note, print_json_line, short_id, warn
from mlscope.contract.errors import UserError

__all__ = ["rerun"]


@click.command()
@click.argument("evaluation_id", metavar="ID")
@click.option(
    "--on",
    "target",
    metavar="TARGET",
    help="Run it on the farm, on this capability or agent:<id> (through the API) [default: here, "
    "from the local store].",
)
@click.option(
    "--allow-changes",
    is_flag=True,
    help="Run even when the model's manifest changed since it was recorded (the diff then measures "
    "the change too).",
)
@click.option(
    "--threshold",
    type=float,
    default=0.02,
    show_default=True,
    help="The smallest relative difference the verdict calls a difference.",
)
@click.option("--wait-timeout", type=float, help="With --on: give up waiting after this many seconds.")
@json_flag("Print {recorded, rerun, changes, diff} as one JSON object.")
def rerun(
    evaluation_id: str,
    target: str | None,
    allow_changes: bool,
    threshold: float,
    wait_timeout: float | None,
    as_json: bool,
) -> None:
    """Run evaluation ID's recorded request again and say whether the result reproduced."""
    if target is None:
        recorded, result, diff = _rerun_here(evaluation_id, threshold, allow_changes, as_json)
    else:
        recorded, result, diff = _rerun_on(
            evaluation_id, target, threshold, wait_timeout, allow_changes, as_json
        )
    sys.exit(_report(recorded, result, diff, as_json))


def _rerun_here(
    evaluation_id: str, threshold: float, allow_changes: bool, as_json: bool
) -> tuple[Mapping[str, Any], Mapping[str, Any], dict[str, Any] | None]:
    from mlscope.analysis.diff_report import diff_evaluations
    from mlscope.analysis.rerun import rerun_request
    from mlscope.cli.run import evaluate_with_bars
    from mlscope.contract.settings import load_settings
    from mlscope.store import open_store
    from mlscope.workers.local import admit_all

    settings = load_settings()
    with open_store(settings.store_url) as store:
        recorded = store.get_evaluation(store.resolve_id(evaluation_id))
    document = rerun_request(recorded)
    model, framework = document.pop("model"), document.pop("framework")
    document.pop("target", None)
    _check_model_file(recorded, model)
    (admitted,) = admit_all(model, [framework], document, settings=settings)
    _check_manifest(recorded, admitted.manifest.sha256, allow_changes)
    # Admitted once, here: the manifest is checked before anything runs, and not admitted again.
    (result,) = evaluate_with_bars(model, [framework], document, as_json=as_json, admitted=[admitted])
    with open_store(settings.store_url) as store:
        diff = _diff_if_both_succeeded(
            recorded,
            result,
            lambda: diff_evaluations(
                store, recorded["id"], result["id"], threshold=threshold, allow_different=allow_changes
            ),
        )
    return recorded, result, diff


def _rerun_on(
    evaluation_id: str,
    target: str,
    threshold: float,
    wait_timeout: float | None,
    allow_changes: bool,
    as_json: bool,
) -> tuple[Mapping[str, Any], Mapping[str, Any], dict[str, Any] | None]:
    from mlscope.analysis.rerun import rerun_request
    from mlscope.cli.remote import api_client, follow

    client = api_client()
    recorded = client.evaluation(evaluation_id)
    answer = client.submit(rerun_request(recorded, target))
    for line in answer.get("warnings", []):
        warn(line)
    err_console.print(
        f"rerun of {short_id(recorded['id'])} queued as {short_id(answer['id'])} on {answer['queue']}"
    )
    (result,) = follow(client, [answer["id"]], wait_timeout, quiet=as_json)
    diff = _diff_if_both_succeeded(
        recorded,
        result,
        lambda: client.diff(
            recorded["id"], result["id"], threshold=threshold, allow_different=allow_changes or None
        ),
    )
    return recorded, result, diff


def _check_model_file(recorded: Mapping[str, Any], model: str) -> None:
    """Refuse, saying where it looked, a rerun whose recorded model file (or factory file) is gone."""
    from mlscope.registry.resolvers.forms import reference_path

    path = reference_path(model)
    if path is None or path.exists():
        return
    relative = "" if path.is_absolute() else f" (recorded as {model}, a path relative to this directory)"
    where = os.path.abspath(path)
    raise UserError(
        f"cannot rerun {short_id(recorded['id'])}: its model file is not at {where}{relative}", field="id"
    )


def _check_manifest(recorded: Mapping[str, Any], sha256_now: str, allow_changes: bool) -> None:
    """Refuse a rerun that would measure another model than the one recorded, unless allowed."""
    then = recorded["model"].get("manifest_sha256")
    if then and then != sha256_now and not allow_changes:
        raise UserError(
            f"the manifest of {recorded['model']['name']} changed since {short_id(recorded['id'])} was "
            f"recorded (sha256 {then[:12]}… then, {sha256_now[:12]}… now): a rerun would measure "
            "another model; pass --allow-changes to run it anyway",
            field="id",
        )


def _diff_if_both_succeeded(
    recorded: Mapping[str, Any], result: Mapping[str, Any], compute: Callable[[], dict[str, Any]]
) -> dict[str, Any] | None:
    """The diff of the rerun against the recorded result; None when either did not succeed. A diff
    with no point to compare (every point invalid on one side) is reported as such, not an error:
    the rerun itself ran."""
    if not recorded["status"] == result["status"] == "succeeded":
        return None
    try:
        return compute()
    except UserError as exc:
        return {"points": [], "refused": [], "unmatched": [], "error": str(exc)}


def _report(
    recorded: Mapping[str, Any], result: Mapping[str, Any], diff: dict[str, Any] | None, as_json: bool
) -> int:
    from mlscope.analysis.rerun import pin_changes

    changes = pin_changes(recorded, result)
    if as_json:
        print_json_line({"recorded": recorded["id"], "rerun": result["id"], "changes": changes, "diff": diff})
        return exit_code([result])
    console.print(
        f"rerun of {short_id(recorded['id'])} ({recorded['model']['name']} on "
        f"{recorded['framework']['name']}): {short_id(result['id'])} {result['status']}"
    )
    for change in changes:
        warn(f"{change['pin']} differs: {change['recorded']} recorded, {change['now']} now")
    if not changes:
        note("same model manifest, framework version, runner, device and system as recorded")
    if diff is None:
        note("no diff: both evaluations must have succeeded")
    else:
        _print_diff(diff)
    return exit_code([result])


def _print_diff(diff: dict[str, Any]) -> None:
    from mlscope.cli.diff import print_report

    if diff.get("error"):
        note(f"no diff: {diff['error']}")
    else:
        print_report(diff)
