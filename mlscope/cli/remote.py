"""What the verbs that talk to the farm's API share (`submit`, `agents`, `compare`): a client from the
settings, as any script would make one, ONNX files on this machine uploaded before they are named,
and one progress bar while evaluations run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from mlscope.cli.render import err_console
from mlscope.contract.names import TERMINAL_STATUSES
from mlscope.contract.settings import load_settings

if TYPE_CHECKING:
    from mlscope.client import Client

__all__ = ["api_client", "follow", "upload_local_models"]


def api_client() -> Client:
    """A client of the API the settings name (MLSCOPE_API_URL and its token)."""
    from mlscope.client import Client

    return Client(settings=load_settings())


def upload_local_models(client: Client, refs: list[str]) -> list[str]:
    """`refs`, each that names an ONNX file here uploaded first and replaced by its `sha256:<hex>`
    (a line on stderr says so). Other references go as they are: the API refuses a factory or a
    directory with a message saying what to do instead.

    Raises:
        UserError: a path that leads nowhere; ApiError: the API refused an upload.
    """
    from mlscope.registry.references import reference_kind

    named = []
    for ref in refs:
        if reference_kind(ref) != "onnx":
            named.append(ref)
            continue
        answer = client.upload_model(ref)
        how = "uploaded" if answer["created"] else "already uploaded"
        size = f"{answer['size'] / 1e6:.1f} MB" if answer["size"] >= 100_000 else f"{answer['size']} bytes"
        # Never wrapped or cut: the ref is what names the model from now on.
        click.echo(f"{how} {ref} ({answer['name']}, {size}): {answer['ref']}", err=True)
        named.append(answer["ref"])
    return named


def upload_local_dataset(client: Client, document: dict[str, Any]) -> dict[str, Any]:
    """`document` with its `dataset`, when that names a folder or .zip here, uploaded first and
    replaced by its `sha256:<hex>` (a line on stderr says so); other names go as they are.

    Raises:
        ApiError: the API refused the upload (an image that does not decode, over its cap).
    """
    from pathlib import Path

    dataset = document.get("dataset")
    if not isinstance(dataset, str) or dataset.startswith("sha256:"):
        return document
    local = Path(dataset).expanduser()
    if not (local.is_dir() or (local.is_file() and local.suffix == ".zip")):
        return document
    answer = client.upload_dataset(local)
    how = "uploaded" if answer["created"] else "already uploaded"
    click.echo(f"{how} dataset {dataset}: {answer['ref']}", err=True)
    return {**document, "dataset": answer["ref"]}


def follow(client: Client, ids: list[str], timeout_s: float | None) -> list[dict[str, Any]]:
    """Poll until every evaluation has ended, with one progress bar for all of them."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[states]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err_console, transient=False) as progress:
        task = progress.add_task("evaluations", total=len(ids), states="queued")

        def update(current: dict[str, dict[str, Any]]) -> None:
            counts: dict[str, int] = {}
            for evaluation in current.values():
                counts[evaluation["status"]] = counts.get(evaluation["status"], 0) + 1
            done = sum(counts.get(s, 0) for s in TERMINAL_STATUSES)
            states = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            progress.update(task, completed=done, states=states)

        return client.wait(ids, timeout_s=timeout_s, on_update=update)
