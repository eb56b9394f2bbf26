"""`mlscope worker`: join the farm as an agent that runs the evaluations it can serve."""

from __future__ import annotations

import click

from mlscope.cli.options import split_csv
from mlscope.cli.render import log_to_stderr
from mlscope.contract.settings import load_settings

__all__ = ["worker"]


@click.command()
@click.option("--agent-id", help="This agent's id [default: the host name]; unique among live agents.")
@click.option(
    "--capability",
    "capabilities",
    multiple=True,
    metavar="CAP",
    help="Serve as a machine with this capability instead of the detected ones, e.g. "
    "cpu.x86_64.avx2 (repeatable; to act as several systems on one machine).",
)
@click.option(
    "--extra-capability",
    "extra_capabilities",
    multiple=True,
    metavar="CAP",
    help="Serve this capability as well as the detected (or --capability) ones, e.g. slurm.a100 for "
    "the Slurm partition the worker runs in (repeatable).",
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
    extra_capabilities: tuple[str, ...],
    frameworks: str | None,
    runners: str,
    heartbeat_ttl: float,
    exclusive: bool,
    loglevel: str,
) -> None:
    """Join the farm: serve the queues this machine's capabilities and frameworks can serve.

    Stops on SIGTERM or Ctrl-C after finishing the running job (a second Ctrl-C, or SIGQUIT, stops
    at once; the job then goes back to the queue). Describes only the GPUs CUDA_VISIBLE_DEVICES
    shows it.
    """
    from mlscope.workers.worker import Worker

    log_to_stderr(loglevel)
    agent = Worker(
        load_settings(),
        agent_id=agent_id,
        capabilities=list(capabilities) or None,
        extra_capabilities=extra_capabilities,
        frameworks=split_csv(frameworks) or None,
        runners=split_csv(runners) or ("process", "inline"),
        heartbeat_ttl_s=heartbeat_ttl,
        exclusive=exclusive,
    )
    agent.run(loglevel=loglevel.upper())
