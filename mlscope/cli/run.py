"""`mlscope run`: evaluate one model on one or more frameworks here, with progress, into the store."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from mlscope.cli.consoles import escape
from mlscope.cli.generation_options import check_endpoint_frameworks
from mlscope.cli.options import evaluation_options, json_flag, plot_option, request_fields, split_csv
from mlscope.cli.progress import ProgressBoard, SearchBracket, progress_board
from mlscope.cli.render import (
    console,
    exit_code,
    measurement_table,
    print_json_lines,
    print_sections,
    print_validity_notes,
    short_id,
    variant_text,
    warn,
)
from mlscope.cli.render_load import probe_line
from mlscope.contract.events import EvaluationEvent
from mlscope.contract.interrupts import interrupt_on_signals
from mlscope.contract.result import ColdStart, EvaluationResult
from mlscope.contract.settings import load_settings

if TYPE_CHECKING:
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
@click.option(
    "--on",
    "target",
    metavar="TARGET",
    help="Run on the farm instead, through the API (MLSCOPE_API_URL): a capability or agent:<id>; "
    "with --agents N, the load is split across N agents it matches.",
)
@evaluation_options
@plot_option(
    "Also write a chart of what ran (.png, .svg, .html): the batch curve, or the latency histogram for "
    "one batch size; for several frameworks, their medians side by side."
)
@json_flag("Print each result as one JSON line on stdout.")
def run(
    model: str,
    frameworks: str | None,
    target: str | None,
    plot_file: str | None,
    as_json: bool,
    **fields: Any,
) -> None:
    """Evaluate MODEL on this machine and store the results (with --on, on the farm)."""
    document = request_fields(**fields)
    names = check_endpoint_frameworks(split_csv(frameworks), document.get("generation") or {})
    agents = (document.get("load") or {}).get("agents") or 1
    if target is not None:
        sys.exit(_run_on(model, names, target, document, as_json=as_json))
    if agents > 1:
        raise click.UsageError(
            f"--agents {agents} splits the load across farm agents: give --on TARGET (and the API's "
            "address in MLSCOPE_API_URL)"
        )
    if document["runner"] == "process":
        _start_predictor(names[0] if names else None, fields.get("threads"))
    sys.exit(run_command(model, names, document, as_json=as_json, plot_file=plot_file))


def _run_on(model: str, names: list[str], target: str, document: dict[str, Any], *, as_json: bool) -> int:
    """`run --on`: the evaluation submitted to the farm and waited for, as `submit --wait` does."""
    from mlscope.cli.submit import submit_command

    if len(names) != 1:
        raise click.UsageError("--on runs one framework on the farm: give exactly one with -f")
    farm_document = {"model": model, "framework": names[0], **document, "target": target}
    return submit_command(farm_document, wait=True, timeout_s=None, as_json=as_json)


def _start_predictor(framework: str | None, threads: int | None) -> None:
    """Start the first framework's predictor process before this one imports the rest of what a run
    needs: it imports its framework meanwhile (workers/runners/prestart.py). Without -f the frameworks
    are known only once the model is resolved: the process imports the predictor runtime meanwhile,
    and the first job's framework when that job comes. One in an interpreter other than this one (a
    framework environment's) is started again when the run knows it."""
    from mlscope.workers.runners import prestart

    if prestart.enabled():
        prestart.start(prestart.Key(sys.executable, framework, threads or None))


def _points(admitted: Admission) -> int:
    return len(admitted.request.batch_sizes) * len(admitted.request.scenarios)


class _ProgressView:
    """Turns a job's events into its progress row: the point measured now (scenario, batch size, a
    search's latest probe), points done of all, elapsed, and the ETA — during a search, the bracket
    it has narrowed the answer to instead."""

    def __init__(self, board: ProgressBoard, admitted: Admission) -> None:
        request = admitted.request
        self.board = board
        self.label = f"{request.model} on {request.framework}"
        self.points = _points(admitted)
        self.done = 0.0
        self.search = SearchBracket()
        self.row = board.add(self.label, total=self.points)

    def __call__(self, event: EvaluationEvent) -> None:
        if event["event"] == "phase":
            phase = event["phase"]
            if phase == "measure":
                phase = f"{event['scenario']} batch {event['batch_size']}"
                # A scenario whose queries arrive at a rate announces it with its measure phase.
                qps = event.get("qps")
                if qps is not None:
                    phase += f" @ {qps:g} qps"
            self.search = SearchBracket()
            self.row.update(now=escape(phase), eta="")
        elif event["event"] == "probe":
            # A latency search's step: one line above the rows, so the search is seen moving.
            self.board.line(probe_line(self.label, event))
            probe = self.search.add(event)
            where = f"{escape(str(event.get('scenario', 'server')))} batch {event.get('batch_size')}"
            self.row.update(now=f"{where} search, {probe}", eta=self.search.bracket())
        elif event["event"] == "progress":
            self.done = int(self.done) + min(event["fraction"], 0.99)
            self.row.update(done=self.done)
        elif event["event"] == "measurement":
            self.done = int(self.done) + 1
            self.search = SearchBracket()
            self.row.update(done=self.done, eta="")

    def finish(self, status: str) -> None:
        self.done = self.points
        self.row.finish(escape(status))


class _ProgressBars:
    """The run's watcher: a row per evaluation, and over several a first row for them all (points
    done of every evaluation's, with the ETA at the pace so far). The display starts when the first
    evaluation starts."""

    def __init__(self, board: ProgressBoard, admitted: list[Admission]) -> None:
        self.board = board
        self.view: _ProgressView | None = None
        self.ended_points = 0
        self.all = None
        if len(admitted) > 1:
            self.all = board.add(f"{len(admitted)} evaluations", total=sum(_points(a) for a in admitted))

    def __call__(self, admitted: Admission, event: EvaluationEvent) -> None:
        kind = event["event"]
        if event["event"] == "start":
            if self.view is None:
                self.board.start()
            self.view = _ProgressView(self.board, admitted)
        elif self.view is not None and event["event"] == "end":
            self.view.finish(event["status"])
            self.ended_points += self.view.points
        elif self.view is not None:
            self.view(event)
        if self.all is not None and self.view is not None:
            done = self.ended_points if kind == "end" else self.ended_points + self.view.done
            self.all.update(done=done, now=escape(self.view.label))


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


def _write_plot(results: Sequence[EvaluationResult], plot_file: str) -> None:
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
) -> list[EvaluationResult]:
    """Evaluate here with a progress row per evaluation on stderr (none under --json or off a
    terminal, see cli/progress.py); SIGTERM cancels as Ctrl-C does. Returns the stored results."""
    # Imported here, not above: `mlscope --help` and the other verbs need none of this.
    from mlscope.workers.local import admit_all, evaluate_here

    # Ctrl-C or SIGTERM: the predictor is stopped and the evaluation stored as cancelled.
    interrupt_on_signals()
    settings = load_settings()
    board = progress_board(quiet=as_json)
    # Admitted before the display starts: a refused request prints nothing but its error.
    if admitted is None:
        admitted = admit_all(model, frameworks or None, document, settings=settings)
    try:
        return evaluate_here(
            model,
            frameworks or None,
            document,
            settings=settings,
            watch=_ProgressBars(board, admitted),
            admitted=admitted,
        )
    finally:
        board.stop()


def _print_human(results: Sequence[EvaluationResult]) -> None:
    console.print(measurement_table(results))
    print_validity_notes(results)
    for result in results:
        framework = result["framework"]
        if result["status"] == "succeeded":
            cold = result["cold_start"] or {}
            system = result.get("system") or {}
            console.print(
                f"{short_line(result)}: {framework['name']} {framework.get('version')}"
                f"{_variant_clause(result)}; cold start: import "
                f"{_ms(cold.get('import_ms'), 0)}, load {_ms(cold.get('load_ms'), 0)}"
                f"{_compile_ms(cold)}, first inference "
                f"{_ms(cold.get('first_inference_ms'), 1)}{warm_start_line(cold)}; "
                f"on {system.get('cpu', {}).get('model', '?')} (system {system.get('id', '?')})"
            )
            print_sections(result, indent="  ")
        else:
            error: Mapping[str, Any] = result.get("error") or {}
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


def _variant_clause(result: Mapping[str, Any]) -> str:
    """ " (compile=default)" for a variant of its framework's plain run, else nothing."""
    variant = variant_text(result)
    return f" ({variant})" if variant else ""


def _compile_ms(cold: ColdStart | Mapping[str, Any]) -> str:
    """The cold start's compile clause (", compile 12345 ms (cached)"), or nothing."""
    if "compile_ms" not in cold:
        return ""
    cached = " (from inductor's cache)" if cold.get("compile_cached") else ""
    return f", compile {_ms(cold.get('compile_ms'), 0)}{cached}"


def warm_start_line(cold: ColdStart | Mapping[str, Any]) -> str:
    """The warm start's clause of the summary line ("; warm start (from the store): load 12.0 ms,
    first inference 3.1 ms, 97.5 MB shared") when one was measured, why not when it could not be,
    else nothing."""
    if "warm_load_ms" in cold:
        source = "published now" if cold.get("warm_source") == "published" else "from the store"
        return (
            f"; warm start ({source}): load {_ms(cold.get('warm_load_ms'), 1)}, first inference "
            f"{_ms(cold.get('warm_first_inference_ms'), 1)}, {cold.get('warm_shared_mb', 0):.1f} MB shared"
        )
    if cold.get("warm_unavailable"):
        return f"; no warm start: {cold['warm_unavailable']}"
    return ""


def short_line(result: Mapping[str, Any]) -> str:
    return f"{short_id(result['id'])} {result['model']['name']}"
