"""What the verbs that talk to the farm's API share (`submit`, `agents`, `compare`): a client from the
settings, as any script would make one, ONNX files on this machine uploaded before they are named,
and one progress row while evaluations run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from mlscope.cli.consoles import escape
from mlscope.cli.progress import progress_board
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


def follow(client: Client, ids: list[str], timeout_s: float | None, *, quiet: bool) -> list[dict[str, Any]]:
    """Poll until every evaluation has ended, with one progress row for all of them (none when
    `quiet`, see cli/progress.py): which run now, done/total, elapsed, and the ETA at the pace of
    the ones done so far (several agents at once make that pace faster than any one evaluation)."""
    board = progress_board(quiet=quiet)
    row = board.add("evaluations", total=len(ids), now="queued")

    def update(current: dict[str, dict[str, Any]]) -> None:
        running = [e for e in current.values() if e["status"] == "running"]
        queued = sum(1 for e in current.values() if e["status"] not in TERMINAL_STATUSES and e not in running)
        done = sum(1 for e in current.values() if e["status"] in TERMINAL_STATUSES)
        now = [_running_label(e) for e in running[:_SHOWN_RUNNING]]
        if len(running) > _SHOWN_RUNNING:
            now.append(f"{len(running) - _SHOWN_RUNNING} more running")
        if queued:
            now.append(f"{queued} queued")
        row.update(done=done, now=escape("; ".join(now)))

    with board:
        return client.wait(ids, timeout_s=timeout_s, on_update=update)


# Running evaluations named on the progress row; more are counted.
_SHOWN_RUNNING = 2


def _running_label(evaluation: dict[str, Any]) -> str:
    """e.g. "resnet18/pytorch batch 1,8 on agent:a"."""
    request = evaluation.get("request") or {}
    model = (evaluation.get("model") or {}).get("name") or request.get("model", "?")
    framework = (evaluation.get("framework") or {}).get("name") or request.get("framework", "?")
    sizes = ",".join(str(size) for size in request.get("batch_sizes") or [])
    batch = f" batch {sizes}" if sizes else ""
    target = f" on {request['target']}" if request.get("target") else ""
    return f"{model}/{framework}{batch}{target}"
