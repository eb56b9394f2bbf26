"""The CLI's verbs are loaded when used: `mlscope --version` and `mlscope --help` import none of the
heavy modules (frameworks, the store's SQLAlchemy, the API's Flask, numpy ...) nor any verb's module,
`mlscope VERB --help` none of the heavy ones, and the help the lazy group lists is the verbs' own,
word for word (mlscope/cli/verbs.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click
import pytest

from mlscope.cli.verbs import VERBS, LazyGroup

# What `--help` must never import (the list), by top-level package.
HEAVY = {
    "torch",
    "onnxruntime",
    "tensorflow",
    "sqlalchemy",
    "celery",
    "flask",
    "numpy",
    "pandas",
    "matplotlib",
    "plotly",
}


def imported(*args: str) -> list[str]:
    """The modules `mlscope ARGS` has imported when it ends (sys.modules, in import order)."""
    code = (
        "import sys\n"
        "from mlscope.cli import main\n"
        "try:\n"
        f"    main({list(args)!r})\n"
        "finally:\n"
        "    print('\\n'.join(['--modules--', *sys.modules]), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr.split("--modules--\n", 1)[1].split()


@pytest.mark.parametrize("args", [("--version",), ("--help",)], ids=["version", "help"])
def test_the_version_and_the_help_import_nothing_heavy_and_no_verb(args: tuple[str, ...]) -> None:
    modules = imported(*args)
    heavy = sorted({name for name in modules if name.split(".")[0] in HEAVY})
    assert not heavy, f"mlscope {' '.join(args)} imported {', '.join(heavy)}"
    verbs = sorted(name for name in modules if name.removeprefix("mlscope.cli.") in VERBS)
    assert not verbs, f"mlscope {' '.join(args)} imported the verbs' modules {', '.join(verbs)}"


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_verb_s_help_imports_nothing_heavy(verb: str) -> None:
    heavy = sorted({name for name in imported(verb, "--help") if name.split(".")[0] in HEAVY})
    assert not heavy, f"mlscope {verb} --help imported {', '.join(heavy)}"


def test_the_table_names_every_verb_with_its_own_help() -> None:
    for name, text in VERBS.items():
        command = getattr(importlib.import_module(f"mlscope.cli.{name}"), name)
        assert isinstance(command, click.Command) and command.name == name
        first = " ".join((command.help or "").split("\n\n")[0].split())
        assert text == first, f"VERBS[{name!r}] differs from the command's help: {first!r}"
        assert command.short_help is None, f"{name} has a short_help the table does not hold"


@pytest.mark.parametrize("width", [60, 80, 100, 200])
def test_the_lazy_listing_is_click_s_own_listing(width: int) -> None:
    group = LazyGroup(name="mlscope")

    def listing(format_commands) -> str:
        context = click.Context(group, info_name="mlscope", terminal_width=width, max_content_width=width)
        formatter = context.make_formatter()
        format_commands(group, context, formatter)
        return formatter.getvalue()

    lazy = listing(LazyGroup.format_commands)
    assert not group.commands, "listing the verbs imported one"
    assert lazy == listing(click.Group.format_commands)  # click's own, every verb loaded
    assert set(group.commands) == set(VERBS)
