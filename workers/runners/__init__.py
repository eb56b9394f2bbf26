"""Runners: where a predictor runs. One module per runner, found by name."""

from __future__ import annotations

from mlscope.errors import UserError
from mlscope.workers.runners.base import Outcome, Runner
from mlscope.workers.runners.inline import InlineRunner
from mlscope.workers.runners.process import ProcessRunner

__all__ = ["RUNNERS", "InlineRunner", "Outcome", "ProcessRunner", "Runner", "get_runner"]

RUNNERS: dict[str, type[Runner]] = {cls.NAME: cls for cls in (InlineRunner, ProcessRunner)}


def get_runner(name: str) -> Runner:
    """A runner by name.

    Raises:
        UserError: no runner of that name; the message lists the known ones.
    """
    try:
        return RUNNERS[name]()
    except KeyError:
        raise UserError(
            f"unknown runner {name!r}; known runners: {', '.join(sorted(RUNNERS))}", field="runner"
        ) from None
