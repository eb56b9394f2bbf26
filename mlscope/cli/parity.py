"""`mlscope parity`: do the frameworks give the same answers? What a user runs after converting a model:
`mlscope parity ./model.onnx --against ./net.py:make_model` compares the export with its source.

Exit code 0 when every framework's outputs are the same as the reference's (the first framework's)
within the tolerance, 1 when one differs or could not run, 2 for a mistake in the command.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from mlscope.cli.options import json_flag, model_options, model_options_document, split_csv
from mlscope.cli.render import console, err_console, new_table, print_json_line
from mlscope.contract.errors import UserError
from mlscope.contract.events import PredictorEvent
from mlscope.contract.settings import load_settings

__all__ = ["parity"]

_DEFAULT_SAMPLES = 64


@click.command()
@click.argument("model")
@click.option(
    "-f",
    "--frameworks",
    metavar="NAMES",
    help="Comma-separated frameworks, the reference first [default: every installed one with a manifest "
    "for MODEL, in the frameworks' order].",
)
@click.option(
    "--dataset",
    metavar="NAME|DIR",
    help="Compare on this dataset's samples [default: seeded synthetic inputs].",
)
@click.option("--limit", type=int, metavar="N", help="Use only the dataset's first N samples.")
@click.option(
    "--samples",
    type=click.IntRange(1, 4096),
    default=_DEFAULT_SAMPLES,
    show_default=True,
    help="How many samples' outputs to compare.",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(0, 1, min_open=True),
    metavar="RTOL",
    help="Relative tolerance, in (0, 1] [default: by the outputs' dtype].",
)
@click.option(
    "-b",
    "--batch-size",
    type=click.IntRange(1, 4096),
    default=1,
    show_default=True,
    help="Samples per inference.",
)
@click.option(
    "--against",
    metavar="REF",
    help="Compare MODEL with this model reference on the same inputs (e.g. the factory an ONNX file was "
    "exported from); --frameworks then names MODEL's framework and REF's [default: each one's first].",
)
@click.option(
    "--against-weights",
    metavar="FILE",
    help="A state_dict file for the --against model (--weights is MODEL's).",
)
@click.option("--runner", default="process", show_default=True, help="process, docker or inline.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@model_options
@json_flag('Print the comparison as one JSON document ("verdict": "same" or "different").')
def parity(
    model: str,
    frameworks: str | None,
    dataset: str | None,
    limit: int | None,
    samples: int,
    tolerance: float | None,
    batch_size: int,
    against: str | None,
    against_weights: str | None,
    runner: str,
    device: str,
    input_shapes: Any,
    config: dict[str, Any],
    weights: str | None,
    as_json: bool,
) -> None:
    """Run the same inputs through each framework and compare the outputs with the first one's."""
    from mlscope.registry.models import ModelRegistry
    from mlscope.runtime.frameworks import in_framework_order
    from mlscope.workers.admission import default_frameworks
    from mlscope.workers.parity import parity_across

    settings = load_settings()
    names = split_csv(frameworks)
    if against_weights is not None and against is None:
        raise UserError("--against-weights is the --against model's: give --against REF too", field="against")
    if not names and against is None:
        installed = default_frameworks(ModelRegistry.load(settings.manifests), model)
        names = in_framework_order(installed)
    document: dict[str, Any] = {
        "batch_sizes": [batch_size],
        "runner": runner,
        "device": device,
        "model_options": model_options_document(input_shapes, config, weights),
    }
    for key, value in (("dataset", dataset), ("limit", limit)):
        if value is not None:
            document[key] = value

    def progress(framework: str, event: PredictorEvent) -> None:
        if event["event"] == "phase" and not as_json:
            err_console.print(f"{framework}: {event['phase']}", highlight=False)

    against_options: dict[str, Any] = {}
    if against is not None:
        # The same inputs for both: --input-shape applies to the --against model too.
        against_options = model_options_document(input_shapes, {}, against_weights)
    report = parity_across(
        model,
        names,
        document,
        settings=settings,
        samples=samples,
        rtol=tolerance,
        emit=progress,
        against=against,
        against_options=against_options,
    )
    if as_json:
        print_json_line(report)
    else:
        _print_human(report)
    sys.exit(0 if report["verdict"] == "same" else 1)


def _print_human(report: dict[str, Any]) -> None:
    reference = report["reference"]
    source = f"dataset {report['dataset']['name']}" if report.get("dataset") else "seeded synthetic inputs"
    against = f"{reference['framework']} {reference.get('version') or ''}".strip()
    table = new_table(
        f"{report['model']}: outputs against {against} on {report['samples']} samples of {source}"
        if "model" not in reference
        else f"outputs against {reference['model']} on {against}, {report['samples']} samples of {source}",
        [
            "framework",
            "output",
            "verdict",
            ("max |Δ|", "right"),
            ("mean |Δ|", "right"),
            ("max rel", "right"),
            ("cosine", "right"),
            ("top-1 agree", "right"),
        ],
    )
    for row in report["frameworks"]:
        label = f"{row['framework']} {row.get('version') or ''}".strip()
        if "model" in row:
            label = f"{row['model']} on {label}"
        if row["verdict"] == "unavailable":
            table.add_row(label, "", "[red]unavailable[/red]", row.get("error", ""), "", "", "", "")
            continue
        for name, output in row["outputs"].items():
            colour = "green" if output["verdict"] == "same" else "red"
            agreement = output["top1_agreement"]
            table.add_row(
                label,
                name,
                f"[{colour}]{output['verdict']}[/{colour}]",
                f"{output['max_abs']:.3g}",
                f"{output['mean_abs']:.3g}",
                f"{output['max_rel']:.3g}",
                f"{output['cosine']:.6f}",
                "" if agreement is None else f"{agreement * 100:.1f}%",
            )
    console.print(table)
    console.print(f"verdict: {report['verdict']}")
