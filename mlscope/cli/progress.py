"""Progress wherever work is long: one board of rows on stderr, each a piece of work with what runs
now, done/total, elapsed time and an ETA, for `mlscope run`, `compare`, `submit --wait`, the
catalogue sweeps (benchmarks/catalogue*.py) and whatever comes next. A rate search's probes
(`SearchBracket`) show the bracket the search has narrowed the answer to in place of an ETA: how
many probes a search takes is not known in advance.

Progress is for a person at a terminal. Under `--json`, or when stderr is not a terminal, there is
none at all — not even a carriage return in a log. MLSCOPE_PROGRESS overrides the terminal test:
`always` (drawn even into a pipe: tests, `script` recordings), `never`, or `auto` (the default).
`--json` wins over both, so a script's stderr holds only warnings and errors.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mlscope.cli.consoles import err_console, escape
from mlscope.contract.errors import UserError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, ProgressColumn, Task, TaskID

__all__ = [
    "MODES",
    "PROGRESS_ENV",
    "ProgressBoard",
    "ProgressRow",
    "SearchBracket",
    "clock_text",
    "progress_board",
    "progress_console",
]

PROGRESS_ENV = "MLSCOPE_PROGRESS"
MODES = ("auto", "always", "never")
# A console forced onto a pipe has no width to ask for: as wide as the CLI's other piped output.
PIPED_WIDTH = 160


def progress_console(*, quiet: bool) -> Console | None:
    """The console progress is drawn on, or None where there must be none.

    Args:
        quiet: the command was asked for machine output (`--json`): no progress whatever the mode.

    Raises:
        UserError: MLSCOPE_PROGRESS is not one of MODES.
    """
    raw = os.environ.get(PROGRESS_ENV, "")
    mode = raw.strip().lower() or "auto"
    # Checked even when quiet: `mlscope` checks it up front (with quiet) for every verb.
    if mode not in MODES:
        raise UserError(f"{PROGRESS_ENV}={raw!r}: expected one of {', '.join(MODES)}", field=PROGRESS_ENV)
    if quiet or mode == "never":
        return None
    if err_console.is_terminal:
        return err_console
    if mode == "always":
        from rich.console import Console

        return Console(stderr=True, force_terminal=True, width=PIPED_WIDTH, emoji=False)
    return None


def clock_text(seconds: float) -> str:
    """A duration as a clock, as Rich writes the elapsed time: 0:00:42, 1:02:03."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _eta_column() -> ProgressColumn:
    """The time left at the mean pace of the items done (the time they took / how many, × those
    left, less what the item under way has had), once one whole item is done; a row may instead
    say what it knows (a search's bracket) in its `eta` field. Between items it counts down rather
    than growing with the item under way."""
    # Imported here: only a board that draws needs Rich's progress (`mlscope --help` does not).
    from rich.progress import ProgressColumn
    from rich.text import Text

    class EtaColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            instead = task.fields.get("eta")
            if instead:
                return Text(str(instead), style="progress.remaining")
            if task.finished or task.total is None:
                return Text("")
            done_at = task.fields.get("done_at")
            if task.completed < 1 or done_at is None or task.start_time is None:
                return Text("ETA -:--:--", style="progress.remaining")
            spent = done_at - task.start_time
            since = (task.elapsed or 0.0) - spent
            left = max(0.0, spent / task.completed * (task.total - task.completed) - since)
            return Text(f"ETA {clock_text(left)}", style="progress.remaining")

    return EtaColumn()


class ProgressRow:
    """One row of a board: a piece of work of `total` items. Every method does nothing when the
    board is off, so callers never ask whether progress is shown."""

    def __init__(self, progress: Progress | None, task: TaskID | None) -> None:
        self._progress = progress
        self._task = task
        self._state: Task | None = None
        if progress is not None:
            self._state = next(t for t in progress.tasks if t.id == task)

    def update(
        self,
        *,
        done: float | None = None,
        now: str | None = None,
        eta: str | None = None,
        total: float | None = None,
    ) -> None:
        """Args:
        done: items done (a fraction counts for the item under way).
        now: what runs now, e.g. "server batch 8" or "resnet18/pytorch on agent:a"; Rich markup.
        eta: shown in place of the ETA (a search's bracket); "" goes back to the ETA.
        total: a new number of items.
        """
        if self._progress is None or self._task is None or self._state is None:
            return
        fields: dict[str, Any] = {}
        if done is not None and done != self._state.completed:
            fields["done_at"] = self._progress.get_time()  # the pace is that of items done
        if now is not None:
            fields["now"] = now
        if eta is not None:
            fields["eta"] = eta
        self._progress.update(self._task, completed=done, total=total, **fields)

    def finish(self, now: str) -> None:
        """Every item done (ended, in whatever way `now` says)."""
        if self._progress is None or self._task is None or self._state is None:
            return
        total = self._state.total
        self._progress.update(self._task, completed=total, now=now, eta="")
        self._progress.stop_task(self._task)


class ProgressBoard:
    """The rows of a long piece of work, drawn on `console` (None: nothing is drawn, and every row
    and line does nothing). Use it as a context manager, or `start` and `stop` it.

    Args:
        console: from `progress_console` (tests pass one writing to a StringIO).
        clock: seconds, for elapsed times and ETAs; Rich's monotonic clock by default.
    """

    def __init__(self, console: Console | None, *, clock: Callable[[], float] | None = None) -> None:
        self.enabled = console is not None
        self._progress: Progress | None = None
        if console is not None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(bar_width=24),
                MofNCompleteColumn(),
                TextColumn("{task.fields[now]}"),
                TimeElapsedColumn(),
                _eta_column(),
                console=console,
                get_time=clock,
                # Lines printed to stdout while the board is up go above it only when stdout is the
                # same terminal; a piped stdout keeps its lines.
                redirect_stdout=sys.stdout.isatty(),
            )

    def add(self, label: str, total: float, now: str = "waiting") -> ProgressRow:
        """A new row: `label` (plain text, not markup) of `total` items."""
        if self._progress is None:
            return ProgressRow(None, None)
        task = self._progress.add_task(escape(label), total=total, now=now, eta="")
        return ProgressRow(self._progress, task)

    def line(self, text: str) -> None:
        """A line above the rows (Rich markup), kept when they move on, e.g. a search's probe."""
        if self._progress is not None:
            self._progress.console.print(text, highlight=False)

    def start(self) -> None:
        if self._progress is not None:
            self._progress.start()

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __enter__(self) -> ProgressBoard:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def progress_board(*, quiet: bool, clock: Callable[[], float] | None = None) -> ProgressBoard:
    """A board on stderr when there should be one (see `progress_console`), else one that does nothing."""
    return ProgressBoard(progress_console(quiet=quiet), clock=clock)


def _rate(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "?"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


class SearchBracket:
    """A rate search's probes as they come (the runtime's "probe" events, in the order run): the
    current probe's line and the bracket the answer lies in — above the highest rate that met the
    bound, below the lowest that missed it above that. The same bracket `find_max_qps` narrows."""

    def __init__(self) -> None:
        self.probes: list[tuple[float, bool]] = []

    def add(self, event: Mapping[str, Any]) -> str:
        """Take a probe; returns its line, e.g. "probe 3: 41.2 q/s meets"."""
        target = event.get("target_qps")
        if isinstance(target, int | float) and not isinstance(target, bool):
            self.probes.append((float(target), bool(event.get("passed"))))
        verdict = "[green]meets[/green]" if event.get("passed") else "[red]misses[/red]"
        return f"probe {len(self.probes)}: {_rate(target)} q/s {verdict}"

    def bracket(self) -> str:
        """e.g. "max in 20–41.2 q/s", "max ≥ 80 q/s" (nothing missed yet), "max < 5 q/s" (nothing met)."""
        met = [qps for qps, passed in self.probes if passed]
        low = max(met) if met else None
        missed = [qps for qps, passed in self.probes if not passed and (low is None or qps > low)]
        high = min(missed) if missed else None
        if low is None and high is None:
            return ""
        if low is None:
            return f"max < {_rate(high)} q/s"
        if high is None:
            return f"max ≥ {_rate(low)} q/s"
        return f"max in {_rate(low)}–{_rate(high)} q/s"
