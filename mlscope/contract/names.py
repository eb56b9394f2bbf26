"""The words every part shares: evaluation statuses, trace levels, scenario names, runner names and
the phases of a job. One definition each; the request schema, the store, the predictor runtime, the
API and the CLI all read them from here.
"""

from __future__ import annotations

import functools

__all__ = [
    "ACTIVE_STATUSES",
    "LEVEL_RANK",
    "PHASES",
    "RUNNERS",
    "SCENARIOS",
    "STATUSES",
    "TERMINAL_STATUSES",
    "TRACE_LEVELS",
    "level_enabled",
    "runner_names",
    "scenario_names",
]

# queued → running → succeeded | failed | cancelled; a redelivered job goes back to running.
STATUSES: tuple[str, ...] = ("queued", "running", "succeeded", "failed", "cancelled")
ACTIVE_STATUSES = frozenset({"queued", "running"})
TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})

# XSP's levels, shallow to deep: a request for one level records every level up to it.
TRACE_LEVELS: tuple[str, ...] = (
    "NO_TRACE",
    "APPLICATION",
    "MODEL",
    "FRAMEWORK",
    "LIBRARY",
    "HARDWARE",
    "FULL",
)
# NO_TRACE 0 < APPLICATION 1 < MODEL 2 < FRAMEWORK 3 < LIBRARY 4 < HARDWARE 5 < FULL 6.
LEVEL_RANK: dict[str, int] = {name: rank for rank, name in enumerate(TRACE_LEVELS)}

# mlscope's own measurement scenarios (the predictor runtime implements each).
SCENARIOS: tuple[str, ...] = ("single_stream", "offline", "server", "multi_stream", "generate")


@functools.cache
def _with_plugged(own: tuple[str, ...], group: str) -> tuple[str, ...]:
    """`own`, then the names installed distributions declare in the entry-point group `group`
    (their names read once per process, as the registries read them; nothing imported)."""
    from mlscope.contract.plugins import entry_points

    plugged = {entry.name for entry in entry_points(group)} - set(own)
    return own + tuple(sorted(plugged))


def scenario_names() -> tuple[str, ...]:
    """The scenarios a request may name: mlscope's own, then installed plugins' (`mlscope.scenarios`)."""
    return _with_plugged(SCENARIOS, "mlscope.scenarios")


# Where a predictor runs: in the caller's process, a child process, or its framework's container.
RUNNERS: tuple[str, ...] = ("inline", "process", "docker")


def runner_names() -> tuple[str, ...]:
    """The runners a request may name: mlscope's own, then installed plugins' (`mlscope.runners`)."""
    return _with_plugged(RUNNERS, "mlscope.runners")


# The phases of a job, in the order they run; an error names the phase it happened in.
PHASES: tuple[str, ...] = (
    "import",
    "fetch",
    "load",
    # A model compiled ahead of measuring (torch.compile), for the first batch size.
    "compile",
    "first_inference",
    # A warm start (when the job has a model store): the weights into the store, the model again
    # from its mapping, and its first inference.
    "publish",
    "warm_load",
    "warm_first_inference",
    "measure",
    "serve",
    "accuracy",
    "outputs",
    "trace",
    "report",
)


def level_enabled(requested: str, level: str) -> bool:
    """Whether a span of `level` is recorded when `requested` was asked for (NO_TRACE records none)."""
    rank = LEVEL_RANK[requested]
    return rank > 0 and LEVEL_RANK[level] <= rank
