"""`mlscope models`: the models that can be evaluated (shipped manifests and MLSCOPE_MANIFESTS)."""

from __future__ import annotations

import click

from mlscope.cli.options import json_flag
from mlscope.cli.render import console, new_table, print_json_lines
from mlscope.contract.settings import load_settings

__all__ = ["models"]


@click.command()
@click.option("-f", "--framework", help="Only models with a manifest for this framework.")
@json_flag("Print JSON.")
def models(framework: str | None, as_json: bool) -> None:
    """List the models that can be evaluated (shipped manifests and MLSCOPE_MANIFESTS)."""
    from mlscope.registry.models import ModelRegistry
    from mlscope.runtime.frameworks import get_framework

    settings = load_settings()
    registry = ModelRegistry.load(settings.manifests)
    if framework:
        get_framework(framework)
    manifests = [m for m in registry.all() if framework is None or m.framework.name == framework]
    if as_json:
        print_json_lines(
            {
                "name": m.name,
                "version": m.version,
                "framework": m.framework.name,
                "framework_version": m.framework.version,
                "task": m.task,
                "source": {m.source.kind: m.source.target},
                "manifest_sha256": m.sha256,
                "origin": m.origin,
            }
            for m in manifests
        )
        return
    table = new_table(
        f"{len(manifests)} manifests", ("model", "version", "task", "framework", "source", "inputs")
    )
    for m in manifests:
        inputs = ", ".join(f"{t.name} {t.dtype}[{'x'.join(map(str, t.shape))}]" for t in m.inputs)
        table.add_row(
            m.name,
            m.version,
            m.task,
            f"{m.framework.name} {m.framework.version}",
            f"{m.source.kind}: {m.source.target}",
            inputs,
        )
    console.print(table)
