"""The store at scale: how fast it fills, how big it gets, and how fast the API reads it.

For each backend (SQLite: a file in a temporary directory; PostgreSQL: a database this script
creates and drops) the store grows through the store API to each size in turn (10k, then 100k, then
1M by default: each step adds to the last, nothing is refilled) with realistic evaluations
(benchmarks/_store_fill.py). After each step it prints the fill time and rate and the database's size
on disk, then starts a real `mlscope api` on the store and times, over HTTP, the reads a farm serves
(each call once to warm up, then --repeat times: median and max in ms), and reads the API process's
peak RSS. One table per backend closes the run: rows are the figures, columns the sizes, then the
growth between the two largest sizes and the target. Nothing is asserted; a figure over its target
is marked "!".

Targets: every call ≤ 300 ms up to 100k evaluations and ≤ 1 s at 1M on PostgreSQL (SQLite shows
them for reference); API peak RSS ≤ 300 MB; fill ≥ 2,000 evaluations/s.

Parts of the store this measures may be missing on a branch; the script then says so and falls
back: no `Store.import_evaluations` → each evaluation goes through create/start/finish (far slower;
the fill figures are then not the bulk import's); no /api/v1/history → "n/a"; no keyset cursor
(`next_cursor`) → the deep page is read by offset only.

Needs PostgreSQL on 127.0.0.1:5432 (trust auth, user postgres; --pg-url) for that backend, and Redis
for the API's broker setting (redis://127.0.0.1:6379/15; reads never use it). It never opens the
user's store or settings, and cleans up (temporary directory, database, API process) even on Ctrl-C.
PostgreSQL is vacuumed and analyzed after each fill step, as autovacuum (on by default) would have
done by the time anyone reads a store that size. At 1M with 200 raw latencies per point (compressed)
expect ~4 GB of SQLite file (--tmp-dir) and ~4 GB in PostgreSQL's data directory; the
create/start/finish fallback fills at ~100-200 evaluations/s here, i.e. hours for 1M. An API that
grows past --api-rss-limit-mb is killed (and restarted for the next call) rather than let it exhaust
the machine's memory.

Usage: python benchmarks/store_scale.py [--sizes 10000,100000,1000000] [--backends sqlite,postgresql]
           [--repeat 5] [--raw 200] [--pg-url postgresql://postgres@127.0.0.1:5432]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import requests
from _store_fill import (
    FRAMEWORKS,
    MODELS,
    SYSTEMS,
    Evaluations,
    PostgresBackend,
    SQLiteBackend,
    fill,
    has_bulk_import,
)

from mlscope.store import open_store

REPO = Path(__file__).resolve().parent.parent
BROKER_URL = "redis://127.0.0.1:6379/15"
CHUNK = 2000  # documents generated (untimed) then written (timed) at a time
CALL_TARGET_MS, CALL_TARGET_LARGE_MS = 300.0, 1000.0  # up to 100k evaluations; above
RSS_TARGET_MB = 300.0
FILL_TARGET = 2000.0
CALLS = ("compare (1 model, batch 1)", "compare (all)", "list (model+framework)", "deep page (offset 90%)",
         "deep page (cursor at 90%)", "get by 8-char prefix", "history (series)")  # fmt: skip


def _call_target_ms(size: int) -> float:
    return CALL_TARGET_MS if size <= 100_000 else CALL_TARGET_LARGE_MS


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _size_label(size: int) -> str:
    if size % 1_000_000 == 0:
        return f"{size // 1_000_000}M"
    return f"{size // 1000}k" if size % 1000 == 0 else str(size)


# ----- the API process -----------------------------------------------------------------------------


class Api:
    """`python -m mlscope api` on the store at `store_url`, with settings of its own only.

    A watchdog kills it when its RSS grows past `rss_limit_mb` (a store that reads everything into
    memory would take the machine down with it); the next call then starts a new one.
    """

    def __init__(self, store_url: str, tmp: Path, *, rss_limit_mb: float, call_timeout_s: float) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Nothing of the user's mlscope settings (tokens, api_reads, registry...) reaches this API.
        self.env = {
            **{key: value for key, value in os.environ.items() if not key.startswith("MLSCOPE_")},
            "MLSCOPE_STORE_URL": store_url,
            "MLSCOPE_BROKER_URL": BROKER_URL,
            "MLSCOPE_SETTINGS": str(tmp / "no-settings.toml"),
            "MLSCOPE_CACHE_DIR": str(tmp / "cache"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        self.tmp = tmp
        self.rss_limit_mb = rss_limit_mb
        self.call_timeout_s = call_timeout_s
        self.kills = 0
        self._peak_rss = 0
        self.start()

    def start(self) -> None:
        self.killed = False
        self._stopping = threading.Event()
        log_path = self.tmp / "api.log"
        with open(log_path, "wb") as log:
            # A session of its own: Ctrl-C reaches this script, which then stops the API itself.
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mlscope", "api", "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.tmp,
                start_new_session=True,
            )
        threading.Thread(target=self._watch, args=(self.process, self._stopping), daemon=True).start()
        try:
            deadline = time.monotonic() + 120
            while not _answers(f"{self.url}/api/v1/health"):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"mlscope api is not up:\n{log_path.read_text(errors='replace')[-3000:]}"
                    )
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise

    def _watch(self, process: subprocess.Popen[bytes], stopping: threading.Event) -> None:
        # Also the peak's only source where /proc has no VmHWM.
        while not stopping.wait(0.2):
            try:
                rss = psutil.Process(process.pid).memory_info().rss
            except psutil.Error:
                return
            self._peak_rss = max(self._peak_rss, rss)
            if rss > self.rss_limit_mb * 2**20:
                self.killed = True
                self.kills += 1
                process.kill()
                return

    def peak_rss_mb(self) -> float:
        """The largest RSS of any API process so far (VmHWM on Linux)."""
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self._peak_rss = max(self._peak_rss, int(line.split()[1]) * 1024)
        except OSError:
            pass
        return self._peak_rss / 2**20

    def alive(self) -> bool:
        return not self.killed and self.process.poll() is None

    def stop(self) -> None:
        self.peak_rss_mb()
        self._stopping.set()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()


def _answers(url: str) -> bool:
    try:
        requests.get(url, timeout=5)
    except requests.RequestException:
        return False
    return True


# ----- timing the reads ----------------------------------------------------------------------------


def _get(session: requests.Session, api: Api, url: str, params: dict[str, Any]) -> requests.Response | str:
    """The response, or why there is none; restarts an API that was killed or died."""
    if not api.alive():
        api.stop()
        api.start()
    try:
        return session.get(url, params=params, timeout=api.call_timeout_s)
    except requests.Timeout:
        return f"timeout > {api.call_timeout_s:g} s"
    except requests.RequestException as error:
        return f"killed: RSS > {api.rss_limit_mb:,.0f} MB" if api.killed else type(error).__name__


def _timed(session: requests.Session, api: Api, url: str, params: dict[str, Any], repeat: int) -> Any:
    """(median ms, max ms, response bytes) of `repeat` calls after one warm-up, or why not (a string)."""
    times, size = [], 0
    for attempt in range(repeat + 1):
        started = time.perf_counter()
        response = _get(session, api, url, params)
        elapsed_ms = (time.perf_counter() - started) * 1000
        if isinstance(response, str):
            return response
        if response.status_code != 200:
            detail = response.text[:200].replace("\n", " ")
            return f"HTTP {response.status_code}" + ("" if attempt else f": {detail}")
        if attempt:
            times.append(elapsed_ms)
        size = len(response.content)
    return statistics.median(times), max(times), size


def _json(response: requests.Response | str) -> dict[str, Any]:
    return response.json() if isinstance(response, requests.Response) and response.ok else {}


def time_calls(api: Api, evaluations: Evaluations, repeat: int) -> tuple[dict[str, Any], list[str]]:
    """Each call's (median, max) in ms or why it was not measured, and notes on fallbacks."""
    base = f"{api.url}/api/v1"
    notes: list[str] = []
    model, framework, system_id = MODELS[0], FRAMEWORKS[0], SYSTEMS[0]["id"]
    results: dict[str, Any] = {}
    with requests.Session() as session:
        total = _json(_get(session, api, f"{base}/evaluations", {"limit": 1})).get("total", 0)
        deep = {"limit": 50, "offset": int(total * 0.9)}
        one_model = {"models": model, "batch_sizes": 1}
        results[CALLS[0]] = _timed(session, api, f"{base}/compare", one_model, repeat)
        results[CALLS[1]] = _timed(session, api, f"{base}/compare", {}, repeat)
        listed = {"model": model, "framework": framework, "limit": 50}
        results[CALLS[2]] = _timed(session, api, f"{base}/evaluations", listed, repeat)
        results[CALLS[3]] = _timed(session, api, f"{base}/evaluations", deep, repeat)
        page = _get(session, api, f"{base}/evaluations", deep)
        cursor = _json(page).get("next_cursor")
        if cursor:
            after = {"limit": 50, "cursor": cursor}
            results[CALLS[4]] = _timed(session, api, f"{base}/evaluations", after, repeat)
        elif isinstance(page, str):
            results[CALLS[4]] = page
        else:
            results[CALLS[4]] = "n/a (no cursor)"
            notes.append("no keyset cursor (no next_cursor in a page): the deep page is read by offset only")
        prefix = str(evaluations.first_id)[:8]
        results[CALLS[5]] = _timed(session, api, f"{base}/evaluations/{prefix}", {}, repeat)
        series = {"model": model, "framework": framework, "system_id": system_id, "batch_size": 1}
        probe = _get(session, api, f"{base}/history", series)
        if isinstance(probe, str):
            results[CALLS[6]] = probe
        elif probe.status_code == 404 and "requested url was not found" in probe.text.lower():
            results[CALLS[6]] = "n/a (no /history)"
            notes.append("no /api/v1/history on this branch: the history call is not measured")
        else:
            results[CALLS[6]] = _timed(session, api, f"{base}/history", series, repeat)
    return results, notes


# ----- the run -------------------------------------------------------------------------------------


def grow(backend: Any, evaluations: Evaluations, size: int, batch_size: int) -> dict[str, Any]:
    """Adds evaluations until the store holds `size`; returns the fill's figures."""
    added, store_s, generate_s = 0, 0.0, 0.0
    store = open_store(backend.url)
    try:
        bulk = has_bulk_import(store)
        while evaluations.made < size:
            started = time.perf_counter()
            documents = evaluations.take(min(CHUNK, size - evaluations.made))
            generate_s += time.perf_counter() - started
            started = time.perf_counter()
            added += fill(store, documents, batch_size=batch_size)
            store_s += time.perf_counter() - started
            if sys.stderr.isatty():
                print(f"\r  filling: {evaluations.made:,}/{size:,}", end="", file=sys.stderr, flush=True)
        if sys.stderr.isatty():
            print("\r\033[K", end="", file=sys.stderr, flush=True)
    finally:
        store.close()
    backend.after_fill()
    return {"added": added, "store_s": store_s, "generate_s": generate_s, "bulk": bulk}


def run_backend(
    name: str, sizes: list[int], args: argparse.Namespace, tmp: Path
) -> dict[int, dict[str, Any]]:
    backend: Any = SQLiteBackend(tmp) if name == "sqlite" else PostgresBackend(args.pg_url)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    evaluations = Evaluations(raw_per_point=args.raw, now=now, seed=args.seed)
    figures: dict[int, dict[str, Any]] = {}
    try:
        print(f"\n=== {name}: {backend.url}")
        for size in sizes:
            fill_figures = grow(backend, evaluations, size, args.batch_size)
            path = (
                f"Store.import_evaluations (batch {args.batch_size})"
                if fill_figures["bulk"]
                else "FALLBACK: create/start/finish per evaluation (no Store.import_evaluations here)"
            )
            rate = fill_figures["added"] / fill_figures["store_s"] if fill_figures["store_s"] else 0.0
            size_mb = backend.size_bytes() / 2**20
            print(
                f"{_size_label(size)}: added {fill_figures['added']:,} in {fill_figures['store_s']:.1f} s "
                f"= {rate:,.0f} evaluations/s; database {size_mb:,.1f} MB\n"
                f"  via {path}; generating them took {fill_figures['generate_s']:.1f} s more (not counted)"
            )
            api = Api(backend.url, tmp, rss_limit_mb=args.api_rss_limit_mb, call_timeout_s=args.call_timeout)
            try:
                calls, notes = time_calls(api, evaluations, args.repeat)
            finally:
                api.stop()
            peak: Any = api.peak_rss_mb()
            if api.kills:
                notes.append(
                    f"the API was killed {api.kills}× (RSS > {api.rss_limit_mb:,.0f} MB) and restarted"
                )
                peak = f"killed > {api.rss_limit_mb:,.0f}" + (
                    " !" if api.rss_limit_mb > RSS_TARGET_MB else ""
                )
            for call, value in calls.items():
                shown = value
                if isinstance(value, tuple):
                    shown = f"{value[0]:9.1f} ms median, {value[1]:9.1f} ms max ({value[2] / 1024:,.1f} kB)"
                print(f"  {call:28} {shown}")
            print(f"  {'API peak RSS':28} {peak if isinstance(peak, str) else f'{peak:9.1f}'} MB")
            for note in notes:
                print(f"  note: {note}")
            figures[size] = {
                **fill_figures,
                "rate": rate,
                "size_mb": size_mb,
                "calls": calls,
                "rss_mb": peak,
            }
    finally:
        backend.drop()
    return figures


def _cell(value: Any, target: float | None, higher_is_better: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        failed = target is not None and value.startswith(("timeout", "killed"))
        return (value if len(value) <= 24 else value[:23] + "…") + (" !" if failed else "")
    if isinstance(value, tuple):
        shown, key = f"{value[0]:.1f}/{value[1]:.1f}", value[0]
    else:
        shown, key = (f"{value:,.0f}" if value >= 100 else f"{value:.1f}"), value
    over = target is not None and (key < target if higher_is_better else key > target)
    return shown + (" !" if over else "")


def print_table(name: str, figures: dict[int, dict[str, Any]]) -> None:
    sizes = sorted(figures)
    grown = sizes[-2:] if len(sizes) >= 2 else []
    growth_head = f"{_size_label(grown[0])}→{_size_label(grown[1])}" if grown else "growth"
    head = ["", *(_size_label(s) for s in sizes), growth_head, "target"]
    rows: list[list[str]] = []

    def growth(values: list[Any]) -> str:
        first, last = (values[sizes.index(s)] for s in grown) if grown else (None, None)
        first = first[0] if isinstance(first, tuple) else first
        last = last[0] if isinstance(last, tuple) else last
        if isinstance(first, (int, float)) and isinstance(last, (int, float)) and first > 0:
            return f"×{last / first:.2f}"
        return "-"

    fill_rates = [figures[s]["rate"] for s in sizes]
    rows.append(["fill: added", *(f"{figures[s]['added']:,}" for s in sizes), "", ""])
    rows.append(["fill: time (s)", *(f"{figures[s]['store_s']:.1f}" for s in sizes), "", ""])
    rows.append(["fill: evaluations/s", *(_cell(r, FILL_TARGET, True) for r in fill_rates), "", "≥ 2,000"])
    sizes_mb = [figures[s]["size_mb"] for s in sizes]
    rows.append(["database (MB)", *(_cell(v, None) for v in sizes_mb), growth(sizes_mb), ""])
    for call in CALLS:
        values = [figures[s]["calls"].get(call) for s in sizes]
        cells = [_cell(v, _call_target_ms(s)) for v, s in zip(values, sizes, strict=True)]
        rows.append([f"{call} ms", *cells, growth(values), "≤ 300; ≤ 1,000 over 100k"])
    rss = [figures[s]["rss_mb"] for s in sizes]
    rows.append(["API peak RSS (MB)", *(_cell(v, RSS_TARGET_MB) for v in rss), growth(rss), "≤ 300"])
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    print(f"\n{name}: calls are median/max ms of the repeats; '!' marks a figure over its target")
    if name != "postgresql":
        print("(the call targets are PostgreSQL's; shown here for reference)")
    for row in [head, *rows]:
        print(
            "  ".join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            )
        )
    if not all(figures[s]["bulk"] for s in sizes):
        print("fill figures are the FALLBACK's (create/start/finish per evaluation), not a bulk import's")


def _sigterm(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="10000,100000,1000000", help="store sizes, comma-separated, growing"
    )
    parser.add_argument("--backends", default="sqlite,postgresql", help="sqlite and/or postgresql")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls after one warm-up")
    parser.add_argument("--raw", type=int, default=200, help="raw latencies per point")
    parser.add_argument("--batch-size", type=int, default=1000, help="Store.import_evaluations batch size")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--call-timeout", type=float, default=600, help="seconds an API call may take")
    parser.add_argument(
        "--api-rss-limit-mb", type=float, default=4096, help="the API is killed when it grows past this"
    )
    parser.add_argument(
        "--pg-url", default="postgresql://postgres@127.0.0.1:5432", help="server, no database"
    )
    parser.add_argument("--tmp-dir", default=None, help="where the SQLite file goes (default: the system's)")
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - {"sqlite", "postgresql"}
    if unknown or not sizes or sizes[0] < 1 or args.repeat < 1:
        parser.error(f"bad --backends {sorted(unknown)} or --sizes or --repeat")
    signal.signal(signal.SIGTERM, _sigterm)
    tmp = Path(tempfile.mkdtemp(prefix="mlscope-store-scale-", dir=args.tmp_dir))
    results: dict[str, dict[int, dict[str, Any]]] = {}
    try:
        print(f"sizes {', '.join(map(_size_label, sizes))}; {args.raw} raw latencies per point; "
              f"{args.repeat} timed calls after one warm-up; temporary directory {tmp}")  # fmt: skip
        for name in backends:
            results[name] = run_backend(name, sizes, args, tmp)
        for name, figures in results.items():
            print_table(name, figures)
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
        sys.exit(130)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
