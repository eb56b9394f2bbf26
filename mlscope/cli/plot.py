"""`mlscope plot ID|FILTER [--kind KIND] -o FILE`: a stored result as a chart, the same chart the dashboard
draws (mlscope.analysis.chart_builders), written as PNG or SVG (matplotlib) or as a self-contained
HTML page (plotly); and `write_plot`, with which `mlscope run --plot` and `mlscope compare --plot`
write theirs beside the table."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from mlscope.analysis.charts import CHART_KINDS
from mlscope.cli.options import json_flag
from mlscope.cli.render import err_console
from mlscope.contract.errors import UserError

if TYPE_CHECKING:
    from mlscope.analysis.charts import Chart
    from mlscope.cli.plot_sources import PlotSource

__all__ = ["build_chart", "plot", "results_chart", "write_plot"]

# Kinds drawn from one evaluation; throughput-latency draws several, compare draws comparison rows.
ONE_EVALUATION = (
    "latency", "cdf", "batch", "layers", "cold-start", "timeline", "generation", "server-metrics", "pareto",
)  # fmt: skip
# The setups a throughput-latency filter draws at most (the latest evaluation of each).
MAX_EVALUATIONS = 8


@click.command()
@click.argument("selector", metavar="ID|FILTER")
@click.option(
    "-k",
    "--kind",
    type=click.Choice(CHART_KINDS),
    help="[default: what `mlscope run --plot` draws: one evaluation's latency histogram, or its batch "
    "curve when it measured several batch sizes; throughput-latency for several ids] "
    "latency (histogram per point), cdf, batch (percentiles and throughput by batch size), "
    "throughput-latency (several evaluations), layers (time per layer type, from a trace), compare "
    "(median per model @ batch, one bar per framework × system), cold-start, timeline (a trace's spans), "
    "generation (TTFT and TPOT per request of a generate evaluation), server-metrics (the endpoint "
    "server's metrics sampled during its requests: --server-metrics), pareto (a --sweep's tokens/s per "
    "user against tokens/s in all, its Pareto front joined).",
)
@click.option(
    "-o",
    "--output",
    metavar="FILE",
    help="Write the chart here: .png or .svg (matplotlib) or .html (plotly, self-contained).",
)
@click.option(
    "--top", type=click.IntRange(min=1), default=20, show_default=True, help="layers: layer types drawn."
)
@click.option(
    "--max-spans",
    type=click.IntRange(min=1),
    default=2000,
    show_default=True,
    help="timeline: the longest spans drawn.",
)
@click.option(
    "--api", "api_url", metavar="URL", help="Read from the mlscope API at URL, not the local store."
)
@json_flag("Print the chart's description (series, points, notes) as JSON.")
def plot(
    selector: str,
    kind: str | None,
    output: str | None,
    top: int,
    max_spans: int,
    api_url: str | None,
    as_json: bool,
) -> None:
    """Draw stored results as a chart.

    ID|FILTER is an evaluation id or a unique prefix of one (several, comma-separated, for
    throughput-latency and compare), or a filter: the latest succeeded evaluation matching it; for
    throughput-latency the latest of each setup (model, framework version, system, device); for
    compare every comparison row it matches. A filter, with any of its keys:

    \b
        model=resnet18,framework=onnxruntime,system=ID,device=cpu,scenario=single_stream,batch_size=1

    Points whose measurement is not valid are drawn in series named "(invalid)" and counted in a
    note under the chart.
    """
    from mlscope.analysis.chart_render import check_chart_path
    from mlscope.cli.plot_sources import ApiSource, StoreSource

    if output is None and not as_json:
        raise UserError(
            "missing -o FILE: expected a file ending in .png, .svg or .html (or --json for the chart's data)",
            field="output",
        )
    if output is not None:
        check_chart_path(output)
    with ApiSource(api_url) if api_url else StoreSource() as source:
        chart = build_chart(source, kind, selector, top=top, max_spans=max_spans)
    if as_json:
        print(json.dumps(chart.to_dict(), indent=2))
    if output is not None:
        write_plot(chart, output)


def build_chart(
    source: PlotSource, kind: str | None, selector: str, *, top: int = 20, max_spans: int = 2000
) -> Chart:
    """The chart of `kind` of what `selector` names, read from `source`; with no kind, the chart
    `mlscope run --plot` would draw of it (`results_chart`), so a first plot needs no choice.

    Raises:
        UserError: an unknown kind, a selector naming nothing (or several evaluations for a kind that
            draws one), or nothing to draw.
    """
    from mlscope.analysis import chart_builders as build
    from mlscope.cli.plot_sources import SELECTOR, is_filter, split_ids

    selector = selector.strip()
    if kind is None:
        if not is_filter(selector) and len(split_ids(selector)) > 1:
            kind = "throughput-latency"
        else:
            return results_chart([source.evaluation(selector)])
    if kind not in CHART_KINDS:
        raise UserError(f"--kind {kind!r}: expected one of {', '.join(CHART_KINDS)}", field="kind")
    if kind in ONE_EVALUATION and not is_filter(selector) and len(split_ids(selector)) > 1:
        raise UserError(
            f"{SELECTOR} {selector!r}: --kind {kind} draws one evaluation: expected one id (or a filter); "
            "throughput-latency and compare draw several",
            field=SELECTOR,
        )
    if kind == "compare":
        return build.compare_bars(source.compare_rows(selector))
    if kind == "throughput-latency":
        evaluations, more = source.evaluations(selector, MAX_EVALUATIONS)
        chart = build.throughput_latency(evaluations)
        if more:
            left_out = f"{more} more matching setup(s) not drawn: narrow the filter or name ids"
            chart = dataclasses.replace(chart, notes=(*chart.notes, left_out))
        return chart
    evaluation = source.evaluation(selector)
    if kind in ("layers", "timeline"):
        spans = source.spans(evaluation["id"])
        if kind == "layers":
            return build.layer_bars(evaluation, spans, top=top)
        return dataclasses.replace(
            build.timeline(spans, max_spans=max_spans),
            title=f"trace timeline: {build.evaluation_label(evaluation)}",
        )
    from mlscope.analysis.chart_generation import pareto_chart, request_cdf, server_metrics_chart

    one = {
        "pareto": pareto_chart,
        "latency": build.latency_histogram,
        "cdf": build.latency_cdf,
        "batch": build.batch_curve,
        "generation": request_cdf,
        "server-metrics": server_metrics_chart,
    }
    return one.get(kind, build.cold_start_bars)(evaluation)


def results_chart(
    results: Sequence[Mapping[str, Any]], rows: Sequence[dict[str, Any]] | None = None
) -> Chart:
    """The chart `--plot` writes for what a command just measured: one evaluation's batch curve (its
    latency histogram when it measured one batch size), or for several the comparison of `rows`
    (their comparison rows) or else their latency against throughput.

    Args:
        results: the succeeded evaluations, with raw latencies for a histogram.
        rows: their comparison rows, when the command has them.

    Raises:
        UserError: nothing to draw.
    """
    from mlscope.analysis import chart_builders as build

    if rows is not None:
        return build.compare_bars(rows)
    if len(results) == 1:
        sizes = {m["batch_size"] for m in results[0].get("measurements") or []}
        return build.batch_curve(results[0]) if len(sizes) > 1 else build.latency_histogram(results[0])
    return build.throughput_latency(results)


def write_plot(chart: Chart, output: str) -> None:
    """Write the chart to `output` and say so on stderr."""
    from mlscope.analysis.chart_render import write_chart

    path = write_chart(chart, output)
    err_console.print(f"plot written to {path}", highlight=False, soft_wrap=True)
