"""`mlscope models`: the models that can be evaluated — the manifests (shipped and MLSCOPE_MANIFESTS)
and the catalogue's architectures (`torchvision:resnet18`, `hf:bert`, ...) — and `mlscope models show
REF`, the manifest a name resolves to, ready to save and edit."""

from __future__ import annotations

from typing import Any

import click

from mlscope.cli.options import json_flag, model_options, model_options_document
from mlscope.cli.render import console, new_table, print_json_lines
from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings

__all__ = ["models"]


def _registry() -> Any:
    from mlscope.registry.models import ModelRegistry

    return ModelRegistry.load(load_settings().manifests)


def _installed() -> set[str]:
    """The frameworks that can run here."""
    from mlscope.runtime.frameworks import FRAMEWORKS, installed_version

    return {
        name
        for name, spec in FRAMEWORKS.items()
        if spec.unavailable is None and installed_version(spec) is not None
    }


def _lines(
    registry: Any,
    installed: set[str],
    *,
    task: str | None,
    framework: str | None,
    family: str | None,
    search: str | None,
) -> list[dict[str, Any]]:
    """One line per (model, framework), as `--json` prints them, filtered."""
    needle = (search or "").lower()
    lines = []
    for name, origin, model_family in registry.listing():
        if family is not None and model_family != family:
            continue
        if needle and needle not in name.lower() and needle not in (model_family or ""):
            continue
        for name_of_framework in registry.frameworks_for(name):
            if framework is not None and name_of_framework != framework:
                continue
            m = registry.get(name, name_of_framework)
            if task is not None and m.task != task:
                continue
            lines.append(
                {
                    "name": m.name,
                    "version": m.version,
                    "framework": m.framework.name,
                    "framework_version": m.framework.version,
                    "task": m.task,
                    "family": model_family,
                    "source": {m.source.kind: m.source.target},
                    "manifest_sha256": m.sha256,
                    "origin": m.origin if origin == "manifest" else "catalogue",
                    "inputs": ", ".join(
                        f"{t.name} {t.dtype}[{'x'.join(map(str, t.shape))}]" for t in m.inputs
                    ),
                    "installed": m.framework.name in installed,
                }
            )
    return lines


@click.group(invoke_without_command=True)
@click.option("-f", "--framework", help="Only models that have a manifest or entry for this framework.")
@click.option("--task", help="Only models of this task, e.g. image_classification.")
@click.option("--family", help="Only catalogue entries of this family, e.g. resnet, bert.")
@click.option("--search", metavar="TEXT", help="Only models whose name or family contains TEXT.")
@json_flag("Print JSON: one line per model and framework.")
@click.pass_context
def models(
    ctx: click.Context,
    framework: str | None,
    task: str | None,
    family: str | None,
    search: str | None,
    as_json: bool,
) -> None:
    """List the models that can be evaluated: the manifests (shipped and MLSCOPE_MANIFESTS) and the
    catalogue's architectures (torchvision:NAME, timm:NAME, hf:TYPE) and mlscope's own models with real
    weights (mlscope:NAME), each with its frameworks (bold: installed here). `mlscope models show
    NAME` prints the manifest a name resolves to."""
    if ctx.invoked_subcommand is not None:
        return
    from mlscope.runtime.frameworks import get_framework

    if framework:
        get_framework(framework)  # an unknown framework is named, with the known ones
    installed = _installed()
    lines = _lines(_registry(), installed, task=task, framework=framework, family=family, search=search)
    if as_json:
        print_json_lines(lines)
        return
    by_name: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_name.setdefault(line["name"], []).append(line)
    table = new_table(f"{len(by_name)} models", ("model", "task", "family", "frameworks", "source", "inputs"))
    for name, group in by_name.items():
        first = group[0]
        frameworks = ", ".join(
            f"[bold]{line['framework']}[/bold]" if line["installed"] else f"[dim]{line['framework']}[/dim]"
            for line in group
        )
        ((kind, target),) = first["source"].items()
        table.add_row(
            name, first["task"], first["family"] or "", frameworks, f"{kind}: {target}", first["inputs"]
        )
    console.print(table)
    console.print(f"[dim]bold: installed here ({', '.join(sorted(installed)) or 'none'})[/dim]")


@models.command("show")
@click.argument("ref")
@click.option(
    "-f", "--framework", help="The framework's manifest [default: the first installed here, PyTorch first]."
)
@model_options
@json_flag("Print the manifest as JSON instead of YAML.")
def show(
    ref: str,
    framework: str | None,
    as_json: bool,
    input_shapes: tuple[dict[str, list[int]], dict[str, str]],
    config: dict[str, Any],
    weights: str | None,
) -> None:
    """Print the manifest REF resolves to (a manifest or catalogue name such as torchvision:resnet18,
    an .onnx file, file.py:factory, a Hugging Face directory), ready to save as a YAML file, edit and
    put in MLSCOPE_MANIFESTS."""
    from mlscope.registry.references import ModelOptions

    options = ModelOptions.from_dict(model_options_document(input_shapes, config, weights))
    registry = _registry()
    frameworks = registry.frameworks_for(ref)  # unknown: named, with close names
    if framework is None:
        installed = _installed()
        from mlscope.runtime.frameworks import FRAMEWORKS

        runnable = [name for name in frameworks if name in installed] or frameworks
        # In the registry's order (PyTorch first): the framework most models are written for.
        framework = next((name for name in FRAMEWORKS if name in runnable), runnable[0])
    elif framework not in frameworks:
        raise UserError(
            f"model {ref!r} has no manifest for framework {framework!r}; it has: {', '.join(frameworks)}",
            field="framework",
        )
    document = registry.get(ref, framework, options).to_dict()
    if as_json:
        print_json_lines([document])
        return
    import yaml  # here: only this printing needs it, not `mlscope models --help`

    click.echo(f"# {ref} on {framework}: save as a .yaml file in a MLSCOPE_MANIFESTS directory to edit it")
    click.echo(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), nl=False)


@models.command("upload")
@click.argument("path", type=click.Path(dir_okay=False))
@json_flag("Print the API's answer as JSON.")
def upload(path: str, as_json: bool) -> None:
    """Upload the ONNX file PATH to the farm's API (MLSCOPE_API_URL) and print its sha256:<hex>
    reference, which names it in `mlscope submit` and `mlscope compare` (they upload .onnx files
    themselves too)."""
    from mlscope.cli.remote import api_client

    answer = api_client().upload_model(path)
    if as_json:
        print_json_lines([answer])
        return
    inputs = ", ".join(
        f"{spec['name']} {spec['dtype']}[{'x'.join(str(d) or '?' for d in spec['shape'])}]"
        for spec in answer["inputs"]
    )
    state = "uploaded" if answer["created"] else "already uploaded"
    click.echo(f"{answer['ref']}\n{state} as {answer['name']} ({answer['size']} bytes); inputs: {inputs}")
