"""The registry of named pre- and post-processing steps: what a manifest may name, and how a step
is looked up. The steps themselves are registered by the modules that implement them
(`mlscope.contract.steps`, `mlscope.contract.text_steps`), which import this one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marshmallow import Schema

from mlscope.contract.errors import UserError

__all__ = [
    "STAGES",
    "STEPS",
    "StepDefinition",
    "get_step",
    "numpy_on_first_use",
    "register_step",
    "steps_for",
]

STAGES = ("pre", "post")


StepFunction = Callable[..., Any]


@dataclass(frozen=True)
class StepDefinition:
    """A registered step: what its parameters look like and what it does."""

    name: str
    stage: str
    schema: Schema
    fn: StepFunction


STEPS: dict[str, StepDefinition] = {}


def numpy_on_first_use(namespace: dict[str, Any]) -> Any:
    """A stand-in for a step module's `np` that imports numpy when a step first runs, then puts the
    module itself in `namespace` (the step module's globals). Checking a manifest needs the steps'
    names and schemas, not numpy: a command that only reads manifests (admitting a request, listing
    models) does not pay numpy's import."""

    class FirstUse:
        def __getattr__(self, name: str) -> Any:
            import numpy

            namespace["np"] = numpy
            return getattr(numpy, name)

    return FirstUse()


def register_step(
    name: str, schema: Schema | type[Schema], fn: StepFunction, stage: str = "pre"
) -> StepDefinition:
    """Make a step available to manifests.

    Args:
        name: the name manifests use, unique across both stages.
        schema: validates the step's parameters; its loaded output is passed to `fn` as keywords.
        fn: a pure function `fn(value, **params)` returning the transformed value.
        stage: "pre" (runs on an input sample) or "post" (runs on a model output).

    Returns:
        The registered definition.

    Raises:
        ValueError: the stage is unknown or the name is already taken.
    """
    if stage not in STAGES:
        raise ValueError(f"step {name!r}: stage must be one of {', '.join(STAGES)}; got {stage!r}")
    if name in STEPS:
        raise ValueError(f"step {name!r} is already registered (stage {STEPS[name].stage!r})")
    definition = StepDefinition(name, stage, schema() if isinstance(schema, type) else schema, fn)
    STEPS[name] = definition
    return definition


def get_step(name: str) -> StepDefinition:
    """The registered step called `name`.

    Raises:
        UserError: no step has that name; the message lists the known ones.
    """
    try:
        return STEPS[name]
    except KeyError:
        raise UserError(f"unknown step {name!r}; known steps: {', '.join(sorted(STEPS))}") from None


def steps_for(stage: str) -> list[str]:
    """The sorted names of the steps registered for a stage ("pre" or "post")."""
    return sorted(n for n, d in STEPS.items() if d.stage == stage)
