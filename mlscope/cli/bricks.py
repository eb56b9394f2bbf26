"""`mlscope bricks`: each model's latency estimated from its layers measured one by one (DLBricks),
against the model measured whole; Benanza's lower bounds, and the framework overhead beyond them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from mlscope.cli.consoles import escape
from mlscope.cli.options import json_flag, split_csv
from mlscope.cli.render import EXIT_NOT_VALID, console, err_console, new_table, print_json_lines
from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings
from mlscope.services.bricks.registry import BUILTIN_BRICKS

if TYPE_CHECKING:
    from mlscope.workers.bricks import BrickRuns

__all__ = ["bricks"]


@click.command()
@click.argument("refs", nargs=-1, required=True, metavar="REF...")
@click.option(
    "-f",
    "--framework",
    default="onnxruntime",
    show_default=True,
    # mlscope's own frameworks: listing a plug-in's too would read every installed package's metadata
    # whenever the help is printed (check_brick_framework names them all when one is refused).
    help=f"The framework whose model is decomposed: {' or '.join(BUILTIN_BRICKS)}, or one a plug-in "
    "registers in the mlscope.bricks entry points (ONNX Runtime's optimised graph, PyTorch's module as "
    "torch.fx traces it).",
)
@click.option("--threads", type=int, help="Intra-op threads of every measurement [default: the framework's].")
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="Where the bricks and the whole model run: cpu, or cuda[:N] for PyTorch's bricks (timed with "
    "CUDA events; convolutions also with cudnn.benchmark on, reported as the cuDNN gap).",
)
@click.option(
    "--runner",
    default="process",
    show_default=True,
    help="How each model is measured whole: process, inline or docker (bricks run inline).",
)
@click.option("--min-seconds", type=float, help="Measure each whole model at least this long [default: 2].")
@click.option("--max-seconds", type=float, help="Stop each whole model after this long [default: 60].")
@click.option(
    "--min-count", type=int, help="Measure each whole model at least this many times [default: 30]."
)
@click.option(
    "--on",
    "targets",
    metavar="TARGETS",
    help="Measure on the farm, through the API (MLSCOPE_API_URL): comma-separated capabilities or "
    "agent:<id>, each every live agent that matches it (one system each) [default: this machine].",
)
@json_flag("Print one JSON object per model, then a summary object.")
def bricks(
    refs: tuple[str, ...],
    framework: str,
    threads: int | None,
    device: str,
    runner: str,
    min_seconds: float | None,
    max_seconds: float | None,
    min_count: int | None,
    targets: str | None,
    as_json: bool,
) -> None:
    """Estimate each REF's latency from its layers (bricks) and compare it with the model measured whole.

    Every unique layer is measured once per system and framework version, and stored: a later model
    that shares it reuses the stored result. A model's layers not stored yet are measured together,
    in one job in this process, or with --on in one job on each farm agent.
    """
    from mlscope.services.bricks.registry import check_brick_framework
    from mlscope.services.bricks.run import run_bricks

    quiet = as_json or not sys.stderr.isatty()

    def note(line: str) -> None:
        if not quiet:
            err_console.print(f"[dim]{escape(line)}[/dim]")

    check_brick_framework(framework)
    settings = load_settings()
    runs = None  # this machine
    if targets is not None:
        runs = _farm_runs(split_csv(targets), framework)
    reports, total = run_bricks(
        refs,
        framework=framework,
        settings=settings,
        runs=runs,
        threads=threads,
        device=device,
        runner=runner,
        min_seconds=min_seconds,
        max_seconds=max_seconds,
        min_count=min_count,
        note=note,
    )
    if as_json:
        print_json_lines([*reports, total])
    else:
        _print_human(reports, total)
    sys.exit(_exit_code(reports))


def _farm_runs(targets: list[str], framework: str) -> list[Callable[..., BrickRuns]]:
    """A `BrickRuns` maker per live agent `targets` name: its bricks and models measured there.

    Raises:
        UserError: a framework the farm measures no bricks of, or a target no live agent matches.
    """
    from functools import partial

    from mlscope.cli.bricks_farm import FarmBrickRuns, farm_agents
    from mlscope.cli.remote import api_client
    from mlscope.runtime.frameworks import FRAMEWORKS, get_framework

    if get_framework(framework).bricks is None:  # a brick job sends one-node ONNX graphs as files
        able = " and ".join(spec.display for spec in FRAMEWORKS.values() if spec.bricks is not None)
        raise UserError(
            f"--on: the farm measures {able}'s bricks only; {framework}'s are measured on this "
            "machine: drop --on",
            field="on",
        )
    client = api_client()
    return [
        partial(FarmBrickRuns, client=client, agent=agent)
        for agent in farm_agents(client, targets, framework)
    ]


def _exit_code(reports: list[dict[str, Any]]) -> int:
    """1 when a model failed, 3 (EXIT_NOT_VALID) when a report is not valid, else 0: as `run`'s."""
    if any(report.get("error") for report in reports):
        return 1
    return EXIT_NOT_VALID if any(not report["validity"]["valid"] for report in reports) else 0


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def _print_human(reports: list[dict[str, Any]], total: dict[str, Any]) -> None:
    table = new_table(
        "Bricks: estimate from layers vs measured whole (ms, single_stream batch 1)",
        [
            "model",
            ("estimate", "right"),
            ("90% interval", "right"),
            ("measured", "right"),
            ("error", "right"),
            ("sequential", "right"),
            ("critical path", "right"),
            ("overhead", "right"),
            ("bricks new/reused/unique", "right"),
            ("s bricks/whole", "right"),
            ("valid", "center"),
        ],
    )
    for report in reports:
        interval = report.get("interval_ms")
        bounds = report.get("bounds") or {}
        counts = report["bricks"]
        error = report.get("error_pct")
        where = f" on {report['agent']}" if report.get("agent") else ""
        table.add_row(
            escape(report["model"] + where),
            _ms(report.get("estimate_ms")),
            "-" if not interval else f"{interval[0]:.3f}–{interval[1]:.3f}",
            _ms(report.get("measured_ms")),
            "-" if error is None else f"{error:+.1f}%",
            _ms(bounds.get("sequential_ms")),
            _ms(bounds.get("critical_path_ms")),
            _ms(report.get("overhead_ms")),
            f"{counts['measured_now']}/{counts['reused']}/{counts['unique']}",
            f"{report['seconds']['bricks']:.1f}/{report['seconds']['whole']:.1f}",
            "yes" if report["validity"]["valid"] else "[red]NO[/red]",
        )
    console.print(table)
    for report in reports:
        if report.get("coverage"):
            console.print(f"{escape(report['model'])}: {_coverage(report['coverage'])}")
        if report.get("fallback"):
            fallback = report["fallback"]
            console.print(f"[yellow]{escape(report['model'])}[/yellow]: {escape(fallback['reason'])}")
            for layer in fallback["layers"][:10]:
                console.print(f"  {escape(layer['layer'])} ({layer['op_type']}): {escape(layer['reason'])}")
        cudnn = report.get("cudnn")
        if cudnn:
            gap = cudnn.get("gap_ms")
            console.print(
                f"{escape(report['model'])}: cuDNN gap (cudnn.benchmark off − on, Σ over "
                f"{cudnn['convolution_layers']} convolution layers) "
                + (f"{gap:.3f} ms" if gap is not None else escape(str(cudnn.get("error"))))
            )
        verdict = "not valid" if not report["validity"]["valid"] else "note"
        for reason in report["validity"]["reasons"]:
            console.print(f"[yellow]{escape(report['model'])}[/yellow] {verdict}: {escape(reason)}")
        if report.get("error"):
            error = report["error"]
            console.print(
                f"[red]{escape(report['model'])} failed[/red]: {error.get('type')}: {error.get('message')}"
            )
    for agent, part in (total.get("agents") or {}).items():
        _print_summary(part, f"on {agent}: ")
    _print_summary(total, "in all: " if total.get("agents") else "")


def _coverage(coverage: dict[str, Any]) -> str:
    """What the interval is calibrated on, and how often such intervals held, in a line."""
    nominal = f"{100 * coverage['nominal']:.0f}%"
    if not coverage["calibrated"]:
        return f"{nominal} interval: {coverage['note']}"
    return (
        f"{nominal} interval calibrated on {coverage['pairs']} other models measured whole on this "
        f"system; {coverage['inside']} of them ({100 * coverage['share']:.0f}%) inside their own"
    )


def _print_summary(total: dict[str, Any], head: str) -> None:
    median = total["median_abs_error_pct"]
    ratio = total["time_ratio_whole_to_bricks"]
    seconds = total["seconds"]
    console.print(
        escape(head) + f"{total['estimated']} of {total['models']} models estimated; median |error| "
        f"{'-' if median is None else f'{median:.1f}%'}; "
        f"benchmarking time: bricks {seconds['bricks']:.1f} s, whole models {seconds['whole']:.1f} s "
        f"(whole/bricks {'-' if ratio is None else f'{ratio:.2f}x'})"
    )
    if len(total["cumulative"]) > 1:
        steps = " ".join(
            "-" if step["ratio"] is None else f"{step['ratio']:.2f}" for step in total["cumulative"]
        )
        console.print(f"whole/bricks after 1..{len(total['cumulative'])} models, in the order given: {steps}")
