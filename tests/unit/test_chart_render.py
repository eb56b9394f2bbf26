"""The chart files (mlscope.analysis.chart_render) of every chart kind: the SVG matplotlib draws holds the
chart's title, axis titles, series names and notes as text and each series' artists under their ids,
so every series kind (bars with widths, horizontal bars from a base, steps, lines with whiskers,
markers, a right-hand axis) is drawn. Given / When / Then in each test's comments."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mlscope.analysis.chart_builders import (
    batch_curve,
    cold_start_bars,
    compare_bars,
    latency_cdf,
    latency_histogram,
    layer_bars,
    throughput_latency,
    timeline,
)
from mlscope.analysis.chart_render import describe, write_chart
from mlscope.analysis.charts import Chart
from mlscope.contract.errors import UserError
from tests.unit.test_charts import TWO_POINTS, framework_pass, row

SVG = "{http://www.w3.org/2000/svg}"
CHARTS = {
    "latency": lambda: latency_histogram(TWO_POINTS),
    "cdf": lambda: latency_cdf(TWO_POINTS),
    "batch": lambda: batch_curve(TWO_POINTS),
    "throughput-latency": lambda: throughput_latency([TWO_POINTS]),
    "layers": lambda: layer_bars(TWO_POINTS, framework_pass(), top=2),
    "compare": lambda: compare_bars(
        [row("onnxruntime", "a", 1, 2.0), row("pytorch", "a", 1, 3.0, valid=False, reasons=["unstable"])]
    ),
    "cold-start": lambda: cold_start_bars(TWO_POINTS),
    "timeline": lambda: timeline(framework_pass(), max_spans=5),
}


@pytest.mark.parametrize("kind", list(CHARTS))
def test_every_kind_is_drawn_with_its_series_axes_and_notes(kind: str, tmp_path: Path) -> None:
    # Given a chart of the kind, when it is written as SVG
    chart: Chart = CHARTS[kind]()
    write_chart(chart, tmp_path / "chart.svg")
    root = ET.parse(tmp_path / "chart.svg").getroot()
    # Then its text holds the title, the axis titles and every series name
    texts = {"".join(element.itertext()).strip() for element in root.iter(f"{SVG}text")}
    wanted = {chart.title, chart.x_label, chart.y_label, *(s.name for s in chart.series)}
    assert wanted <= texts, wanted - texts
    if chart.y2_label:
        assert chart.y2_label in texts
    # ... every note, wrapped into lines
    written = " ".join(texts)
    for note in chart.notes:
        assert all(word in written for word in note.split())
    # ... each series drawn, its artists under its ids
    ids = [element.get("id") or "" for element in root.iter()]
    for index in range(len(chart.series)):
        assert any(i.startswith(f"series-{index}-") for i in ids), (kind, index)
    # ... and its metadata says what it draws
    description = root.find(".//{http://purl.org/dc/elements/1.1/}description")
    assert description is not None and json.loads(description.text or "") == describe(chart)


def test_a_file_of_no_known_format_is_refused_before_drawing(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"-o .*chart\.pdf: cannot tell the format from '\.pdf': expected"):
        write_chart(CHARTS["batch"](), tmp_path / "chart.pdf")
    with pytest.raises(UserError, match="cannot write it"):
        write_chart(CHARTS["batch"](), tmp_path / "missing" / "chart.png")
    assert list(tmp_path.iterdir()) == []
