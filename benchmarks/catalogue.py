"""Which catalogue entries really run: every entry on PyTorch and on ONNX Runtime, at batch 1.

Each (entry, framework) runs in a child process of its own with a time limit, so a hang, a crash or
a model too big for memory costs that entry only. The child does what an evaluation does, through
the same predictor classes: fetch (for ONNX Runtime: the export to ONNX, timed on its own), load,
one warm-up inference, a few timed ones, then the outputs through `outputs_to_numpy` and the
manifest's postprocessing. It prints a row per entry, then the totals.

    python benchmarks/catalogue.py [--frameworks pytorch,onnxruntime] [--only REGEX]
                                   [--timeout-s 300] [--runs 5] [--json]

Every child builds random weights (no download); exported graphs go to a temporary cache that is
removed at the end (--keep-cache DIR keeps them in DIR instead).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULT_PREFIX = "CATALOGUE-RESULT "
FRAMEWORKS = ("pytorch", "onnxruntime")


# ---- the child: one entry on one framework -----------------------------------------------------


def _reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:300]


def run_one(ref: str, framework: str, cache: Path, runs: int) -> dict[str, Any]:
    """Fetch, load, warm up, time `runs` inferences and post-process one catalogue entry."""
    import numpy as np

    from mlscope.contract.options import PredictorOptions
    from mlscope.contract.steps import apply_steps
    from mlscope.registry.catalogue import Catalogue
    from mlscope.runtime.frameworks import load_predictor_class
    from mlscope.runtime.predictors.inputs import synthetic_batches

    result: dict[str, Any] = {"ref": ref, "framework": framework, "status": "failed", "phase": "resolve"}
    manifest = Catalogue.load().manifest(ref, framework, measured_failing=True)
    predictor = load_predictor_class(framework)(
        manifest=manifest, options=PredictorOptions(), cache_dir=cache
    )
    try:
        result["phase"] = "fetch"
        started = time.perf_counter()
        try:
            predictor.fetch()
        except Exception as exc:
            if "to ONNX failed" in str(exc):  # the exporter's own words (onnxruntime/export.py)
                result["status"] = "export_failed"
            raise
        result["fetch_s"] = round(time.perf_counter() - started, 2)
        # Whether fetch made a graph (ONNX Runtime exports torchvision and transformers sources).
        exported = list((cache / "onnx").glob(f"{manifest.sha256}-*.onnx"))
        if exported:
            result["exported_mb"] = round(sum(path.stat().st_size for path in exported) / 1e6, 1)
        result["phase"] = "load"
        started = time.perf_counter()
        predictor.load()
        result["load_s"] = round(time.perf_counter() - started, 2)
        (arrays,) = synthetic_batches(manifest, 1, 1)
        batch = predictor.prepare(arrays)
        result["phase"] = "warm-up"
        started = time.perf_counter()
        outputs = predictor.predict(batch)
        result["warmup_ms"] = round((time.perf_counter() - started) * 1000, 2)
        result["phase"] = "predict"
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            outputs = predictor.predict(batch)
            times.append((time.perf_counter() - started) * 1000)
        result["median_ms"] = round(float(np.median(times)), 2)
        result["phase"] = "postprocess"
        arrays_out = predictor.outputs_to_numpy(outputs)
        for spec in manifest.outputs:
            if spec.name in arrays_out:
                apply_steps(spec.steps, arrays_out[spec.name])
        result.update(status="ran", phase="done", outputs=sorted(arrays_out))
    except Exception as exc:
        result["reason"] = _reason(exc)
    finally:
        predictor.close()
    return result


def _child(argv: list[str]) -> int:
    ref, framework, cache, runs = argv[0], argv[1], Path(argv[2]), int(argv[3])
    try:
        result = run_one(ref, framework, cache, runs)
    except Exception as exc:
        result = {"ref": ref, "framework": framework, "status": "failed", "phase": "resolve"}
        result["reason"] = _reason(exc)
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


# ---- the parent: the sweep ---------------------------------------------------------------------


def _tail(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def sweep_one(ref: str, framework: str, cache: Path, runs: int, timeout_s: float) -> dict[str, Any]:
    """Run one entry on one framework in a child process (its own session, killed whole on timeout)."""
    command = [sys.executable, __file__, "--child", ref, framework, str(cache), str(runs)]
    started = time.perf_counter()
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the child and its exporter, nothing else
        child.communicate()
        return {
            "ref": ref,
            "framework": framework,
            "status": "failed",
            "phase": "timeout",
            "reason": f"no result within {timeout_s:g} s",
            "wall_s": round(time.perf_counter() - started, 1),
        }
    found = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if found:
        result: dict[str, Any] = json.loads(found[-1][len(RESULT_PREFIX) :])
    else:
        how = f"signal {-child.returncode}" if child.returncode < 0 else f"exit code {child.returncode}"
        result = {
            "ref": ref,
            "framework": framework,
            "status": "failed",
            "phase": "crash",
            "reason": f"child died ({how}): {_tail(stderr)}",
        }
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def _cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "-"
    if result["status"] == "ran":
        return "exported+ran" if "exported_mb" in result else "ran"
    if result["status"] == "export_failed":
        return f"export failed: {result.get('reason', '')}"
    return f"failed ({result['phase']}): {result.get('reason', '')}"


def _ms(result: dict[str, Any] | None) -> str:
    return f"{result['median_ms']:.1f}" if result and "median_ms" in result else "-"


def _row(entry: Any, results: dict[str, dict[str, Any]], frameworks: list[str]) -> str:
    cells = [f"{_cell(results.get(name))[:46]:<46}" for name in frameworks]
    times = " / ".join(_ms(results.get(name)) for name in frameworks)
    return f"{entry.ref:<42} {entry.family:<22} {' '.join(cells)} {times}"


def totals(entries: list[Any], results: list[dict[str, Any]], frameworks: list[str]) -> dict[str, Any]:
    """Counts over the sweep: resolved, ran per framework, exported, failed, distinct architectures."""
    family = {entry.ref: entry.family for entry in entries}
    summary: dict[str, Any] = {"entries": len(entries), "resolved": len(entries)}
    for name in frameworks:
        mine = [r for r in results if r["framework"] == name]
        ran = [r for r in mine if r["status"] == "ran"]
        summary[name] = {
            "tried": len(mine),
            "ran": len(ran),
            "failed": len(mine) - len(ran),
            "architectures_ran": len({r["ref"] for r in ran}),
            "families_ran": len({family[r["ref"]] for r in ran}),
        }
        exported = sum("exported_mb" in r for r in mine)
        export_failed = sum(r["status"] == "export_failed" for r in mine)
        if exported or export_failed:
            summary[name]["exported"] = exported
            summary[name]["export_failed"] = export_failed
    summary["resolved"] -= len({r["ref"] for r in results if r["phase"] == "resolve"})
    return summary


def _print_totals(summary: dict[str, Any], frameworks: list[str], out: Any) -> None:
    print(f"\nresolved: {summary['resolved']} of {summary['entries']} entries", file=out)
    for name in frameworks:
        part = summary[name]
        line = f"{name}: ran {part['ran']} of {part['tried']}"
        if "exported" in part:
            line += f", exported {part['exported']} (export failed {part['export_failed']})"
        line += f", failed {part['failed']}"
        line += f"; distinct architectures that ran: {part['architectures_ran']}"
        line += f" ({part['families_ran']} families)"
        print(line, file=out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated (default: both)")
    parser.add_argument("--only", default=None, help="a regular expression the ref must contain")
    parser.add_argument(
        "--timeout-s", type=float, default=300.0, help="per entry and framework (default 300)"
    )
    parser.add_argument("--runs", type=int, default=5, help="timed inferences after the warm-up (default 5)")
    parser.add_argument("--json", action="store_true", help="print the results and totals as JSON at the end")
    parser.add_argument(
        "--keep-cache", type=Path, default=None, help="export ONNX graphs into this directory"
    )
    parser.add_argument(
        "--record-failures",
        action="store_true",
        help="write what failed (and drop what now runs) into the catalogue's failures.json; then run "
        "python -m mlscope.registry.catalogue.generate",
    )
    args = parser.parse_args()

    from rich.markup import escape

    from mlscope.cli.progress import progress_board
    from mlscope.registry.catalogue import Catalogue

    frameworks = [name.strip() for name in args.frameworks.split(",") if name.strip()]
    entries = [e for e in Catalogue.load().entries() if args.only is None or re.search(args.only, e.ref)]
    out = sys.stderr if args.json else sys.stdout
    cache = args.keep_cache or Path(tempfile.mkdtemp(prefix="mlscope-catalogue-"))
    started = time.perf_counter()
    print(
        f"{len(entries)} entries x {', '.join(frameworks)}; batch 1, 1 warm-up + {args.runs} timed; "
        f"timeout {args.timeout_s:g} s each",
        file=out,
    )
    print(f"{'ref':<42} {'family':<22} {' '.join(f'{n:<46}' for n in frameworks)} median ms", file=out)
    results: list[dict[str, Any]] = []
    done: list[Any] = []
    interrupted = False
    # SIGTERM (a time limit, `kill`) ends the sweep as Ctrl-C does: the totals of what ran are printed.
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt()))
    # Measured failures are tried again: a new library version may have fixed them.
    tried = [[n for n in frameworks if n in entry.frameworks or n in entry.unsupported] for entry in entries]
    # The sweep's progress on stderr (none under --json or off a terminal): entry and framework now,
    # pairs done of all, elapsed, ETA. A row printed meanwhile goes above it when stdout is the terminal.
    board = progress_board(quiet=args.json)
    sweep = board.add("catalogue", total=sum(len(names) for names in tried))
    board.start()
    try:
        for entry, names in zip(entries, tried, strict=True):
            row: dict[str, dict[str, Any]] = {}
            for name in names:
                sweep.update(now=escape(f"{entry.ref} on {name}"))
                row[name] = sweep_one(entry.ref, name, cache, args.runs, args.timeout_s)
                results.append(row[name])
                sweep.update(done=len(results))
            if args.keep_cache is None:  # exported graphs reach gigabytes; each is used by one entry
                shutil.rmtree(cache / "onnx", ignore_errors=True)
            # sys.stdout looked up now: while the board is up it may be the board's proxy.
            print(_row(entry, row, frameworks), file=sys.stderr if args.json else sys.stdout, flush=True)
            done.append(entry)
    except KeyboardInterrupt:
        board.stop()
        interrupted = True
        print(f"interrupted: the totals below cover the {len(done)} entries done of {len(entries)}", file=out)
    finally:
        board.stop()
        if args.keep_cache is None:
            shutil.rmtree(cache, ignore_errors=True)
    finished = {entry.ref for entry in done}
    summary = totals(done, [r for r in results if r.get("ref") in finished], frameworks)
    summary["interrupted"] = interrupted
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    _print_totals(summary, frameworks, out)
    print(f"wall time {summary['wall_s']:.0f} s", file=out)
    if args.record_failures:
        record_failures([r for r in results if r.get("ref") in finished], out)
    if args.json:
        print(json.dumps({"results": results, "totals": summary}, indent=2))


def record_failures(results: list[dict[str, Any]], out: Any) -> None:
    """Merge this sweep's outcomes into the catalogue's failures.json: a failure is written with its
    phase and reason, an entry that ran is taken out; entries not swept keep what was recorded."""
    from mlscope.registry.catalogue.generate import FAILURES

    document = json.loads(FAILURES.read_text(encoding="utf-8"))
    failures: dict[str, dict[str, str]] = document["failures"]
    for result in results:
        known = failures.setdefault(result["framework"], {})
        if result["status"] == "ran":
            known.pop(result["ref"], None)
        else:
            reason = f"{result.get('phase')}: {result.get('reason', result['status'])}"
            # No path of this machine goes into the project: a graph's path becomes <graph>.
            known[result["ref"]] = re.sub(r"(?:/[^\s/'\"]+)+\.onnx", "<graph>.onnx", reason)[:300]
    document["failures"] = {
        name: dict(sorted(refs.items())) for name, refs in sorted(failures.items()) if refs
    }
    FAILURES.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"recorded failures in {FAILURES}: now run python -m mlscope.registry.catalogue.generate", file=out)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.exit(_child(sys.argv[2:]))
    main()
