"""The verbs of the `mlscope` command, loaded when used: the group knows each verb's name and the first
paragraph of its help without importing it, so `mlscope --version` and `mlscope --help` import none
of the verbs' modules (a verb's module imports what that verb needs: numpy, SQLAlchemy, a framework),
and a verb is imported only when it runs or its own help is asked for.

Each verb `NAME` is the click command of the same name in `mlscope.cli.NAME`. The table's help text
is the command's own first paragraph, words joined by single spaces (tests/unit/test_cli_verbs.py
holds the two equal, so they cannot drift).
"""

from __future__ import annotations

import importlib
from typing import Any

import click

__all__ = ["VERBS", "LazyGroup"]

# Verb → the first paragraph of its help, in the order the group was built (listed sorted).
VERBS: dict[str, str] = {
    "run": "Evaluate MODEL on this machine and store the results (with --on, on the farm).",
    "models": (
        "List the models that can be evaluated: the manifests (shipped and MLSCOPE_MANIFESTS) and the "
        "catalogue's architectures (torchvision:NAME, timm:NAME, hf:TYPE) and mlscope's own models with "
        "real weights (mlscope:NAME), each with its frameworks (bold: installed here). `mlscope models "
        "show NAME` prints the manifest a name resolves to."
    ),
    "frameworks": "List the frameworks mlscope knows and whether each can run here.",
    "results": "Read stored evaluation results.",
    "trace": "Show or export the trace of one evaluation (ID or a unique prefix of it).",
    "api": "Serve the HTTP API (/api/v1, OpenAPI at /api/openapi.json, docs at /api/docs).",
    "worker": "Join the farm: serve the queues this machine's capabilities and frameworks can serve.",
    "submit": (
        "Queue MODEL on FRAMEWORK for the farm, through the API. An .onnx file is uploaded first and "
        "named by its sha256:<hex> reference."
    ),
    "agents": "List the live agents (workers) of the farm.",
    "compare": (
        "Compare models × frameworks × systems × batch sizes on the farm, side by side (.onnx files among"
        " the models are uploaded first)."
    ),
    "diff": (
        "Compare evaluation B with evaluation A at every (scenario, batch size) both measured, or with "
        "--against-history judge A against the earlier runs of its series."
    ),
    "image": (
        "Predictor images for `--runner docker`: one per framework, the framework and mlscope's predictor"
        " runtime only."
    ),
    "env": (
        "Framework environments for `--runner process`: a virtual environment of its own for a framework "
        "whose requirements clash with mlscope's (MXNet 1.9 needs numpy < 1.24)."
    ),
    "store": "The results store's schema: which version a store has, and upgrading it.",
    "parity": "Run the same inputs through each framework and compare the outputs with the first one's.",
    "rerun": "Run evaluation ID's recorded request again and say whether the result reproduced.",
    "history": (
        "A model's performance over time: one series' points, oldest first, with the change points where "
        "it shifted (by how much, how surely)."
    ),
    "regressions": (
        "The series that got slower since DATE: every series with points since then, read whole, whose "
        "change points since then raised the median latency by more than --threshold."
    ),
    "plot": "Draw stored results as a chart.",
    "bricks": (
        "Estimate each REF's latency from its layers (bricks) and compare it with the model measured whole."
    ),
}


class LazyGroup(click.Group):
    """A click group whose VERBS are imported on first use; its command list is drawn from the table."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *VERBS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in VERBS and cmd_name not in self.commands:
            module = importlib.import_module(f"mlscope.cli.{cmd_name}")
            self.add_command(getattr(module, cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The verbs and their short help, as click's own listing words them, without importing any."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, self._short_help(ctx, name, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _short_help(self, ctx: click.Context, name: str, limit: int) -> str:
        if name in VERBS and name not in self.commands:
            # An unloaded verb's short help, made by click from its first paragraph as its own would be.
            return click.Command(name, help=VERBS[name]).get_short_help_str(limit)
        command: Any = self.get_command(ctx, name)
        return str(command.get_short_help_str(limit)) if command is not None else ""
