"""What the `mlscope` command imports, read from `python -X importtime -m mlscope ...` (the `python -m
mlscope` door, and every module the run imported, kept or not): `--version`, `--help` and every
verb's `--help` import none of the heavy packages, Rich included (nothing is printed through it), and
`mlscope results list` on a SQLite store imports none of them but Rich, which prints its table: the
listing reads the file with sqlite3 (mlscope/store/sql/listing.py), not SQLAlchemy.

The speed these keep is measured by benchmarks/cli_start.py; this asserts on module names, which do
not vary with the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlscope.cli.verbs import VERBS
from mlscope.store import open_store

# Packages a command that only parses its arguments must never import (each costs a visible part of
# a second, or far more: the frameworks).
HEAVY = frozenset(
    {
        "torch",
        "onnxruntime",
        "tensorflow",
        "sqlalchemy",
        "celery",
        "kombu",
        "redis",
        "flask",
        "numpy",
        "pandas",
        "matplotlib",
        "plotly",
        "marshmallow",
    }
)
# What only printing needs: a command that prints no table or progress never imports it.
PRINTING = "rich"


def imported_packages(
    *args: str, env: dict[str, str] | None = None, codes: tuple[int, ...] = (0,)
) -> set[str]:
    """The top-level packages `python -X importtime -m mlscope ARGS` imported, as its stderr lists
    them (the command must end with one of `codes`)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mlscope", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode in codes, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert lines, f"no import times in stderr: {done.stderr[-2000:]}"
    # "import time: self [us] | cumulative | imported package", the name indented by its depth.
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines[1:]}


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("--help",),
        *((verb, "--help") for verb in sorted(VERBS)),
        ("results", "list", "--help"),
        ("models", "show", "--help"),
    ],
    ids=" ".join,
)
def test_parsing_imports_no_heavy_package(args: tuple[str, ...]) -> None:
    heavy = sorted(imported_packages(*args) & (HEAVY | {PRINTING}))

    assert not heavy, f"mlscope {' '.join(args)} imported {', '.join(heavy)}"


def test_results_list_of_a_sqlite_store_imports_no_heavy_package(tmp_path: Path) -> None:
    # Given a SQLite store that exists (creating one is not what a listing costs)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).close()

    # When it is listed
    packages = imported_packages("results", "list", env={"MLSCOPE_STORE_URL": url})

    # Then the listing was printed (Rich) and nothing heavy was imported: not SQLAlchemy (the file is
    # read with sqlite3), no numpy, broker, web app or framework
    assert PRINTING in packages
    heavy = sorted(packages & HEAVY)
    assert not heavy, f"mlscope results list imported {', '.join(heavy)}"


def test_listing_the_models_reads_manifests_without_numpy_or_a_framework(mlscope_env: dict[str, str]) -> None:
    # When the models are listed (every manifest read and checked against the steps it names)
    packages = imported_packages("models", "--json")

    # Then the steps' names and schemas were enough: their numpy implementation was not imported,
    # nor any framework (marshmallow checks the manifests: it is allowed here)
    heavy = sorted(packages & (HEAVY - {"marshmallow"}))
    assert not heavy, f"mlscope models imported {', '.join(heavy)}"


def test_a_short_run_s_own_process_imports_no_numpy(mlscope_env: dict[str, str]) -> None:
    # When a model is evaluated here (exit 3: measured, but not valid on a busy machine)
    packages = imported_packages(
        "run", "test_tiny_mlp", "-f", "onnxruntime", "-b", "1", "--min-seconds", "0", "--min-count", "5",
        "--max-seconds", "1", codes=(0, 3),
    )  # fmt: skip

    # Then the command's own process admitted, stored and printed the result without numpy (its
    # predictor process, whose imports are not in this one's stderr, measures with it) or a framework:
    # what that process imports before the measurement may start is what a short run waits for
    heavy = sorted(packages & (HEAVY - {"marshmallow", "sqlalchemy"}) | packages & {"numpy"})
    assert not heavy, f"mlscope run imported {', '.join(heavy)}"
