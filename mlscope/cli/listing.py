"""`mlscope models` and `mlscope frameworks`: what can be evaluated, and what can run here."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from mlscope.cli.render import console, print_json_line
from mlscope.contract.settings import load_settings
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.frameworks import FRAMEWORKS, get_framework, installed_version

__all__ = ["frameworks_command", "models_command"]


def models_command(framework: str | None, *, as_json: bool) -> None:
    settings = load_settings()
    registry = ModelRegistry.load(settings.manifests)
    if framework:
        get_framework(framework)
    manifests = [m for m in registry.all() if framework is None or m.framework.name == framework]
    if as_json:
        for m in manifests:
            print_json_line(
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
            )
        return
    table = Table(title=f"{len(manifests)} manifests", title_justify="left")
    for column in ("model", "version", "task", "framework", "source", "inputs"):
        table.add_column(column)
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


def frameworks_command(*, as_json: bool) -> None:
    rows = []
    for name in sorted(FRAMEWORKS):
        spec = FRAMEWORKS[name]
        version = installed_version(spec) if spec.unavailable is None else None
        reason = None if version else f"not installed ({spec.install_hint})"
        rows.append(
            {
                "name": name,
                "display": spec.display,
                "installed": version,
                "available": version is not None,
                "reason": f"unavailable: {spec.unavailable}" if spec.unavailable is not None else reason,
                "sources": sorted(spec.sources),
            }
        )
    if as_json:
        for row in rows:
            print_json_line(row)
        return
    table = Table(title_justify="left")
    for column in ("framework", "name", "installed", "runs sources", "note"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["name"],
            row["display"],
            row["installed"] or "-",
            ", ".join(row["sources"]),
            escape(row["reason"] or ""),
        )
    console.print(table)
