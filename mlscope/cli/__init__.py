"""The `mlscope` command: evaluate models here, list what can be evaluated, read stored results.

A user's mistake ends with one line on stderr and exit code 2; a failed evaluation with exit code 1;
success with 0. Progress goes to stderr, so `--json` output on stdout stays clean for scripts.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from mlscope import __version__
from mlscope.contract.errors import UserError

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str) -> NoReturn:
    click.echo(f"mlscope: error: {message}", err=True)
    sys.exit(2)


def _split_csv(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _parse_batch_sizes(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    if value is None:
        return None
    sizes = []
    for item in _split_csv(value):
        try:
            sizes.append(int(item))
        except ValueError:
            raise click.BadParameter(f"{item!r} is not a whole number; expected e.g. 1,8,32") from None
    if not sizes:
        raise click.BadParameter("expected a comma-separated list of batch sizes, e.g. 1,8,32")
    return sizes


def _parse_key_values(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any]:
    """KEY=VALUE pairs; a value is read as JSON (numbers, true/false, lists) or else kept as text."""
    parsed: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE, e.g. min_seconds=5")
        try:
            parsed[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            parsed[key.strip()] = raw
    return parsed


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="mlscope")
def cli() -> None:
    """mlscope: fair, repeatable latency and throughput benchmarks of deep-learning models.

    Start with `mlscope models`, then `mlscope run resnet18`.
    """


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
        help="Comma-separated scenarios: single_stream (back-to-back latency), offline (throughput).",
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
        callback=_parse_key_values,
        metavar="KEY=VALUE",
        help="Any measurement setting, e.g. --measure stability=0.01 (repeatable).",
    ),
    click.option(
        "--option",
        "options",
        multiple=True,
        callback=_parse_key_values,
        metavar="KEY=VALUE",
        help="A predictor option: threads, inter_op_threads, graph_optimization_level (disable, basic, "
        "extended, all), execution_providers (a JSON list), input_pool (repeatable).",
    ),
    click.option(
        "--timeout", type=float, default=1800, show_default=True, help="Time limit per evaluation, seconds."
    ),
    click.option("--memory-limit", type=int, help="Resident memory limit of the predictor process, MB."),
)


def _evaluation_options(command: F) -> F:
    """The options every way of asking for an evaluation shares (run, submit, compare)."""
    for option in reversed(_EVALUATION_OPTIONS):
        command = option(command)
    return command


def _request_fields(
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
) -> dict[str, Any]:
    """The request document's fields from the shared options."""
    measure = dict(measure)
    for name, value in (("min_seconds", min_seconds), ("max_seconds", max_seconds), ("min_count", min_count)):
        if value is not None:
            measure[name] = value
    return {
        "batch_sizes": batch_sizes or [1],
        "scenarios": _split_csv(scenarios),
        "device": device,
        "runner": runner,
        "trace_level": trace_level.upper(),
        "measure": measure,
        "options": {**options, **({"threads": threads} if threads else {})},
        "timeout_s": timeout,
        "memory_limit_mb": memory_limit,
    }


@cli.command()
@click.argument("model")
@click.option(
    "-f",
    "--framework",
    "frameworks",
    metavar="NAMES",
    help="Comma-separated frameworks [default: every installed one with a manifest for MODEL].",
)
@_evaluation_options
@click.option("--json", "as_json", is_flag=True, help="Print each result as one JSON line on stdout.")
def run(model: str, frameworks: str | None, as_json: bool, **fields: Any) -> None:
    """Evaluate MODEL on this machine and store the results."""
    from mlscope.cli.run import run_command

    sys.exit(run_command(model, _split_csv(frameworks), _request_fields(**fields), as_json=as_json))


@cli.command()
@click.option("-f", "--framework", help="Only models with a manifest for this framework.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models(framework: str | None, as_json: bool) -> None:
    """List the models that can be evaluated (shipped manifests and MLSCOPE_MANIFESTS)."""
    from mlscope.cli.listing import models_command

    models_command(framework, as_json=as_json)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def frameworks(as_json: bool) -> None:
    """List the frameworks mlscope knows and whether each can run here."""
    from mlscope.cli.listing import frameworks_command

    frameworks_command(as_json=as_json)


@cli.group()
def results() -> None:
    """Read stored evaluation results."""


@results.command("list")
@click.option("-m", "--model", help="Only this model.")
@click.option("-f", "--framework", help="Only this framework.")
@click.option("--status", help="Only this status: queued, running, succeeded, failed, cancelled.")
@click.option("--system", "system_id", help="Only results from this system id.")
@click.option("-n", "--limit", type=int, default=20, show_default=True, help="How many.")
@click.option("--offset", type=int, default=0, show_default=True, help="Skip this many (newest first).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
def results_list(
    model: str | None,
    framework: str | None,
    status: str | None,
    system_id: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """List stored evaluations, newest first."""
    from mlscope.cli.results import list_command

    list_command(
        model=model,
        framework=framework,
        status=status,
        system_id=system_id,
        limit=limit,
        offset=offset,
        as_json=as_json,
    )


@results.command("show")
@click.argument("evaluation_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--raw", is_flag=True, help="With --json: include every raw latency (ns).")
def results_show(evaluation_id: str, as_json: bool, raw: bool) -> None:
    """Show one evaluation (ID or a unique prefix of it)."""
    from mlscope.cli.results import show_command

    show_command(evaluation_id, as_json=as_json, raw=raw)


@cli.command()
@click.argument("evaluation_id", metavar="ID")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json", "chrome"]),
    default="table",
    show_default=True,
    help="table: span counts and the APPLICATION timeline; json: every span; chrome: a trace file "
    "for Perfetto (ui.perfetto.dev) or chrome://tracing.",
)
@click.option(
    "-o",
    "--output",
    metavar="FILE",
    help="Write json or chrome here ('-': stdout) [default: stdout for json, ID.trace.json for chrome].",
)
@click.option("--layers", is_flag=True, help="Where inference time went: per layer, top operators, kernels.")
@click.option(
    "--group-by",
    type=click.Choice(["layer_type", "name", "layer"]),
    default="layer_type",
    show_default=True,
    help="With --layers: group layers by type (Conv2d), by name or by layer path.",
)
@click.option(
    "--top", type=click.IntRange(min=1), default=10, show_default=True, help="With --layers: hotspots shown."
)
def trace(
    evaluation_id: str, output_format: str, output: str | None, layers: bool, group_by: str, top: int
) -> None:
    """Show or export the trace of one evaluation (ID or a unique prefix of it)."""
    from mlscope.cli.trace import trace_command

    trace_command(
        evaluation_id, output_format=output_format, output=output, layers=layers, group_by=group_by, top=top
    )


# ----- the farm ---------------------------------------------------------------------------------


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=8000, show_default=True, help="Port to listen on.")
@click.option("--threads", type=click.IntRange(min=1), default=8, show_default=True, help="Request threads.")
def api(host: str, port: int, threads: int) -> None:
    """Serve the HTTP API (/api/v1, OpenAPI at /api/openapi.json, docs at /api/docs)."""
    from mlscope.cli.farm import api_command

    api_command(host, port, threads)


@cli.command()
@click.option("--agent-id", help="This agent's id [default: the host name]; unique among live agents.")
@click.option(
    "--capability",
    "capabilities",
    multiple=True,
    metavar="CAP",
    help="Serve as a machine with this capability instead of the detected ones, e.g. "
    "cpu.x86_64.avx2 (repeatable; to act as several systems on one machine).",
)
@click.option("-f", "--frameworks", metavar="NAMES", help="Serve only these installed frameworks.")
@click.option(
    "--runner",
    "runners",
    default="process,inline",
    show_default=True,
    metavar="NAMES",
    help="Runners requests may use here.",
)
@click.option(
    "--heartbeat-ttl",
    type=click.FloatRange(min=1),
    default=15,
    show_default=True,
    help="Seconds after its last heartbeat that a silent agent drops out of the registry.",
)
@click.option(
    "--exclusive/--shared-host",
    default=True,
    show_default=True,
    help="Take turns with this host's other workers so that two never measure at once "
    "(--shared-host: run side by side, e.g. when pinned to separate cores).",
)
@click.option("--loglevel", default="INFO", show_default=True, help="DEBUG, INFO, WARNING or ERROR.")
def worker(
    agent_id: str | None,
    capabilities: tuple[str, ...],
    frameworks: str | None,
    runners: str,
    heartbeat_ttl: float,
    exclusive: bool,
    loglevel: str,
) -> None:
    """Join the farm: serve the queues this machine's capabilities and frameworks can serve.

    Stops on SIGTERM or Ctrl-C after finishing the running job (a second signal stops at once; the
    job then goes back to the queue).
    """
    from mlscope.cli.farm import worker_command

    worker_command(
        agent_id=agent_id,
        capabilities=list(capabilities),
        frameworks=_split_csv(frameworks),
        runners=_split_csv(runners),
        heartbeat_ttl_s=heartbeat_ttl,
        exclusive=exclusive,
        loglevel=loglevel,
    )


@cli.command()
@click.argument("model")
@click.option("-f", "--framework", required=True, help="The framework to run MODEL on.")
@click.option(
    "--on",
    "target",
    metavar="TARGET",
    help="A capability (cpu, cpu.x86_64, gpu.nvidia) or agent:<id> [default: cpu, or gpu for cuda].",
)
@_evaluation_options
@click.option("--wait", is_flag=True, help="Wait for the result and print it.")
@click.option("--wait-timeout", type=float, help="With --wait: give up after this many seconds.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the answer (or, with --wait, the result) as JSON."
)
def submit(
    model: str,
    framework: str,
    target: str | None,
    wait: bool,
    wait_timeout: float | None,
    as_json: bool,
    **fields: Any,
) -> None:
    """Queue MODEL on FRAMEWORK for the farm, through the API."""
    from mlscope.cli.farm import submit_command

    document = {"model": model, "framework": framework, **_request_fields(**fields)}
    if target:
        document["target"] = target
    sys.exit(submit_command(document, wait=wait, timeout_s=wait_timeout, as_json=as_json))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line per agent.")
def agents(as_json: bool) -> None:
    """List the live agents (workers) of the farm."""
    from mlscope.cli.farm import agents_command

    agents_command(as_json=as_json)


@cli.command()
@click.option("-m", "--models", required=True, metavar="NAMES", help="Comma-separated models.")
@click.option("-f", "--frameworks", required=True, metavar="NAMES", help="Comma-separated frameworks.")
@click.option(
    "--on",
    "targets",
    default="cpu",
    show_default=True,
    metavar="TARGETS",
    help="Comma-separated capabilities or agent:<id>; each capability fans out to every live agent "
    "that has it (one system per agent).",
)
@click.option(
    "--fan-out/--no-fan-out",
    default=True,
    show_default=True,
    help="Run a capability target on every live matching agent, or once on any of them.",
)
@_evaluation_options
@click.option(
    "-o",
    "--output",
    metavar="PREFIX",
    help="Write PREFIX.csv and PREFIX.json [default: mlscope-compare-<UTC time>].",
)
@click.option("--wait-timeout", type=float, help="Give up waiting after this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison rows as JSON lines.")
def compare(
    models: str,
    frameworks: str,
    targets: str,
    fan_out: bool,
    output: str | None,
    wait_timeout: float | None,
    as_json: bool,
    **fields: Any,
) -> None:
    """Compare models × frameworks × systems × batch sizes on the farm, side by side."""
    from mlscope.cli.farm import compare_command

    body = {
        "models": _split_csv(models),
        "frameworks": _split_csv(frameworks),
        "targets": _split_csv(targets),
        "fan_out": fan_out,
        **_request_fields(**fields),
    }
    sys.exit(compare_command(body, output=output, timeout_s=wait_timeout, as_json=as_json))


@cli.group()
def image() -> None:
    """Predictor images for `--runner docker`: one per framework, the framework and mlscope's
    predictor runtime only."""


@image.command("build")
@click.argument("frameworks", nargs=-1, metavar="[FRAMEWORK]...")
@click.option("--base", metavar="IMAGE", help="The base image [default: the Dockerfile's, python:3.11-slim].")
@click.option(
    "--ca-bundle",
    type=click.Path(dir_okay=False, exists=True),
    help="A CA bundle pip inside the build must trust (a TLS-intercepting proxy); copied into the "
    "build context for the build only.",
)
@click.option(
    "--network", help="The build's network, e.g. host (needed where pip reaches the index only so)."
)
@click.option("--rebuild", is_flag=True, help="Build even when an image of the same inputs exists.")
def image_build(
    frameworks: tuple[str, ...], base: str | None, ca_bundle: str | None, network: str | None, rebuild: bool
) -> None:
    """Build the predictor image of each FRAMEWORK [default: every framework with a Dockerfile]."""
    from mlscope.cli.images import build_command

    sys.exit(
        build_command(list(frameworks), base=base, ca_bundle=ca_bundle, network=network, rebuild=rebuild)
    )


@image.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line per image.")
def image_list(as_json: bool) -> None:
    """List the predictor images this Docker engine has."""
    from mlscope.cli.images import list_command

    list_command(as_json=as_json)


@cli.group()
def env() -> None:
    """Framework environments for `--runner process`: a virtual environment of its own for a framework
    whose requirements clash with mlscope's (MXNet 1.9 needs numpy < 1.24)."""


@env.command("create")
@click.argument("framework")
@click.option("--rebuild", is_flag=True, help="Make it again even if it exists.")
def env_create(framework: str, rebuild: bool) -> None:
    """Create (or update) the environment of FRAMEWORK under the cache directory."""
    from mlscope.cli.envs import create_command

    sys.exit(create_command(framework, rebuild=rebuild))


@env.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line per environment.")
def env_list(as_json: bool) -> None:
    """List the framework environments and the framework version each holds."""
    from mlscope.cli.envs import list_command

    list_command(as_json=as_json)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; a UserError anywhere becomes one line and exit code 2."""
    try:
        cli.main(args=argv, prog_name="mlscope", standalone_mode=False)
    except UserError as exc:
        _fail(str(exc))
    except click.exceptions.Abort:
        click.echo("mlscope: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("mlscope: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("MLSCOPE_DEBUG"):
            raise
        click.echo(
            f"mlscope: internal error: {type(exc).__name__}: {exc} (MLSCOPE_DEBUG=1 shows the traceback)",
            err=True,
        )
        sys.exit(1)
