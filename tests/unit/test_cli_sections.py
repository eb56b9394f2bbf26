"""How the result sections are shown: the accuracy and parity lines `results show` and `run` print
(one helper for both), the top-1 column of `results list` and `compare` (only when some shown result
has accuracy), a different parity or an all-invalid evaluation shown as NOT VALID, `--json` carrying
the sections as stored, and the Python API's table gaining top1/top5. `results` is driven in-process
on a real SQLite store, the sections written by `finish_evaluation` as the runtime will."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from mlscope.cli import main, render
from mlscope.cli.compare import compare_table
from mlscope.cli.run import _print_human
from mlscope.library import ROW_COLUMNS, ResultSet
from mlscope.store import Store, open_store
from tests.contract.builders import COLD_START, T0, make_measurement, make_system
from tests.contract.test_store_sections import ACCURACY, DIFFERENT, PARITY

ACCURACY_LINE = "accuracy   digits (360 samples): top-1 97.5% [95.4–98.7], top-5 99.7% [98.4–99.9]"
PARITY_LINE = (
    "parity     same as pytorch: max |Δ| 3.1e-06, cosine 1.000000, top-1 agreement 100.0% (64 samples)"
)


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables wide enough that no cell wraps, so a line can be looked for whole."""
    monkeypatch.setattr(render.console, "width", 400)


@pytest.fixture
def store(mlscope_env: dict[str, str]) -> Iterator[Store]:
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as opened:
        yield opened


def measured(valid: bool) -> list[dict[str, Any]]:
    measurements = [make_measurement("single_stream", 1), make_measurement("offline", 8)]
    for m in measurements:
        m["validity"] = {"valid": valid, "reasons": [] if valid else ["too few samples"]}
    return measurements


def evaluated(store: Store, framework: str, n: int, *, valid: bool = True, **sections: Any) -> dict[str, Any]:
    id = store.create_evaluation(
        model={"name": "digits_cnn", "version": "1", "manifest_sha256": "c" * 64},
        manifest={"name": "digits_cnn"},
        framework={"name": framework, "version": None},
        runner="inline",
        device="cpu",
        request={"batch_sizes": [1, 8]},
        created_at=T0 + timedelta(minutes=n),
    )
    store.finish_evaluation(
        id,
        system=make_system(),
        framework={"name": framework, "version": "1.0"},
        cold_start=COLD_START,
        measurements=measured(valid),
        **sections,
    )
    return store.get_evaluation(id)


# ----- the shared lines --------------------------------------------------------------------------


def test_the_accuracy_and_parity_lines_read_as_documented() -> None:
    result = {"status": "succeeded", "accuracy": ACCURACY, "parity": PARITY, "measurements": measured(True)}
    lines = [f"{label:<10} {text}" for label, text in render.section_lines(result)]
    assert lines == [ACCURACY_LINE, PARITY_LINE]


def test_a_different_parity_says_so_with_its_tolerance_and_differing_outputs() -> None:
    outputs = {"logits": {"verdict": "different"}, "features": {"verdict": "same"}}
    text = render.parity_text({**DIFFERENT, "outputs": outputs})
    assert text.startswith("[red]DIFFERENT from pytorch[/red] beyond rtol 0.001, atol 1e-05: max |Δ| 5.0e-01")
    assert "max rel 2.2e-05, cosine 0.910000, top-1 agreement 75.0% (64 samples)" in text
    assert text.endswith("; outputs differing: logits")


def test_accuracy_without_top5_or_interval_shows_what_there_is() -> None:
    text = render.accuracy_text({"dataset": "[photos]", "count": 1, "top1": 1.0, "limit": 1})
    # The dataset name is escaped: rich would otherwise take "[photos]" for markup and drop it
    assert text == r"\[photos] (1 sample, --limit 1): top-1 100.0%"


def test_a_result_without_sections_has_no_lines_and_a_plain_status() -> None:
    result = {"status": "succeeded", "measurements": measured(True)}
    assert render.section_lines(result) == []
    assert render.status_cell(result) == "succeeded"
    assert render.top1_cell(result) == "-"


@pytest.mark.parametrize(
    ("result", "status"),
    [
        ({"measurements": measured(False)}, "[red]succeeded, NOT VALID: every measurement invalid[/red]"),
        (
            {"measurements": measured(True), "parity": DIFFERENT},
            "[red]succeeded, NOT VALID: parity different from pytorch[/red]",
        ),
        (
            {"measurements": [*measured(True), {**make_measurement("server", 1)}]},
            "succeeded [yellow](1 of 3 measurements invalid)[/yellow]",
        ),
        ({"measurements": measured(True), "parity": PARITY}, "succeeded"),
    ],
    ids=["all-invalid", "parity-different", "some-invalid", "parity-same"],
)
def test_the_status_cell_never_shows_a_bad_result_as_plainly_succeeded(
    result: dict[str, Any], status: str
) -> None:
    assert render.status_cell({"status": "succeeded", **result}) == status


# ----- results show / list -----------------------------------------------------------------------


def test_results_show_prints_both_lines_and_json_carries_the_sections(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stored result with accuracy and a passing parity check
    result = evaluated(store, "onnxruntime", 1, accuracy=ACCURACY, parity=PARITY)

    # When shown, Then the accuracy and parity lines are printed and nothing says NOT VALID
    main(["results", "show", result["id"][:8]])
    shown = capsys.readouterr().out
    assert ACCURACY_LINE in shown and PARITY_LINE in shown
    assert "NOT VALID" not in shown

    # When shown as JSON, Then the sections are exactly as stored
    main(["results", "show", result["id"], "--json"])
    document = json.loads(capsys.readouterr().out)
    assert (document["accuracy"], document["parity"]) == (ACCURACY, PARITY)


def test_results_show_says_a_different_parity_makes_the_result_not_valid(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    result = evaluated(store, "onnxruntime", 1, parity=DIFFERENT)
    main(["results", "show", result["id"]])
    shown = capsys.readouterr().out
    assert "parity     DIFFERENT from pytorch beyond rtol 0.001, atol 1e-05" in shown
    assert "NOT VALID: parity different from pytorch" in shown
    assert "accuracy " not in shown


def test_results_list_shows_top1_only_when_some_result_has_accuracy_and_flags_bad_results(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given results without accuracy only: one all-invalid, one valid
    all_invalid = evaluated(store, "pytorch", 1, valid=False)
    evaluated(store, "tensorflow", 2)

    # When listed, Then there is no top-1 column, and the all-invalid one is not shown as plainly succeeded
    main(["results", "list"])
    listed = capsys.readouterr().out
    assert "top-1" not in listed
    row = next(line for line in listed.splitlines() if all_invalid["id"][:8] in line)
    assert "succeeded, NOT VALID: every measurement invalid" in row

    # Given one more, with accuracy and a different parity
    flagged = evaluated(store, "onnxruntime", 3, accuracy=ACCURACY, parity=DIFFERENT)

    # When listed, Then a top-1 column appears, filled for it and "-" for the others
    main(["results", "list"])
    listed = capsys.readouterr().out
    assert "top-1" in listed
    row = next(line for line in listed.splitlines() if flagged["id"][:8] in line)
    assert "97.5%" in row and "NOT VALID: parity different from pytorch" in row
    row = next(line for line in listed.splitlines() if all_invalid["id"][:8] in line)
    assert "97.5%" not in row and " - " in row

    # When listed as JSON lines, Then the sections are as stored, and absent where not measured
    main(["results", "list", "--json"])
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d.get("accuracy") for d in documents] == [ACCURACY, None, None]
    assert ["parity" in d for d in documents] == [True, False, False]


# ----- run ---------------------------------------------------------------------------------------


def test_run_prints_the_same_lines_under_each_result(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    results = [
        evaluated(store, "onnxruntime", 1, accuracy=ACCURACY, parity=PARITY),
        evaluated(store, "tensorflow", 2, parity=DIFFERENT),
        evaluated(store, "pytorch", 3),
    ]
    _print_human(results)
    printed = capsys.readouterr().out
    assert f"  {ACCURACY_LINE}" in printed and f"  {PARITY_LINE}" in printed
    assert "  NOT VALID: parity different from pytorch" in printed
    assert printed.count("accuracy ") == 1 and printed.count("parity     ") == 2


def test_the_run_table_shows_every_point_of_a_different_parity_as_not_valid(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a result whose points were measured validly but whose outputs differ from the reference's
    # (an int8 model checked against its float source), beside one without a parity check
    results = [evaluated(store, "tensorflow", 1, parity=DIFFERENT), evaluated(store, "pytorch", 2)]
    # When the run's measurement table is printed
    render.console.print(render.measurement_table(results))
    table = capsys.readouterr().out
    # Then each of the first one's points reads "NO (parity)", never "yes"; the other's stay valid
    differing = [line for line in table.splitlines() if "tensorflow" in line]
    assert len(differing) == 2 and all("NO (parity)" in line and "yes" not in line for line in differing)
    assert all("yes" in line for line in table.splitlines() if "pytorch" in line)


# ----- compare -----------------------------------------------------------------------------------


def test_compare_shows_top1_when_some_row_has_it_and_a_different_parity_as_invalid(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    evaluated(store, "onnxruntime", 1, accuracy=ACCURACY, parity=DIFFERENT)
    evaluated(store, "pytorch", 2)
    rows = store.compare()

    render.console.print(compare_table(rows))
    table = capsys.readouterr().out
    assert "top-1" in table
    lines = [line for line in table.splitlines() if "onnxruntime" in line]
    assert len(lines) == 2 and all("97.5%" in line and "NO" in line for line in lines)
    assert all("yes" in line for line in table.splitlines() if "pytorch" in line)

    render.console.print(compare_table([row for row in rows if row["framework"] == "pytorch"]))
    assert "top-1" not in capsys.readouterr().out


# ----- the Python API ----------------------------------------------------------------------------


def test_the_result_set_gains_top1_top5_and_parity_columns_when_present(store: Store) -> None:
    with_sections = evaluated(store, "onnxruntime", 1, accuracy=ACCURACY, parity=DIFFERENT)
    plain = evaluated(store, "pytorch", 2)

    frame = ResultSet([with_sections, plain]).to_pandas()
    at = list(ROW_COLUMNS).index("throughput") + 1
    assert list(frame.columns)[at : at + 3] == ["top1", "top5", "parity"]
    assert frame["top1"].tolist()[:2] == [0.975, 0.975] and frame["top1"].isna().tolist()[2:] == [True, True]
    # A different parity makes its rows invalid, and the set not ok
    assert frame["valid"].tolist() == [False, False, True, True]
    results = ResultSet([with_sections, plain])
    assert not results.ok
    assert "onnxruntime parity DIFFERENT from pytorch" in repr(results)

    plain_only = ResultSet([plain]).to_pandas()
    assert list(plain_only.columns) == list(ROW_COLUMNS)
    assert ResultSet([plain]).ok
