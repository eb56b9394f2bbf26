"""How a dashboard page draws a chart (mlscope.api.dashboard.figures.page_layout): log axes labelled
with values and units, the legend above the plot, a right-hand axis from zero, no title or notes inside
the plot."""

from __future__ import annotations

from mlscope.analysis.charts import Chart, Series, to_plotly
from mlscope.api.dashboard.figures import embed, page_layout


def _chart(x_label: str, x: list[float], x_type: str = "log") -> Chart:
    return Chart(
        kind="cdf",
        title="latency CDF",
        x_label=x_label,
        y_label="latencies at or below (%)",
        series=(Series(name="batch 1", x=x, y=[50.0] * len(x), kind="step"),),
        x_type=x_type,  # type: ignore[arg-type]
        notes=("1 of 1 points invalid: batch 1 (too few samples)",),
    )


def test_a_log_latency_axis_is_labelled_at_1_2_5_steps_with_its_unit() -> None:
    layout = page_layout(to_plotly(_chart("latency (ms)", [0.04, 0.3, 2.4])))["layout"]
    assert layout["xaxis"]["tickvals"] == [0.05, 0.1, 0.2, 0.5, 1.0, 2.0]
    assert layout["xaxis"]["ticktext"] == ["0.05 ms", "0.1 ms", "0.2 ms", "0.5 ms", "1 ms", "2 ms"]


def test_a_log_throughput_axis_names_its_unit_before_the_titles_remarks() -> None:
    title = "achieved throughput (samples/s; a search's probes: queries/s)"
    layout = page_layout(to_plotly(_chart(title, [900.0, 4000.0])))["layout"]
    assert layout["xaxis"]["ticktext"] == ["1,000 samples/s", "2,000 samples/s", "5,000 samples/s"]


def test_a_log_batch_axis_is_labelled_at_the_batch_sizes() -> None:
    layout = page_layout(to_plotly(_chart("batch size", [1, 8, 64])))["layout"]
    assert (layout["xaxis"]["tickvals"], layout["xaxis"]["ticktext"]) == (
        [1.0, 8.0, 64.0],
        ["batch 1", "batch 8", "batch 64"],
    )


def test_a_linear_axis_keeps_plotlys_own_ticks() -> None:
    layout = page_layout(to_plotly(_chart("latency (ms)", [1.0, 2.0], x_type="linear")))["layout"]
    assert "tickvals" not in layout["xaxis"]


def test_the_page_says_title_and_notes_outside_the_plot_and_each_note_once() -> None:
    said: set[str] = set()
    first, second = embed(_chart("latency (ms)", [1.0, 30.0]), said), embed(_chart("ms", [1.0, 30.0]), said)
    assert first["notes"] == ["1 of 1 points invalid: batch 1 (too few samples)"] and second["notes"] == []
    layout = page_layout(to_plotly(_chart("latency (ms)", [1.0, 30.0])))["layout"]
    assert "title" not in layout and "annotations" not in layout
    assert layout["legend"]["yanchor"] == "bottom" and layout["legend"]["y"] > 1


def test_a_right_hand_axis_starts_at_zero() -> None:
    chart = Chart(
        kind="batch",
        title="latency and throughput",
        x_label="batch size",
        y_label="latency (ms)",
        y2_label="throughput (samples/s)",
        series=(
            Series(name="p50 latency", x=[1, 2], y=[1.0, 1.1]),
            Series(name="throughput", x=[1, 2], y=[990.0, 1000.0], axis="y2"),
        ),
    )
    assert page_layout(to_plotly(chart))["layout"]["yaxis2"]["rangemode"] == "tozero"
