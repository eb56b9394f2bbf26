"""`mlscope image build` and `mlscope image list`: the predictor images of `--runner docker`."""

from __future__ import annotations

import time
from dataclasses import asdict

import click
from rich.table import Table

from mlscope.cli.render import console, print_json_line
from mlscope.contract.errors import UserError
from mlscope.runtime.frameworks import get_framework
from mlscope.workers.images import (
    BUILT_BY_DEFAULT,
    ImageBuildError,
    ImageInfo,
    build_image,
    docker_client,
    docker_frameworks,
    list_images,
)

__all__ = ["build_command", "list_command"]

# The build output worth a line on the terminal; everything else shows only when a build fails.
_PROGRESS_PREFIXES = ("Step ", "Successfully installed", "Successfully built", "Successfully tagged")


def _size(size: int) -> str:
    return f"{size / 1e6:,.0f} MB"


def _check_buildable(frameworks: list[str]) -> None:
    """Refuse the whole command before any build when one name is wrong."""
    buildable = docker_frameworks()
    for name in frameworks:
        spec = get_framework(name)
        if spec.unavailable:
            raise UserError(f"{spec.display} has no image: {spec.unavailable}")
        if spec.name not in buildable:
            raise UserError(
                f"no predictor image for '{name}': ops/images/ has Dockerfiles for {', '.join(buildable)}"
            )


class _Progress:
    """Prints the build's progress lines, announced by one line when a build really starts (an
    image found up to date prints nothing but its summary)."""

    def __init__(self, framework: str, where: str) -> None:
        self.framework = framework
        self.where = where
        self.building = False

    def __call__(self, line: str) -> None:
        if not line.startswith(_PROGRESS_PREFIXES):
            return
        if not self.building:
            self.building = True
            where = f" ({self.where})" if self.where else ""
            click.echo(f"image {self.framework}: building{where}", err=True)
        click.echo(f"  {line}", err=True)


def build_command(
    frameworks: list[str], *, base: str | None, ca_bundle: str | None, network: str | None, rebuild: bool
) -> int:
    """Build the predictor image of each framework (default: `BUILT_BY_DEFAULT`), skipping those up
    to date; a failed build does not stop the others.

    Returns:
        0 when every image is built or up to date, 1 when a build failed.

    Raises:
        UserError: an unknown or unbuildable framework, no Docker SDK or no engine (exit 2).
    """
    names = list(dict.fromkeys(frameworks)) or list(BUILT_BY_DEFAULT)
    _check_buildable(names)
    docker_client()  # no engine: one line and exit 2 before anything starts
    failed = []
    where = ", ".join(f"{key} {value}" for key, value in (("base", base), ("network", network)) if value)
    for name in names:
        progress = _Progress(name, where)
        start = time.monotonic()
        try:
            image = build_image(
                name, base=base, ca_bundle=ca_bundle, network=network, rebuild=rebuild, log=progress
            )
        except ImageBuildError as exc:
            failed.append(name)
            click.echo(f"image {name}: {exc}; the build's last lines:", err=True)
            for line in exc.tail:
                click.echo(f"  | {line}", err=True)
            continue
        how = f"built in {time.monotonic() - start:.0f} s" if progress.building else "up to date"
        click.echo(
            f"image {name}: {image.name} {image.short_id} {how} ({name} {image.framework_version}, "
            f"{_size(image.size)})"
        )
    if failed:
        click.echo(f"mlscope: {len(failed)} image build(s) failed: {', '.join(failed)}", err=True)
        return 1
    return 0


def list_command(*, as_json: bool) -> None:
    """Print the predictor images the engine has: a table, or one JSON line each.

    Raises:
        UserError: no Docker SDK or no engine.
    """
    images: list[ImageInfo] = list_images()
    if as_json:
        for image in images:
            print_json_line(asdict(image))
        return
    table = Table(title=f"{len(images)} predictor images", title_justify="left")
    for column in ("image", "id", "framework", "size", "created"):
        table.add_column(column)
    for image in images:
        table.add_row(
            image.name,
            image.short_id,
            f"{image.framework} {image.framework_version or '?'}",
            _size(image.size),
            image.created[:19].replace("T", " "),
        )
    console.print(table)
