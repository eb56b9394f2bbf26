"""The results table `run`, `submit --wait` and `results show` print: each row's latencies in the unit
its median reads best in, with about three significant figures, and a line under the table saying
what the caveat mark beside a valid point means. The JSON stays in ms (a contract): only the table
changes. Hand-built results in the shape docs/design.md fixes."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from mlscope.cli.render import CAVEAT_LEGEND, duration_text, measurement_table


def point(median_ms: float, *, reasons: tuple[str, ...] = (), batch_size: int = 1) -> dict[str, Any]:
    return {
        "scenario": "single_stream",
        "batch_size": batch_size,
        "latency_ms": {
            "count": 1000,
            "median": median_ms,
            "median_ci": [median_ms * 0.999, median_ms * 1.001],
            "p90": median_ms * 1.2,
            "p99": median_ms * 3,
            "cv": 2.49 if reasons else 0.01,
        },
        "throughput": 1000 / median_ms,
        "validity": {"valid": True, "reasons": list(reasons)},
    }


def result(*points: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "0123456789abcdef",
        "status": "succeeded",
        "model": {"name": "tiny", "version": "1", "manifest_sha256": None},
        "framework": {"name": "onnxruntime", "version": "1.23.0"},
        "measurements": list(points),
    }


def rows(*points: dict[str, Any]) -> list[list[str]]:
    console = Console(width=250, record=True)
    console.print(measurement_table([result(*points)]))
    lines = console.export_text().splitlines()
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines if line.startswith("│")]


def text(*points: dict[str, Any]) -> str:
    console = Console(width=250, record=True)
    console.print(measurement_table([result(*points)]))
    return console.export_text()


@pytest.mark.parametrize(
    "shown",
    [
        # median ms, then the median, its interval, p90 and p99 as the table prints them
        (0.006, "6.00 µs", "5.99–6.01 µs", "7.20 µs", "18.0 µs"),
        (0.0004, "400 ns", "399.6–400.4 ns", "480 ns", "1,200 ns"),
        (11.22, "11.2 ms", "11.21–11.23 ms", "13.5 ms", "33.7 ms"),
        (1520.0, "1.52 s", "1.518–1.522 s", "1.82 s", "4.56 s"),
    ],
)
def test_each_row_reads_in_the_unit_its_median_needs(shown: tuple[Any, ...]) -> None:
    # Given a point whose median is so many ms, its interval ±0.1% (three figures would print it as
    # one number)
    median_ms, *cells = shown
    (row,) = rows(point(median_ms))
    # Then its median, interval and percentiles are in one unit, named, the interval's ends apart
    assert row[4:8] == cells


def test_a_duration_names_its_unit() -> None:
    assert duration_text(0.25) == "250 µs" and duration_text(2500.0) == "2.50 s"
    assert duration_text(None) == "-" and duration_text(0.0) == "0.00 ms"


def test_rows_of_one_table_each_take_their_own_unit() -> None:
    first, second = rows(point(0.006), point(250.0, batch_size=64))
    assert first[4] == "6.00 µs" and second[4] == "250 ms"


def test_the_caveat_mark_is_explained_under_the_table() -> None:
    # Given a valid point with a caveat (its CV high) and one without
    shown = text(point(0.006, reasons=("variable: CV 2.49 > 0.25",)), point(0.006, batch_size=2))
    # Then the caveat's row is marked, and a line under the table says what the mark means
    assert "yes (!)" in shown
    assert shown.rstrip().splitlines()[-1].strip() == CAVEAT_LEGEND
    # ... and a table with no caveat has no such line
    assert CAVEAT_LEGEND not in text(point(0.006))
