"""DLBricks on a farm: `mlscope bricks --on` with two workers (two systems) behind a real API, Redis
and PostgreSQL of this benchmark's own. How close is each system's estimate to the model measured
whole there, and what do the bricks cost on a farm (upload, queue, one predictor job per model per
system, results read back through the API) against measuring every model whole there?

Prints per system and model: estimate, measured, error, critical path/measured, bricks
new/reused/unique, seconds on bricks and whole; then per system the median |error| and the ratio
whole/bricks after 1..N models. Both workers run on this machine, so they take turns measuring (one
agent of a host measures at a time): the figures are each system's, not a race between them.

Usage: python benchmarks/bricks_farm.py [--limit 6] [--threads 1] [REF ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bricks import MODELS  # noqa: E402

from mlscope.contract.settings import load_settings  # noqa: E402
from mlscope.workers.bricks import BrickRuns  # noqa: E402
from tests.fixtures.private_postgres import PrivatePostgres, _binaries  # noqa: E402
from tests.fixtures.private_redis import PrivateRedis  # noqa: E402
from tests.integration.farm import TOKEN, Farm  # noqa: E402


def _row(report: dict[str, Any]) -> str:
    crit = (report.get("bounds") or {}).get("critical_path_ms")
    measured = report.get("measured_ms")
    ratio = f"{crit / measured:9.3f}" if crit and measured else f"{'-':>9}"
    error = report.get("error_pct")
    counts = report["bricks"]
    return (
        f"{report['model']:<34}{_ms(report.get('estimate_ms'))}{_ms(measured)}"
        f"{'-' if error is None else f'{error:+.1f}%':>9}{ratio}"
        f"{counts['measured_now']:>5}/{counts['reused']:>3}/{counts['unique']:>3}"
        f"{report['seconds']['bricks']:>10.1f}{report['seconds']['whole']:>9.1f}"
    )


def _ms(value: float | None) -> str:
    return f"{'-':>10}" if value is None else f"{value:>10.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("refs", nargs="*", help="models [default: the first --limit of bricks.py's]")
    parser.add_argument("--limit", type=int, default=6, help="how many of the default models")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of every measurement")
    args = parser.parse_args()
    refs = args.refs or MODELS[: args.limit]
    binaries = _binaries()
    if binaries is None:
        raise SystemExit("PostgreSQL's server programs (initdb, pg_ctl) are not installed")
    root = Path(tempfile.mkdtemp(prefix="mlscope-bricks-farm-"))
    postgres_dir = Path(tempfile.mkdtemp(prefix="mlscope-postgres-"))
    postgres = PrivatePostgres(binaries, postgres_dir)
    redis = PrivateRedis(root / "redis")
    farm: Farm | None = None
    try:
        postgres.start()
        redis.start()
        farm = Farm(
            broker_url=redis.url,
            store_url=postgres.create_database("bricks"),
            tmp=root,
            # The user's cache, as the CLI's below: each model's ONNX graph is exported once, before
            # the clock starts, and neither side counts it (as in benchmarks/bricks.py).
            cache_dir=load_settings().cache_dir,
            registry_url=redis.url,
        )
        farm.start_api()
        targets = [farm.capability(name) for name in ("a", "b")]
        for name, capability in zip(("agent-a", "agent-b"), targets, strict=True):
            farm.start_worker(name, capability)
        env = {**farm.env, "MLSCOPE_API_TOKEN": TOKEN, "MLSCOPE_STORE_URL": f"sqlite:///{root / 'cli.db'}"}
        exporter = BrickRuns(load_settings())
        for ref in refs:  # each graph exported into the shared cache before the clock starts
            exporter.resolve(ref)
        command = [sys.executable, "-m", "mlscope", "bricks", *refs, "--on", ",".join(targets)]
        command += ["--threads", str(args.threads), "--json"]
        began = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=root)
        wall = time.perf_counter() - began
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise SystemExit(f"mlscope bricks failed ({done.returncode}):\n{done.stderr[-3000:]}")
        *reports, total = lines
        print(
            f"{len(refs)} models on 2 systems (workers on this machine), exit {done.returncode}; ms, batch 1"
        )
        print(
            f"{'model':<34}{'estimate':>10}{'measured':>10}{'error':>9}{'crit/meas':>9}"
            f"{'new/reu/uniq':>13}{'s bricks':>10}{'s whole':>9}"
        )
        for agent, part in total["agents"].items():
            print(f"-- {agent}")
            for report in (r for r in reports if r.get("agent") == agent):
                print(_row(report))
            median = part["median_abs_error_pct"]
            ratio = part["time_ratio_whole_to_bricks"]
            errors = [abs(r["error_pct"]) for r in reports if r.get("agent") == agent and r.get("error_pct")]
            print(
                f"   median |error| {'-' if median is None else f'{median:.2f}%'} over {len(errors)} models "
                f"(max {max(errors, default=0):.2f}%); bricks {part['seconds']['bricks']:.1f} s, whole "
                f"{part['seconds']['whole']:.1f} s, ratio whole/bricks "
                f"{'-' if ratio is None else f'{ratio:.2f}x'}"
            )
            steps = " ".join(f"{s['ratio']:.2f}" for s in part["cumulative"] if s["ratio"] is not None)
            print(f"   whole/bricks after 1..N models: {steps}")
        medians = [p["median_abs_error_pct"] for p in total["agents"].values() if p["median_abs_error_pct"]]
        print(
            f"in all: {len(reports)} reports in {wall:.0f} s; median |error| per system "
            f"{', '.join(f'{m:.2f}%' for m in medians)} (mean {statistics.fmean(medians):.2f}%)"
        )
    finally:
        if farm is not None:
            farm.stop()
        redis.stop()
        if postgres.is_running():
            postgres.stop()
        shutil.rmtree(postgres_dir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
