"""`mlscope submit`: queue one evaluation for the farm through the API, and perhaps wait for it."""

from __future__ import annotations

import sys
from typing import Any

import click

from mlscope.cli.options import evaluation_options, json_flag, request_fields
from mlscope.cli.remote import api_client, follow, upload_local_dataset, upload_local_models
from mlscope.cli.render import (
    console,
    err_console,
    exit_code,
    measurement_table,
    note,
    print_json_line,
    print_sections,
    ran_line,
    validity_notes,
    warn,
)

__all__ = ["submit", "submit_command"]


@click.command()
@click.argument("model")
@click.option("-f", "--framework", required=True, help="The framework to run MODEL on.")
@click.option(
    "--on",
    "target",
    metavar="TARGET",
    help="A capability (cpu, cpu.x86_64, gpu.nvidia) or agent:<id> [default: cpu, or gpu for cuda].",
)
@evaluation_options
@click.option("--wait", is_flag=True, help="Wait for the result and print it.")
@click.option("--wait-timeout", type=float, help="With --wait: give up after this many seconds.")
@json_flag("Print the answer (or, with --wait, the result) as JSON.")
def submit(
    model: str,
    framework: str,
    target: str | None,
    wait: bool,
    wait_timeout: float | None,
    as_json: bool,
    **fields: Any,
) -> None:
    """Queue MODEL on FRAMEWORK for the farm, through the API. An .onnx file is uploaded first and
    named by its sha256:<hex> reference."""
    document = {"model": model, "framework": framework, **request_fields(**fields)}
    if target:
        document["target"] = target
    sys.exit(submit_command(document, wait=wait, timeout_s=wait_timeout, as_json=as_json))


def submit_command(document: dict[str, Any], *, wait: bool, timeout_s: float | None, as_json: bool) -> int:
    """Returns: the exit code (0 queued, or with `wait` succeeded; 1 the evaluation did not succeed)."""
    client = api_client()
    (model,) = upload_local_models(client, [document["model"]])
    answer = client.submit({**upload_local_dataset(client, document), "model": model})
    for warning in answer.get("warnings", []):
        warn(warning)
    if not wait:
        if as_json:
            print_json_line(answer)
        else:
            console.print(f"{answer['id']} queued on {answer['queue']}")
        return 0
    (result,) = follow(client, [answer["id"]], timeout_s, quiet=as_json)
    if as_json:
        print_json_line(result)
    else:
        console.print(measurement_table([result]))
        if result.get("started_at"):
            console.print(ran_line(result), highlight=False)
        for line in validity_notes([result]):
            note(line)
        print_sections(result)
        if result["error"]:
            err_console.print(f"[red]{result['status']}[/red]: {result['error']['message']}")
    return exit_code([result])
