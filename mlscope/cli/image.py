"""`mlscope image build` and `mlscope image list`: the predictor images of `--runner docker`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

import click

from mlscope.cli.options import json_flag
from mlscope.cli.render import console, new_table, print_json_lines
from mlscope.contract.errors import UserError

__all__ = ["image"]


@click.group()
def image() -> None:
    """Predictor images for `--runner docker`: one per framework, the framework and mlscope's
    predictor runtime only."""


# The build output worth a line on the terminal; everything else shows only when a build fails. The
# deps image's line (up to date, or building) comes only when the predictor image is built.
_PROGRESS_PREFIXES = (
    "deps image ",
    "building on the host: ",
    "Saved ",
    "building deps image ",
    "Step ",
    "Successfully installed",
    "Successfully built",
    "Successfully tagged",
)


def _size(size: int) -> str:
    return f"{size / 1e6:,.0f} MB"


def _check_buildable(frameworks: list[str]) -> None:
    """Refuse the whole command before any build when one name is wrong."""
    from mlscope.runtime.frameworks import get_framework
    from mlscope.workers.image_contexts import docker_frameworks

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

    def __init__(self, framework: str, where: str, *, tagged: bool = False) -> None:
        self.framework = framework
        self.where = where
        self.building = False
        # Builds running side by side interleave their lines: each then names its framework.
        self.indent = f"  {framework}: " if tagged else "  "

    def __call__(self, line: str) -> None:
        if not line.startswith(_PROGRESS_PREFIXES):
            return
        if not self.building:
            self.building = True
            where = f" ({self.where})" if self.where else ""
            click.echo(f"image {self.framework}: building{where}", err=True)
        click.echo(f"{self.indent}{line}", err=True)


@image.command("build")
@click.argument("frameworks", nargs=-1, metavar="[FRAMEWORK]...")
@click.option("--base", metavar="IMAGE", help="The base image [default: the Dockerfile's, python:3.11-slim].")
@click.option(
    "--ca-bundle",
    type=click.Path(dir_okay=False, exists=True),
    help="A CA bundle pip inside the build must trust (a TLS-intercepting proxy); copied into the "
    "build context for the build only.",
)
@click.option(
    "--network", help="The build's network, e.g. host (needed where pip reaches the index only so)."
)
@click.option("--rebuild", is_flag=True, help="Build even when an image of the same inputs exists.")
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Images built at once. A build waits on the network, pip and the engine's disk in turn, so "
    "two overlap even on a small machine; their progress lines then name their framework.",
)
def image_build(
    frameworks: tuple[str, ...],
    base: str | None,
    ca_bundle: str | None,
    network: str | None,
    rebuild: bool,
    jobs: int,
) -> None:
    """Build the predictor image of each FRAMEWORK [default: every framework with a Dockerfile]."""
    sys.exit(
        build_command(
            list(frameworks), base=base, ca_bundle=ca_bundle, network=network, rebuild=rebuild, jobs=jobs
        )
    )


def build_command(
    frameworks: list[str],
    *,
    base: str | None,
    ca_bundle: str | None,
    network: str | None,
    rebuild: bool,
    jobs: int = 1,
) -> int:
    """Build the predictor image of each framework (default: `BUILT_BY_DEFAULT`), skipping those up
    to date, up to `jobs` at once; a failed build does not stop the others.

    Returns:
        0 when every image is built or up to date, 1 when a build failed.

    Raises:
        UserError: an unknown or unbuildable framework, no Docker SDK or no engine (exit 2).
    """
    from mlscope.workers.images import BUILT_BY_DEFAULT, ImageBuildError, build_image, docker_client

    names = list(dict.fromkeys(frameworks)) or list(BUILT_BY_DEFAULT)
    _check_buildable(names)
    docker_client()  # no engine: one line and exit 2 before anything starts
    where = ", ".join(f"{key} {value}" for key, value in (("base", base), ("network", network)) if value)

    def build_one(name: str) -> bool:
        """Build one image and print its summary line; False when its build failed."""
        progress = _Progress(name, where, tagged=jobs > 1)
        start = time.monotonic()
        try:
            built = build_image(
                name, base=base, ca_bundle=ca_bundle, network=network, rebuild=rebuild, log=progress
            )
        except ImageBuildError as exc:
            click.echo(f"image {name}: {exc}; the build's last lines:", err=True)
            for line in exc.tail:
                click.echo(f"  | {line}", err=True)
            return False
        how = f"built in {time.monotonic() - start:.0f} s" if progress.building else "up to date"
        click.echo(
            f"image {name}: {built.name} {built.short_id} {how} ({name} {built.framework_version}, "
            f"{_size(built.size)})"
        )
        return True

    succeeded = _in_parallel(build_one, names, jobs) if jobs > 1 else [build_one(name) for name in names]
    failed = [name for name, ok in zip(names, succeeded, strict=True) if not ok]
    if failed:
        click.echo(f"mlscope: {len(failed)} image build(s) failed: {', '.join(failed)}", err=True)
        return 1
    return 0


def _in_parallel(build_one: Callable[[str], bool], names: list[str], jobs: int) -> list[bool]:
    """`build_one` of each name on up to `jobs` threads, in the names' order. On Ctrl-C the builds
    not yet started are dropped; those under way finish (the engine goes on with a build whether or
    not its client waits), and the interrupt is raised once they have."""
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="image-build") as pool:
        futures = [pool.submit(build_one, name) for name in names]
        try:
            return [future.result() for future in futures]
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            running = [name for name, future in zip(names, futures, strict=True) if future.running()]
            click.echo(f"image build: interrupted; waiting for {', '.join(running) or 'nothing'}", err=True)
            raise


@image.command("list")
@json_flag("Print one JSON line per image.")
def image_list(as_json: bool) -> None:
    """List the predictor images this Docker engine has."""
    # No Docker SDK or no engine: a UserError, one line and exit 2.
    from mlscope.workers.images import list_images

    images = list_images()
    if as_json:
        print_json_lines(asdict(found) for found in images)
        return
    table = new_table(f"{len(images)} predictor images", ("image", "id", "framework", "size", "created"))
    for found in images:
        table.add_row(
            found.name,
            found.short_id,
            f"{found.framework} {found.framework_version or '?'}",
            _size(found.size),
            found.created[:19].replace("T", " "),
        )
    console.print(table)
