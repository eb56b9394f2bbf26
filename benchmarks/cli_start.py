"""How long the `mlscope` command takes to answer what needs no work: its version, its help, a verb's
help, and the newest results of a store of 10k evaluations.

Each round runs every command once, in turn, with `python -c pass` first (the interpreter's own start,
the floor no command can go under), so a machine that slows down mid-run slows every command alike;
after one unmeasured round (it writes the bytecode an installed package would already have, and warms
the page cache) --repeat rounds are timed. The table gives each command's median wall time, its
median CPU time (user + system: less moved by other processes than wall time), its median wall time
less `python -c pass`'s, the target and whether the median meets it.

The store is a SQLite file in a temporary directory, filled through the store API with realistic
evaluations (benchmarks/_store_fill.py, --raw raw latencies per point: a listing reads none of them);
the commands run with MLSCOPE_STORE_URL naming it and never see the user's store. The command is the
`mlscope` script beside this interpreter when there is one, else `python -m mlscope`.

Targets: `--version`, `--help` and every verb's `VERB --help` ≤ 0.1 s; `results list` ≤ 0.3 s.

Usage: python benchmarks/cli_start.py [--repeat 9] [--size 10000] [--raw 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from _store_fill import Evaluations, SQLiteBackend, fill

from mlscope.cli.verbs import VERBS
from mlscope.store import open_store

FILL_BATCH = 1000


def mlscope_command() -> list[str]:
    """How this interpreter's install runs `mlscope`."""
    script = Path(sys.executable).with_name("mlscope")
    return [str(script)] if script.exists() else [sys.executable, "-m", "mlscope"]


def make_store(tmp: Path, size: int, raw: int) -> str:
    """A SQLite store of `size` evaluations in `tmp`; its URL."""
    backend = SQLiteBackend(tmp)
    evaluations = Evaluations(raw_per_point=raw, now=datetime.now(timezone.utc))
    with open_store(backend.url) as store:
        while evaluations.made < size:
            fill(store, evaluations.take(min(FILL_BATCH, size - evaluations.made)))
    return backend.url


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `argv`, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} ended with {done.returncode}: {done.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="timed rounds (median of these)")
    parser.add_argument("--size", type=int, default=10_000, help="evaluations in the store")
    parser.add_argument("--raw", type=int, default=20, help="raw latencies per point")
    args = parser.parse_args()

    mlscope = mlscope_command()
    with tempfile.TemporaryDirectory(prefix="mlscope-cli-start-") as tmp:
        started = time.perf_counter()
        url = make_store(Path(tmp), args.size, args.raw)
        print(f"store: {args.size:,} evaluations in SQLite, filled in {time.perf_counter() - started:.1f} s")
        # An installed package's bytecode is compiled when it is installed: let the warm-up round write
        # it here too, whatever this shell says.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["MLSCOPE_STORE_URL"] = url
        commands: list[tuple[str, list[str], float | None]] = [
            ("python -c pass", [sys.executable, "-c", "pass"], None),
            ("mlscope --version", [*mlscope, "--version"], 0.1),
            ("mlscope --help", [*mlscope, "--help"], 0.1),
            *((f"mlscope {verb} --help", [*mlscope, verb, "--help"], 0.1) for verb in sorted(VERBS)),
            (f"mlscope results list ({args.size:,})", [*mlscope, "results", "list"], 0.3),
        ]
        walls: dict[str, list[float]] = {name: [] for name, _, _ in commands}
        cpus: dict[str, list[float]] = {name: [] for name, _, _ in commands}
        for round_ in range(args.repeat + 1):
            for name, argv, _ in commands:
                wall, cpu = timed(argv, env)
                if round_:
                    walls[name].append(wall)
                    cpus[name].append(cpu)

    floor = statistics.median(walls[commands[0][0]])
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"command: {' '.join(mlscope)}; median of {args.repeat} rounds; load average {load}")
    print(f"{'command':<32} {'wall s':>8} {'cpu s':>8} {'- pass':>8} {'target':>8}  met")
    for name, _, target in commands:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        judged = "" if target is None else f"{target:8.1f}  {'yes' if wall <= target else 'NO'}"
        print(f"{name:<32} {wall:8.3f} {cpu:8.3f} {wall - floor:8.3f} {judged}")


if __name__ == "__main__":
    main()
