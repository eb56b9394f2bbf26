"""How the comparison's consumers show a row's model: by its display name (`hf:gpt2[n_layer=2]`), so
that two workloads of one model name read apart, in the CLI's table and the comparison's bars."""

from __future__ import annotations

from typing import Any

from mlscope.analysis.chart_compare import compare_bars
from mlscope.cli import render
from mlscope.cli.compare import compare_table
from tests.unit.test_charts import row


def shown(layers: int, median: float, key: str, **overrides: Any) -> dict[str, Any]:
    return row(
        "pytorch",
        "a",
        1,
        median,
        model="hf:gpt2",
        display_name=f"hf:gpt2[n_layer={layers}]",
        workload_key=key,
        **overrides,
    )


def test_the_cli_table_shows_each_rows_display_name_as_written() -> None:
    rows = [shown(2, 1.0, "a" * 16), shown(4, 2.0, "b" * 16)]
    with render.console.capture() as captured:
        render.console.print(compare_table(rows))
    table = captured.get()
    # the brackets printed as they are, not read as rich markup
    assert "hf:gpt2[n_layer=2]" in table and "hf:gpt2[n_layer=4]" in table
    # and a row from an API without display names shows its bare name
    bare = {k: v for k, v in shown(2, 1.0, "a" * 16).items() if k != "display_name"}
    with render.console.capture() as captured:
        render.console.print(compare_table([bare]))
    assert "hf:gpt2" in captured.get() and "n_layer" not in captured.get()


def test_the_bars_name_each_workload() -> None:
    # Given two configs of one model, and one config at two server rates (one display name, two keys)
    chart = compare_bars(
        [
            shown(2, 1.0, "a" * 16),
            shown(4, 2.0, "b" * 16),
            shown(4, 3.0, "c" * 16, scenario="server", target_qps=10),
            shown(4, 4.0, "d" * 16, scenario="server", target_qps=30),
        ]
    )
    [series] = chart.series
    # Then every bar has a category of its own: the display name, and where one name @ batch
    # measured several workloads, the start of each one's key
    assert list(series.x) == [
        "hf:gpt2[n_layer=2] @ 1 single_stream",
        "hf:gpt2[n_layer=4] @ 1 single_stream",
        "hf:gpt2[n_layer=4] [cccccc] @ 1 server",
        "hf:gpt2[n_layer=4] [dddddd] @ 1 server",
    ]
