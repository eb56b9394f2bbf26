"""The progress helper (mlscope/cli/progress.py) and the rows `mlscope run` draws with it.

Given / When / Then in each test's comments. A board draws on a real Rich console writing to a
StringIO as a terminal would (force_terminal); time comes from a clock the test moves, so elapsed
times and ETAs are exact. What is asserted is the text a person would read.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.text import Text

from mlscope.cli import progress
from mlscope.cli.progress import PROGRESS_ENV, ProgressBoard, SearchBracket, clock_text, progress_console
from mlscope.contract.errors import UserError


class Clock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=160), out


def plain(out: io.StringIO) -> str:
    """What the terminal showed, without colours and cursor moves."""
    return Text.from_ansi(out.getvalue()).plain


def last_frame(out: io.StringIO) -> str:
    """The board as it was left: Rich redraws every row from a carriage return each time."""
    return Text.from_ansi(out.getvalue().rsplit("\r", 1)[-1]).plain


def test_a_row_names_the_current_item_counts_and_an_eta_once_one_item_finished() -> None:
    # Given a board on a terminal with a row of four evaluations
    console, out = terminal()
    clock = Clock()
    with ProgressBoard(console, clock=clock) as board:
        row = board.add("evaluations", total=4)
        row.update(now="resnet18/pytorch batch 1,8 on agent:a; 3 queued")
        # When none has finished yet
        board.stop()
        before = plain(out)
        # Then it names what runs, counts 0/4 and has no ETA to give
        assert "resnet18/pytorch batch 1,8 on agent:a; 3 queued" in before
        assert "0/4" in before and "ETA -:--:--" in before
        # When the first ends 12 s in
        board.start()
        clock.now = 12.0
        row.update(done=1, now="resnet18/onnxruntime batch 1,8 on agent:b; 2 queued")
        board.stop()
        # Then 1/4, 12 s elapsed, and the three left at that pace: 36 s
        shown = last_frame(out)
        assert "resnet18/onnxruntime batch 1,8 on agent:b; 2 queued" in shown
        assert "1/4" in shown and "0:00:12" in shown and "ETA 0:00:36" in shown
        # When 8 s more pass with the second still under way, Then the ETA counts down
        board.start()
        clock.now = 20.0
        row.update(done=1)
    shown = last_frame(out)
    assert "1/4" in shown and "0:00:20" in shown and "ETA 0:00:28" in shown


def test_a_finished_row_says_how_it_ended_and_gives_no_eta() -> None:
    console, out = terminal()
    clock = Clock()
    with ProgressBoard(console, clock=clock) as board:
        row = board.add("resnet18 on pytorch", total=2)
        clock.now = 5.0
        row.update(done=1)
        clock.now = 9.0
        row.finish("succeeded")
        clock.now = 100.0  # a finished row's elapsed time stops
    shown = last_frame(out)
    assert "2/2" in shown and "succeeded" in shown and "0:00:09" in shown
    assert "ETA" not in shown


def test_a_fraction_of_the_item_under_way_does_not_make_an_eta() -> None:
    # An ETA from part of one item would swing wildly: it waits for a whole one.
    console, out = terminal()
    clock = Clock()
    with ProgressBoard(console, clock=clock) as board:
        row = board.add("resnet18 on pytorch", total=3)
        clock.now = 4.0
        row.update(done=0.5)
    assert "ETA -:--:--" in last_frame(out)


def test_a_search_shows_its_probe_and_the_bracket_in_place_of_an_eta() -> None:
    # Given a search that met the bound at 20 and 40 q/s and missed it at 80
    search = SearchBracket()
    lines = [
        search.add({"target_qps": qps, "passed": passed})
        for qps, passed in ((20, True), (40, True), (80, False))
    ]
    # Then each probe has its number, rate and verdict, and the answer lies between 40 and 80
    assert [Text.from_markup(line).plain for line in lines] == [
        "probe 1: 20 q/s meets",
        "probe 2: 40 q/s meets",
        "probe 3: 80 q/s misses",
    ]
    assert search.bracket() == "max in 40–80 q/s"
    # And on a row the bracket stands where the ETA would
    console, out = terminal()
    with ProgressBoard(console, clock=Clock()) as board:
        row = board.add("resnet18 on onnxruntime", total=2)
        row.update(done=1, now=lines[-1], eta=search.bracket())
    shown = last_frame(out)
    assert "probe 3: 80 q/s misses" in shown and "max in 40–80 q/s" in shown and "ETA" not in shown


@pytest.mark.parametrize(
    ("probes", "bracket"),
    [
        ([], ""),
        ([(10, True), (20, True)], "max ≥ 20 q/s"),  # nothing missed yet: still doubling
        ([(10, False), (5, False)], "max < 5 q/s"),  # nothing met yet: still halving
        ([(10, True), (20, False), (15, True), (30, True)], "max ≥ 30 q/s"),  # a pass above a miss moves up
        ([(10, True), (40, False), (20, False), (15, True)], "max in 15–20 q/s"),
    ],
)
def test_the_bracket_is_the_one_the_search_narrows(probes: list[tuple[float, bool]], bracket: str) -> None:
    search = SearchBracket()
    for qps, passed in probes:
        search.add({"target_qps": qps, "passed": passed})
    assert search.bracket() == bracket


def test_goodput_probes_read_the_same() -> None:
    # The generate scenario's search sends the same event with goodput figures beside.
    search = SearchBracket()
    line = search.add({"target_qps": 2.5, "passed": False, "goodput": 1.2, "ttft_p50_ms": 80.0})
    assert Text.from_markup(line).plain == "probe 1: 2.5 q/s misses"
    assert search.bracket() == "max < 2.5 q/s"


def test_a_board_without_a_console_writes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    # Given the board a command gets under --json or off a terminal
    board = ProgressBoard(None)
    with board:
        row = board.add("evaluations", total=2)
        row.update(done=1, now="resnet18/pytorch", eta="max in 1–2 q/s")
        board.line("a probe line")
        row.finish("succeeded")
    # Then not a character reached stdout or stderr
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert board.enabled is False


def test_progress_is_off_under_json_and_off_a_terminal_unless_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest's stderr is not a terminal.
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert progress_console(quiet=False) is None
    monkeypatch.setenv(PROGRESS_ENV, "always")
    forced = progress_console(quiet=False)
    assert forced is not None and forced.is_terminal
    assert progress_console(quiet=True) is None  # --json wins over always
    monkeypatch.setenv(PROGRESS_ENV, "never")
    assert progress_console(quiet=False) is None


def test_a_terminal_gets_progress_unless_never(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given stderr's console is a terminal
    tty, _ = terminal()
    monkeypatch.setattr(progress, "err_console", tty)
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert progress_console(quiet=False) is tty
    assert progress_console(quiet=True) is None
    monkeypatch.setenv(PROGRESS_ENV, "never")
    assert progress_console(quiet=False) is None


def test_a_wrong_mode_names_the_variable_and_the_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROGRESS_ENV, "sometimes")
    with pytest.raises(UserError) as caught:
        progress_console(quiet=False)
    assert caught.value.field == PROGRESS_ENV
    assert str(caught.value) == "MLSCOPE_PROGRESS='sometimes': expected one of auto, always, never"


@pytest.mark.parametrize(("seconds", "text"), [(0, "0:00:00"), (42.4, "0:00:42"), (3723, "1:02:03")])
def test_clock_text(seconds: float, text: str) -> None:
    assert clock_text(seconds) == text


def test_run_draws_a_row_per_evaluation_a_row_for_all_and_a_searchs_probes(
    mlscope_env: dict[str, str],
) -> None:
    # Given `mlscope run`'s watcher for two admitted evaluations of a server search at batch 1 and 4
    from mlscope.cli.run import _ProgressBars
    from mlscope.contract.settings import load_settings
    from mlscope.workers.local import admit_all

    document = {
        "batch_sizes": [1, 4],
        "scenarios": ["server"],
        "load": {"find_max_qps": True, "latency_bound_ms": 20, "qps": 20},
    }
    admitted = admit_all("test_tiny_mlp", ["onnxruntime", "pytorch"], document, settings=load_settings())
    console, out = terminal()
    clock = Clock()
    board = ProgressBoard(console, clock=clock)
    watch = _ProgressBars(board, admitted)
    first, second = admitted
    # When the first evaluation measures batch 1 in 10 s, then searches at batch 4
    watch(first, {"event": "start"})
    watch(first, {"event": "phase", "phase": "measure", "scenario": "server", "batch_size": 1})
    clock.now = 10.0
    watch(first, {"event": "measurement"})
    for qps, passed in ((20, True), (40, False)):
        watch(
            first,
            {"event": "probe", "scenario": "server", "batch_size": 4, "target_qps": qps, "passed": passed},
        )
    board.stop()
    # Then its row names the search's latest probe and the bracket; the row for all counts 1 of 4
    # points and gives an ETA at that pace (10 s a point, 3 left)
    rows = last_frame(out).splitlines()
    assert any(
        "test_tiny_mlp on onnxruntime" in row
        and "1/2" in row
        and "server batch 4 search, probe 2: 40 q/s misses" in row
        and "max in 20–40 q/s" in row
        for row in rows
    ), rows
    assert any("2 evaluations" in row and "1/4" in row and "ETA 0:00:30" in row for row in rows), rows
    # And each probe was a line above the rows
    assert "server batch 4 probe 40 qps" in plain(out)
    # When the first ends and the second starts
    board.start()
    watch(first, {"event": "measurement"})
    watch(first, {"event": "end", "status": "succeeded"})
    watch(second, {"event": "start"})
    board.stop()
    rows = last_frame(out).splitlines()
    assert any("test_tiny_mlp on onnxruntime" in row and "2/2" in row and "succeeded" in row for row in rows)
    assert any("test_tiny_mlp on pytorch" in row and "0/2" in row for row in rows), rows
    assert any("2 evaluations" in row and "2/4" in row for row in rows), rows


def test_a_wrong_mode_stops_any_verb_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a wrong MLSCOPE_PROGRESS and an API that nothing answers at
    monkeypatch.setenv(PROGRESS_ENV, "yes")
    monkeypatch.setenv("MLSCOPE_API_URL", "http://127.0.0.1:9")
    from mlscope.cli import main

    # When a comparison is asked for
    with pytest.raises(SystemExit) as ended:
        main(["compare", "-m", "resnet18", "-f", "pytorch", "--json"])
    # Then exit 2 naming the variable, before anything tried to reach the farm
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "MLSCOPE_PROGRESS='yes': expected one of auto, always, never" in err
    assert "API" not in err and "Traceback" not in err


def test_the_cli_consoles_print_a_model_reference_as_text_not_an_emoji(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlscope.cli.consoles import _LazyConsole

    # Given the CLI's own consoles and the piped progress console
    monkeypatch.setenv(PROGRESS_ENV, "always")
    # When each prints a line naming the catalogue's Llama (rich reads `:llama:` as an emoji code)
    _LazyConsole(stderr=False).print("0988051e hf:llama: llamacpp")
    piped = progress_console(quiet=False)
    assert piped is not None
    piped.print("hf:llama: prefill")
    # Then the reference is printed as it was written
    out, err = capsys.readouterr()
    assert "hf:llama: llamacpp" in out and "hf:llama: prefill" in err
