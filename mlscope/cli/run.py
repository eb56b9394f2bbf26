"""`mlscope run`: evaluate one model on one or more frameworks here, with progress, into the store."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING, Any

import click

from mlscope.cli.generation_options import check_endpoint_frameworks
from mlscope.cli.options import evaluation_options, json_flag, plot_option, request_fields, split_csv
from mlscope.cli.render import (
    console,
    err_console,
    exit_code,
    measurement_table,
    print_json_lines,
    print_sections,
    print_validity_notes,
    short_id,
    warn,
)
from mlscope.cli.render_load import probe_line
from mlscope.contract.settings import load_settings

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from mlscope.workers.admission import Admission

__all__ = ["evaluate_with_bars", "run", "run_command"]


@click.command()
@click.argument("model")
@click.option(
    "-f",
    "--framework",
    "frameworks",
    metavar="NAMES",
    help="Comma-separated frameworks [default: every installed one with a manifest for MODEL].",
)
@evaluation_options
@plot_option(
    "Also write a chart of what ran (.png, .svg, .html): the batch curve, or the latency histogram for "
    "one batch size; for several frameworks, their medians side by side."
)
@json_flag("Print each result as one JSON line on stdout.")
def run(model: str, frameworks: str | None, plot_file: str | None, as_json: bool, **fields: Any) -> None:
    """Evaluate MODEL on this machine and store the results."""
    if plot_file is not None:
        from mlscope.analysis.chart_render import check_chart_path

        check_chart_path(plot_file, "--plot")  # before the run, not after it
    document = request_fields(**fields)
    names = check_endpoint_frameworks(split_csv(frameworks), document.get("generation") or {})
    sys.exit(run_command(model, names, document, as_json=as_json, plot_file=plot_file))


class _ProgressView:
    """Turns a job's events into one progress bar per evaluation."""

    def __init__(self, progress: Progress, admitted: Admission, *, show_probes: bool = True) -> None:
        request = admitted.request
        self.progress = progress
        self.show_probes = show_probes
        self.qps = request.load.get("qps")
        self.label = f"{request.model} on {request.framework}"
        self.points = len(request.batch_sizes) * len(request.scenarios)
        self.done = 0
        self.task: TaskID = progress.add_task(self.label, total=self.points, phase="waiting")

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "phase":
            phase = event["phase"]
            if phase == "measure":
                phase = f"{event['scenario']} batch {event['batch_size']}"
                qps = event.get("target_qps", self.qps)
                if event["scenario"] == "server" and qps is not None:
                    phase += f" @ {qps:g} qps"
            self.progress.update(self.task, phase=phase)
        elif kind == "probe":
            # A latency search's step: one line above the bars, so the search is seen moving.
            if self.show_probes:
                self.progress.console.print(probe_line(self.label, event))
            target = event.get("target_qps")
            if target is not None:
                self.progress.update(
                    self.task,
                    phase=f"{event.get('scenario', 'server')} batch {event.get('batch_size')} "
                    f"search @ {target:g} qps",
                )
        elif kind == "progress":
            self.progress.update(self.task, completed=self.done + min(event["fraction"], 0.99))
        elif kind == "measurement":
            self.done += 1
            self.progress.update(self.task, completed=self.done)

    def finish(self, status: str) -> None:
        self.progress.update(self.task, completed=self.points, phase=status)


class _ProgressBars:
    """The run's watcher: a bar per evaluation, the display started when the first one starts (so a
    request refused at admission prints nothing but its error)."""

    def __init__(self, progress: Progress, *, show_probes: bool = True) -> None:
        self.progress = progress
        self.show_probes = show_probes
        self.view: _ProgressView | None = None

    def __call__(self, admitted: Admission, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start":
            self.progress.start()
            self.view = _ProgressView(self.progress, admitted, show_probes=self.show_probes)
        elif self.view is not None and kind == "end":
            self.view.finish(event["status"])
        elif self.view is not None:
            self.view(event)


def _interrupt_on_sigterm() -> None:
    """SIGTERM ends a run as Ctrl-C does: the predictor is stopped and the evaluation cancelled."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def run_command(
    model: str,
    frameworks: list[str],
    document: dict[str, Any],
    *,
    as_json: bool,
    plot_file: str | None = None,
) -> int:
    """Args:
        plot_file: where to write a chart of the results (see `_write_plot`), or None.

    Returns: the exit code (`render.exit_code`: 0 all succeeded and valid, 1 some evaluation
    failed, 3 a result is not valid)."""
    results = evaluate_with_bars(model, frameworks, document, as_json=as_json)
    if as_json:
        print_json_lines(results)
    else:
        _print_human(results)
    if plot_file is not None:
        _write_plot(results, plot_file)
    return exit_code(results)


def _write_plot(results: list[dict[str, Any]], plot_file: str) -> None:
    """The chart of the succeeded results (`plot.results_chart`), read back from the store with their raw
    latencies; a warning instead when none succeeded."""
    from mlscope.cli.plot import results_chart, write_plot
    from mlscope.store import open_store

    ids = [r["id"] for r in results if r["status"] == "succeeded"]
    if not ids:
        warn(f"no plot written to {plot_file}: no evaluation succeeded")
        return
    with open_store(load_settings().store_url) as store:
        succeeded = [store.get_evaluation(id, include_raw=True) for id in ids]
        rows = store.compare(ids=ids) if len(ids) > 1 else None
    write_plot(results_chart(succeeded, rows), plot_file)


def evaluate_with_bars(
    model: str,
    frameworks: list[str],
    document: dict[str, Any],
    *,
    as_json: bool,
    admitted: list[Admission] | None = None,
) -> list[dict[str, Any]]:
    """Evaluate here with a progress bar per evaluation on stderr (transient under --json); SIGTERM
    cancels as Ctrl-C does. Returns the stored results."""
    # Imported here, not above: `mlscope --help` and the other verbs need none of this.
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from mlscope.workers.local import evaluate_here

    _interrupt_on_sigterm()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[phase]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=as_json,
    )
    bars = _ProgressBars(progress, show_probes=not as_json)
    try:
        return evaluate_here(
            model, frameworks or None, document, settings=load_settings(), watch=bars, admitted=admitted
        )
    finally:
        progress.stop()


def _print_human(results: list[dict[str, Any]]) -> None:
    console.print(measurement_table(results))
    print_validity_notes(results)
    for result in results:
        framework = result["framework"]
        if result["status"] == "succeeded":
            cold = result["cold_start"] or {}
            system = result.get("system") or {}
            console.print(
                f"{short_line(result)}: {framework['name']} {framework.get('version')}; cold start: import "
                f"{_ms(cold.get('import_ms'), 0)}, load {_ms(cold.get('load_ms'), 0)}, first inference "
                f"{_ms(cold.get('first_inference_ms'), 1)}; on {system.get('cpu', {}).get('model', '?')} "
                f"(system {system.get('id', '?')})"
            )
            print_sections(result, indent="  ")
        else:
            error = result.get("error") or {}
            console.print(
                f"[red]{short_line(result)} failed[/red] in {error.get('phase')}: "
                f"{error.get('type')}: {error.get('message')}"
            )
    traced = [r for r in results if r.get("trace_id")]
    if traced:
        level = traced[0]["trace_level"]
        deep = level not in ("APPLICATION", "MODEL")
        hint = " --layers" if deep else ""
        console.print(
            f"traced at {level}: `mlscope trace {short_id(traced[0]['id'])}{hint}` shows it; "
            "`--format chrome` writes a file for ui.perfetto.dev"
        )


def _ms(value: Any, digits: int) -> str:
    return f"{value:.{digits}f} ms" if isinstance(value, (int, float)) else "-"


def short_line(result: dict[str, Any]) -> str:
    return f"{short_id(result['id'])} {result['model']['name']}"
