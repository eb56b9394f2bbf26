"""Options more than one verb shares: the evaluation options of `run`, `submit` and `compare` (and the
request fields they make), `--json`, and comma-separated lists."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from mlscope.cli.generation_options import GENERATION_FLAGS, GENERATION_OPTIONS, generation_document
from mlscope.cli.key_values import parse_key_values, with_flags
from mlscope.contract.errors import UserError
from mlscope.contract.interactive import parse_sweep

__all__ = [
    "evaluation_options",
    "json_flag",
    "load_document",
    "model_options",
    "model_options_document",
    "parse_key_values",
    "request_fields",
    "split_csv",
]

F = TypeVar("F", bound=Callable[..., Any])


def split_csv(value: str | None) -> list[str]:
    """The non-empty, stripped items of a comma-separated option ("" and None: none)."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _chart_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A --plot file whose suffix names a chart format, checked as the command line is read: before
    any work, so a run is never measured only to find its chart cannot be written."""
    if value is not None:
        from mlscope.analysis.chart_render import check_chart_path

        check_chart_path(value, "--plot")
    return value


def plot_option(help_text: str) -> Callable[[F], F]:
    """`--plot FILE` (the parameter `plot_file`): a chart written beside the table (.png, .svg, .html),
    its suffix checked up front."""
    return click.option("--plot", "plot_file", metavar="FILE", callback=_chart_path, help=help_text)


def json_flag(help_text: str) -> Callable[[F], F]:
    """`--json` (the parameter `as_json`), saying what it prints."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def _parse_batch_sizes(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    if value is None:
        return None
    sizes = []
    for item in split_csv(value):
        try:
            sizes.append(int(item))
        except ValueError:
            raise click.BadParameter(f"{item!r} is not a whole number; expected e.g. 1,8,32") from None
    if not sizes:
        raise click.BadParameter("expected a comma-separated list of batch sizes, e.g. 1,8,32")
    return sizes


_SHAPE = re.compile(r"^(?:(?P<name>[^=\s]+)=)?(?P<dims>\d+(?:[x,]\d+)*)?(?::(?P<dtype>[a-z0-9]+))?$")


def _parse_input_shapes(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[dict[str, list[int]], dict[str, str]]:
    """`[NAME=]1x3x224x224[:DTYPE]` items: full shapes (batch axis first) and dtypes, by input name
    ("" for a model's only input)."""
    shapes: dict[str, list[int]] = {}
    dtypes: dict[str, str] = {}
    for item in values:
        match = _SHAPE.match(item.strip())
        if match is None or not (match.group("dims") or match.group("dtype")):
            raise click.BadParameter(
                f"{item!r}: expected [NAME=]DIMS[:DTYPE], dimensions joined by 'x' with the batch axis "
                "first, e.g. 1x3x224x224 or input_ids=1x128:int64"
            )
        name = match.group("name") or ""
        if match.group("dims"):
            shapes[name] = [int(dim) for dim in re.split(r"[x,]", match.group("dims"))]
        if match.group("dtype"):
            dtypes[name] = match.group("dtype")
    return shapes, dtypes


MODEL_OPTIONS = (
    click.option(
        "--input-shape",
        "input_shapes",
        multiple=True,
        callback=_parse_input_shapes,
        metavar="[NAME=]DIMS[:DTYPE]",
        help="An input's full shape, batch axis first (1x3x224x224); NAME= for one of several inputs, "
        ":int64 for its dtype. Needed by Python factories and ONNX graphs with dynamic axes besides the "
        "batch (repeatable).",
    ),
    click.option(
        "--config",
        "config",
        multiple=True,
        callback=parse_key_values,
        metavar="KEY=VALUE",
        help="A Hugging Face config override for hf:<type> and model directories, e.g. num_hidden_layers=4 "
        "(repeatable).",
    ),
    click.option(
        "--weights",
        type=click.Path(dir_okay=False),
        help="A local PyTorch checkpoint (torch.save state dict or .safetensors) instead of random weights.",
    ),
)


def model_options(command: F) -> F:
    """`--input-shape`, `--config` and `--weights`: what resolves a model reference besides its name
    (the parameters `input_shapes`, `config`, `weights`; `model_options_document` makes the request's
    `model_options` from them)."""
    for option in reversed(MODEL_OPTIONS):
        command = option(command)
    return command


def model_options_document(
    input_shapes: tuple[dict[str, list[int]], dict[str, str]], config: dict[str, Any], weights: str | None
) -> dict[str, Any]:
    """The request's `model_options` from the options `model_options` adds (empty ones left out)."""
    shapes, dtypes = input_shapes
    document: dict[str, Any] = {}
    if shapes:
        document["input_shapes"] = shapes
    if dtypes:
        document["input_dtypes"] = dtypes
    if config:
        document["config"] = config
    if weights:
        document["weights"] = weights
    return document


# The load settings (mlscope.contract.load.LoadSettings) with options of their own: (parameter,
# setting). The request's validation checks their values, so a bad one is named as `load.<setting>`.
_LOAD_FLAGS = (
    ("qps", "qps"),
    ("find_max_qps", "find_max_qps"),
    ("latency_bound_ms", "latency_bound_ms"),
    ("percentile", "percentile"),
    ("max_in_flight", "max_in_flight"),
    ("samples_per_query", "samples_per_query"),
    ("interval_ms", "interval_ms"),
    ("back_to_back", "back_to_back"),
    ("load_seed", "seed"),
    ("sweep", "sweep"),
    ("agents", "agents"),
)

LOAD_OPTIONS = (
    click.option("--qps", type=float, help="server: the target arrival rate, queries per second (Poisson)."),
    click.option(
        "--agents",
        type=int,
        metavar="N",
        help="server, generate with --on: split the --qps schedule across N live agents the target "
        "matches, started at one instant, and merge every request [default: 1].",
    ),
    click.option(
        "--find-max-qps",
        is_flag=True,
        help="server: search for the highest QPS whose --percentile latency stays under --latency-bound-ms.",
    ),
    click.option(
        "--latency-bound-ms",
        type=float,
        metavar="MS",
        help="server: the latency the percentile must stay under (needed by --find-max-qps).",
    ),
    click.option(
        "--percentile",
        type=float,
        help="The latency percentile a point certifies [default: 99 for server and multi_stream, 90 for "
        "single_stream, 50 for offline].",
    ),
    click.option(
        "--max-in-flight",
        type=int,
        metavar="N",
        help="server, multi_stream: queries the model runs at once; the others queue [default: 1].",
    ),
    click.option(
        "--samples-per-query",
        type=int,
        metavar="N",
        help="multi_stream: samples in each query, issued together [default: 8].",
    ),
    click.option(
        "--interval-ms", type=float, metavar="MS", help="multi_stream: a query every MS [default: 50]."
    ),
    click.option(
        "--back-to-back",
        is_flag=True,
        help="multi_stream: issue each query when the previous one completes (LoadGen >= 1.0), not every "
        "--interval-ms.",
    ),
    click.option("--load-seed", type=int, metavar="N", help="Seeds the arrival times [default: 0]."),
    click.option(
        "--sweep",
        metavar="SETTING=V1,V2,...",
        help="generate: one point per value, concurrency=1,2,4,8 (closed loop) or qps=1,2,4 (Poisson, "
        "--concurrency in flight at most), stored as one evaluation with its throughput-latency "
        "Pareto front.",
    ),
    click.option(
        "--load",
        "load",
        multiple=True,
        callback=parse_key_values,
        metavar="KEY=VALUE",
        help="Any load setting, e.g. --load confidence=0.95 or --load resolution=0.1 (repeatable).",
    ),
)


def load_document(load: dict[str, Any], **flags: Any) -> dict[str, Any]:
    """The request's `load` from `--load KEY=VALUE` pairs and the load flags set (a flag wins; an
    unset flag, None or a switch left off, says nothing); a sweep's text in the form the document
    states (contract.interactive.parse_sweep).

    Raises:
        UserError: a sweep that does not parse (field load.sweep).
    """
    document = with_flags(load, _LOAD_FLAGS, flags)
    if isinstance(document.get("sweep"), str):
        try:
            document["sweep"] = parse_sweep(document["sweep"])
        except UserError as exc:
            raise UserError(f"load.{exc.message}", field="load.sweep") from None
    return document


_EVALUATION_OPTIONS = (
    click.option(
        "-b",
        "--batch-sizes",
        callback=_parse_batch_sizes,
        metavar="N,N,...",
        help="Batch sizes to measure [default: 1].",
    ),
    click.option(
        "-s",
        "--scenario",
        "scenarios",
        default="single_stream",
        show_default=True,
        metavar="NAMES",
        help="Comma-separated scenarios: single_stream (back-to-back latency), offline (throughput), "
        "server (Poisson arrivals at --qps), multi_stream (--samples-per-query samples every --interval-ms), "
        "generate (a generative model's requests token by token: TTFT, TPOT, goodput; docs/generate.md), "
        "interactive (generate under MLPerf's Interactive p99 TTFT/TPOT caps for the model, or --slo).",
    ),
    click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N."),
    click.option(
        "--runner",
        default="process",
        show_default=True,
        help="process (a child process; a framework not installed here runs in its `mlscope env`), docker "
        "(the framework's predictor image, no network), or inline (this process).",
    ),
    click.option(
        "--trace-level",
        default="NO_TRACE",
        show_default=True,
        metavar="LEVEL",
        help="How deep to trace: NO_TRACE, APPLICATION (phases), MODEL (each inference), FRAMEWORK "
        "(layers), LIBRARY (operators, kernels), HARDWARE (CPU/GPU metrics), FULL. Deeper levels run "
        "extra profiled passes after the measured one; `mlscope trace ID` shows the result.",
    ),
    click.option("--threads", type=int, help="Intra-op threads [default: the framework's, one per core]."),
    click.option("--min-seconds", type=float, help="Measure each point at least this long [default: 2]."),
    click.option(
        "--max-seconds", type=float, help="Stop each point after this long, stable or not [default: 60]."
    ),
    click.option("--min-count", type=int, help="Measure each point at least this many times [default: 30]."),
    click.option(
        "--measure",
        "measure",
        multiple=True,
        callback=parse_key_values,
        metavar="KEY=VALUE",
        help="Any measurement setting, e.g. --measure stability=0.01 (repeatable).",
    ),
    click.option(
        "--option",
        "options",
        multiple=True,
        callback=parse_key_values,
        metavar="KEY=VALUE",
        help="A predictor option: threads, inter_op_threads, graph_optimization_level (disable, basic, "
        "extended, all), execution_providers (a JSON list), input_pool; PyTorch's compile (none, default, "
        "reduce-overhead, max-autotune: torch.compile; none,default runs both); OpenVINO's performance_hint "
        "(LATENCY, THROUGHPUT) and precision (f32, bf16); quantize (none, int8) on PyTorch, ONNX Runtime "
        "and LiteRT; llama.cpp's gguf_type (f32, f16, q8_0, q4_0) (repeatable).",
    ),
    click.option(
        "--timeout", type=float, default=1800, show_default=True, help="Time limit per evaluation, seconds."
    ),
    click.option("--memory-limit", type=int, help="Resident memory limit of the predictor process, MB."),
    click.option(
        "--dataset",
        metavar="NAME|DIR",
        help="Also measure accuracy on this dataset: digits, sample_photos, a folder of class/*.jpg (or with "
        "a labels file), or an uploaded sha256:<hex>. Its samples go through the manifest's input steps.",
    ),
    click.option("--limit", type=int, metavar="N", help="Evaluate only the dataset's first N samples."),
    *LOAD_OPTIONS,
    *GENERATION_OPTIONS,
    click.option(
        "--check-parity",
        is_flag=True,
        help="Also run the same inputs through a reference framework and compare the outputs; a "
        "'different' verdict marks the result invalid.",
    ),
    click.option("--parity-against", metavar="FRAMEWORK", help="The parity check's reference framework."),
    click.option(
        "--tolerance",
        type=float,
        metavar="RTOL",
        help="The parity check's relative tolerance [default: by dtype].",
    ),
)


def evaluation_options(command: F) -> F:
    """The options every way of asking for an evaluation shares (run, submit, compare), the model
    options among them; the command takes them as `**fields` and hands them to `request_fields`."""
    for option in reversed(_EVALUATION_OPTIONS + MODEL_OPTIONS):
        command = option(command)
    return command


def request_fields(
    *,
    batch_sizes: list[int] | None,
    scenarios: str,
    device: str,
    runner: str,
    trace_level: str,
    threads: int | None,
    options: dict[str, Any],
    min_seconds: float | None,
    max_seconds: float | None,
    min_count: int | None,
    measure: dict[str, Any],
    timeout: float,
    memory_limit: int | None,
    input_shapes: tuple[dict[str, list[int]], dict[str, str]] = ({}, {}),
    config: dict[str, Any] | None = None,
    weights: str | None = None,
    dataset: str | None = None,
    limit: int | None = None,
    check_parity: bool = False,
    parity_against: str | None = None,
    tolerance: float | None = None,
    load: dict[str, Any] | None = None,
    generation: dict[str, Any] | None = None,
    **flags: Any,
) -> dict[str, Any]:
    """The request document's fields from the shared options (accuracy, parity, load and generation
    ones only when set; `flags` are the load and generation settings' own options, `--qps`,
    `--slo` and the others)."""
    load_names = {parameter for parameter, _ in _LOAD_FLAGS}
    generation_names = {parameter for parameter, _ in GENERATION_FLAGS}
    unknown = set(flags) - load_names - generation_names
    if unknown:
        raise TypeError(f"request_fields() got unexpected options {', '.join(sorted(unknown))}")
    load = load_document(load or {}, **{k: v for k, v in flags.items() if k in load_names})
    generation = generation_document(generation, **{k: v for k, v in flags.items() if k in generation_names})
    measure = dict(measure)
    for name, value in (("min_seconds", min_seconds), ("max_seconds", max_seconds), ("min_count", min_count)):
        if value is not None:
            measure[name] = value
    named = split_csv(scenarios)
    if "interactive" in named:
        # A preset of the generate scenario (contract.interactive), asked for as a scenario.
        named = ["generate" if name == "interactive" else name for name in named]
        generation = {**generation, "preset": "interactive"}
    return {
        "batch_sizes": batch_sizes or [1],
        "scenarios": named,
        "device": device,
        "runner": runner,
        "trace_level": trace_level.upper(),
        "measure": measure,
        "options": {**options, **({"threads": threads} if threads else {})},
        "timeout_s": timeout,
        "memory_limit_mb": memory_limit,
        "model_options": model_options_document(input_shapes, config or {}, weights),
        **{
            name: value
            for name, value in (
                ("dataset", dataset),
                ("limit", limit),
                ("check_parity", check_parity or None),
                ("parity_against", parity_against),
                ("tolerance", tolerance),
                ("load", load or None),
                ("generation", generation or None),
            )
            if value is not None
        },
    }
