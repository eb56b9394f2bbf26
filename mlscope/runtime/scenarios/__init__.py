"""The scenarios, after MLPerf LoadGen: how queries are issued, and what throughput means for each.

One module per scenario, each owning its run and what it asks of a job (the hooks of
`mlscope.runtime.measure.scenario_base.Scenario`): `single_stream`, `offline`, `server`,
`multi_stream` (the last two share `loaded`, one run of the load generator) and `generate` (requests
to a generation engine, which runs the whole job itself). `SCENARIOS` is the registry of every
scenario by name: the `mlscope.scenarios` entry-point group, whose built-ins are `BUILTIN_SCENARIOS`;
a third party's scenario is an entry point naming its `Scenario` class (docs/architecture.md, "Where
a change goes"). Nothing is imported until a scenario is looked up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlscope.contract.errors import UserError
from mlscope.contract.plugins import Registry, UnknownPlugin

if TYPE_CHECKING:
    from mlscope.runtime.measure.scenario_base import Scenario

__all__ = ["BUILTIN_SCENARIOS", "SCENARIOS", "get_scenario"]

# mlscope's own scenarios (pyproject.toml's `mlscope.scenarios` entry points): name → "module:class".
BUILTIN_SCENARIOS: dict[str, str] = {
    "single_stream": "mlscope.runtime.scenarios.single_stream:SingleStream",
    "offline": "mlscope.runtime.scenarios.offline:Offline",
    "server": "mlscope.runtime.scenarios.server:Server",
    "multi_stream": "mlscope.runtime.scenarios.multi_stream:MultiStream",
    "generate": "mlscope.runtime.scenarios.generate:Generate",
}

# Every scenario, by name.
SCENARIOS: Registry[type[Scenario]] = Registry("mlscope.scenarios", BUILTIN_SCENARIOS)


def get_scenario(name: str) -> Scenario:
    """The scenario registered under `name`.

    Args:
        name: a key of SCENARIOS, e.g. "single_stream".

    Returns:
        A new instance of it.

    Raises:
        UserError: no scenario has that name; the message lists the known ones.
    """
    try:
        return SCENARIOS[name]()
    except (UnknownPlugin, TypeError):
        known = ", ".join(sorted(SCENARIOS))
        raise UserError(f"unknown scenario {name!r}: expected one of {known}", field="scenario") from None
