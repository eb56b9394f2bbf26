"""`mlscope plot` and `mlscope run --plot` on real stored results: one real evaluation (the tiny MLP on
ONNX Runtime at batch sizes 1 and 2, traced at the FRAMEWORK level, run once for the module by
`mlscope run --plot`) and one made with the store contract's builders on another system, whose points
are invalid. The files are opened as what they claim to be (PIL, an XML parser, the page's embedded
JSON) and their axes and series checked against the chart's own description (`--json`).

Figures are never asserted against fixed numbers (the machine is shared). Given / When / Then in
each test's comments.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from PIL import Image

from mlscope.analysis.chart_render import DPI, FIGURE_INCHES
from mlscope.cli import main
from mlscope.contract.settings import load_settings
from mlscope.store import iter_spans, open_store
from tests.conftest import REPO, RUNTIME_MANIFESTS
from tests.contract.builders import finish, make_measurement, make_system, submit
from tests.fixtures.browser import CHROMIUM_ARGS, require_chromium
from tests.integration.test_run_cli import FAST, ran_valid

pytestmark = pytest.mark.slow

SIZE = (round(FIGURE_INCHES[0] * DPI), round(FIGURE_INCHES[1] * DPI))


@dataclass(frozen=True)
class Stored:
    """The module's store: its environment, a folder for files, the real result and the invalid one."""

    env: dict[str, str]
    folder: Path
    result: dict[str, Any]
    other_id: str
    run_stderr: str

    @property
    def id(self) -> str:
        return str(self.result["id"])


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stored]:
    folder = tmp_path_factory.mktemp("plot")
    env = {
        "MLSCOPE_STORE_URL": f"sqlite:///{folder / 'store.db'}",
        "MLSCOPE_CACHE_DIR": str(folder / "cache"),
        "MLSCOPE_MANIFESTS": str(RUNTIME_MANIFESTS),
        "MLSCOPE_SETTINGS": str(folder / "no-settings.toml"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    # Given a real run, which writes its own plot beside the table
    run = subprocess.run(
        [sys.executable, "-m", "mlscope", "run", "test_tiny_mlp", "-f", "onnxruntime", "-b", "1,2",
         "--trace-level", "framework", "--json", "--plot", str(folder / "run.png"), *FAST],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    [result] = ran_valid(run)
    assert result["status"] == "succeeded", result.get("error")
    # ... and a PyTorch evaluation of the same model on another system, every point invalid
    with mock.patch.dict(os.environ, env), open_store(env["MLSCOPE_STORE_URL"]) as store:
        other = submit(store, model="test_tiny_mlp", framework="pytorch")
        store.start_evaluation(other)
        finish(
            store,
            other,
            system=make_system(2),
            measurements=[make_measurement(batch_size=1, mean=3.0), make_measurement(batch_size=2, mean=5.0)],
        )
    yield Stored(env, folder, result, other, run.stderr)


def plot(stored: Stored, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`mlscope plot ARGS` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    with mock.patch.dict(os.environ, stored.env):
        try:
            main(["plot", *args])
            code = 0
        except SystemExit as exited:
            code = int(exited.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def chart_of(stored: Stored, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = plot(stored, capsys, *args, "--json")
    assert code == 0, err
    chart: dict[str, Any] = json.loads(out)
    return chart


def names(chart: dict[str, Any]) -> list[str]:
    return [series["name"] for series in chart["series"]]


def invalid_batches(result: dict[str, Any]) -> set[int]:
    return {m["batch_size"] for m in result["measurements"] if not m["validity"]["valid"]}


def png_description(path: Path) -> dict[str, Any]:
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == SIZE
        image.load()
        description: dict[str, Any] = json.loads(image.info["Description"])
    return description


def plotly_figure(html: str) -> dict[str, Any]:
    """The figure a plotly page draws: the data and layout passed to Plotly.newPlot."""
    decoder = json.JSONDecoder()
    # The page's call is the last: plotly.js itself names the function too.
    start = html.rindex("Plotly.newPlot(") + len("Plotly.newPlot(")
    _, end = decoder.raw_decode(html, html.index('"', start))  # the div's id
    data, end = decoder.raw_decode(html, html.index("[", end))
    layout, _ = decoder.raw_decode(html, html.index("{", end))
    return {"data": data, "layout": layout}


def test_run_plot_writes_the_batch_curve_beside_the_table(stored: Stored) -> None:
    # Then `mlscope run --plot` wrote a PNG of the batch curve of what ran, and said so
    assert f"plot written to {stored.folder / 'run.png'}" in stored.run_stderr
    description = png_description(stored.folder / "run.png")
    assert description["kind"] == "batch"
    assert {"p50 latency", "p90 latency", "p99 latency", "throughput"} <= set(description["series"])
    assert ("p50 latency (invalid)" in description["series"]) == bool(invalid_batches(stored.result))


def test_png_svg_and_html_show_the_same_series_axes_and_notes(
    stored: Stored, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the batch curve's description
    chart = chart_of(stored, capsys, stored.id[:8], "--kind", "batch")
    assert chart["x_label"] == "batch size" and chart["y2_label"] == "throughput (samples/s)"
    # When it is written as PNG, SVG and HTML
    for suffix in ("png", "svg", "html"):
        code, _, err = plot(
            stored, capsys, stored.id[:8], "--kind", "batch", "-o", str(stored.folder / f"b.{suffix}")
        )
        assert code == 0 and f"plot written to {stored.folder / f'b.{suffix}'}" in err, err
    # Then the PNG is an image of the expected size that says what it draws
    description = png_description(stored.folder / "b.png")
    assert description["series"] == names(chart) and description["notes"] == chart["notes"]
    # ... the SVG is XML with the title, the three axis titles and every series name as text, and
    # each series' artists under their ids
    root = ET.parse(stored.folder / "b.svg").getroot()
    texts = {"".join(element.itertext()).strip() for element in root.iter("{http://www.w3.org/2000/svg}text")}
    assert {chart["title"], chart["x_label"], chart["y_label"], chart["y2_label"], *names(chart)} <= texts
    ids = [element.get("id") or "" for element in root.iter()]
    for index in range(len(chart["series"])):
        assert any(i.startswith(f"series-{index}-") for i in ids), index
    # ... and the page draws the same traces, with plotly.js inlined and nothing fetched from elsewhere
    html = (stored.folder / "b.html").read_text(encoding="utf-8")
    figure = plotly_figure(html)
    assert [trace["name"] for trace in figure["data"]] == names(chart)
    assert figure["layout"]["xaxis"]["title"]["text"] == "batch size"
    throughput = figure["data"][names(chart).index("throughput")]
    assert throughput["yaxis"] == "y2" and throughput["x"] == [1, 2]
    assert not re.search(r"<script[^>]*\bsrc=", html) and "<link" not in html
    assert len(html) > 1_000_000  # plotly.js itself is in the page
    embedded = re.search(r'<script type="application/json" id="mlscope-chart">(.*?)</script>', html, re.S)
    assert embedded and names(json.loads(embedded.group(1))) == names(chart)


def test_latency_histogram_and_cdf_of_the_real_run(
    stored: Stored, capsys: pytest.CaptureFixture[str]
) -> None:
    counts = {m["batch_size"]: m["latency_ms"]["count"] for m in stored.result["measurements"]}
    invalid = invalid_batches(stored.result)
    expected = [f"single_stream · batch {b}" + (" (invalid)" if b in invalid else "") for b in sorted(counts)]
    # When the histogram is drawn: one series per point, on the same bins, each summing to 100% but for
    # the stragglers beyond twice the largest p99 (at most 1% of each point), which a note counts
    histogram = chart_of(stored, capsys, stored.id, "--kind", "latency")
    assert names(histogram) == expected and histogram["barmode"] == "overlay"
    first, second = histogram["series"]
    assert first["x"] == second["x"] and first["width"] == second["width"]
    notes = histogram["notes"]
    beyond = [note for note in notes if "beyond the chart" in note]
    for series in (first, second):
        assert 99.0 - 1e-9 <= sum(series["y"]) <= 100.0 + 1e-9
        assert (sum(series["y"]) < 100.0 - 1e-9) <= bool(beyond)
    assert any("points invalid" in note for note in notes) == bool(invalid)
    # ... the CDF: a step per stored latency (up to 1,000), up to 100%
    cdf = chart_of(stored, capsys, stored.id, "--kind", "cdf")
    for series, batch_size in zip(cdf["series"], sorted(counts), strict=True):
        assert series["kind"] == "step" and len(series["x"]) == min(counts[batch_size], 1000)
        assert series["x"] == sorted(series["x"]) and series["y"][-1] == pytest.approx(100.0)


def test_layers_timeline_and_cold_start_of_the_real_run(
    stored: Stored, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the run's trace
    with mock.patch.dict(os.environ, stored.env), open_store(load_settings().store_url) as store:
        spans = list(iter_spans(store, stored.id))
    # When its layers are drawn: one series per batch size, time per inference per layer type
    layers = chart_of(stored, capsys, stored.id, "--kind", "layers", "--top", "2")
    assert names(layers) == ["batch 1", "batch 2"]
    assert all(s["kind"] == "hbar" and s["y"] == layers["series"][0]["y"] for s in layers["series"])
    assert layers["x_label"] == "time per traced inference (ms)"
    # ... its timeline: the longest spans only, saying how many there were
    timeline = chart_of(stored, capsys, stored.id, "--kind", "timeline", "--max-spans", "5")
    assert sum(len(s["x"]) for s in timeline["series"]) == 5
    assert timeline["notes"] == [f"showing the 5 longest of {len(spans):,} spans"]
    longest = sorted((s["end_ns"] - s["start_ns"]) / 1e6 for s in spans)[-5:]
    assert sorted(d for s in timeline["series"] for d in s["x"]) == pytest.approx(longest)
    # ... its cold start, phase by phase
    cold = chart_of(stored, capsys, stored.id[:8], "--kind", "cold-start")
    assert cold["series"][0]["x"][-3:] == ["framework import", "model load", "first inference"]
    assert cold["series"][0]["y"][-1] == pytest.approx(stored.result["cold_start"]["first_inference_ms"])


def test_compare_and_throughput_latency_mark_the_invalid_points(
    stored: Stored, capsys: pytest.CaptureFixture[str]
) -> None:
    host = stored.result["system"]["hostname"]
    real_invalid = len(invalid_batches(stored.result))
    # When the model's comparison is drawn from a filter
    compare = chart_of(stored, capsys, "model=test_tiny_mlp", "--kind", "compare")
    # Then one series per framework × system, the other system's invalid bars named so and counted
    assert "pytorch · host-2 (invalid)" in names(compare)
    assert any(name.startswith(f"onnxruntime · {host}") for name in names(compare))
    assert compare["notes"][0].startswith(f"{real_invalid + 2} of 4 points invalid")
    code, _, err = plot(
        stored, capsys, "model=test_tiny_mlp", "--kind", "compare", "-o", str(stored.folder / "c.svg")
    )
    assert code == 0, err
    svg = ET.parse(stored.folder / "c.svg").getroot()
    texts = {"".join(e.itertext()).strip() for e in svg.iter("{http://www.w3.org/2000/svg}text")}
    assert "pytorch · host-2 (invalid)" in texts
    assert any(text.startswith(f"{real_invalid + 2} of 4 points invalid") for text in texts)
    # ... and latency against throughput: each setup's p50 and p99, its invalid points marked
    curve = chart_of(stored, capsys, "model=test_tiny_mlp", "--kind", "throughput-latency")
    assert {
        "test_tiny_mlp · pytorch 2.3.0 · host-2 p50",
        "test_tiny_mlp · pytorch 2.3.0 · host-2 p50 (invalid)",
    } <= set(names(curve))
    # ... the same from two ids
    both = chart_of(stored, capsys, f"{stored.id[:8]},{stored.other_id[:8]}", "--kind", "throughput-latency")
    assert sorted(names(both)) == sorted(names(curve))


def test_without_a_kind_the_chart_run_plot_would_draw(
    stored: Stored, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given the real run (batch sizes 1 and 2), one point of it (a filter at batch size 1), and two ids
    one_point = "model=test_tiny_mlp,framework=onnxruntime,batch_size=1"
    two = f"{stored.id[:8]},{stored.other_id[:8]}"
    # When each is drawn with no --kind, Then the run's batch curve, the point's latency histogram, and
    # latency against throughput of the two
    assert chart_of(stored, capsys, stored.id) == chart_of(stored, capsys, stored.id, "--kind", "batch")
    histogram = chart_of(stored, capsys, one_point)
    assert histogram == chart_of(stored, capsys, one_point, "--kind", "latency")
    assert histogram["barmode"] == "overlay"
    assert chart_of(stored, capsys, two) == chart_of(stored, capsys, two, "--kind", "throughput-latency")
    # ... and `-o FILE` alone writes the file
    code, _, err = plot(stored, capsys, stored.id[:8], "-o", str(tmp_path / "first.png"))
    assert code == 0, err
    batch = chart_of(stored, capsys, stored.id, "--kind", "batch")
    assert png_description(tmp_path / "first.png")["series"] == names(batch)


def test_the_api_answers_the_same_chart(stored: Stored, capsys: pytest.CaptureFixture[str]) -> None:
    from werkzeug.serving import make_server

    from mlscope.api.app import create_app

    # Given the API serving the same store
    with mock.patch.dict(os.environ, stored.env), open_store(stored.env["MLSCOPE_STORE_URL"]) as store:
        app = create_app(load_settings(), store=store)
        server = make_server("127.0.0.1", 0, app, threaded=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            url = f"http://127.0.0.1:{server.server_port}"
            # When a chart is read through it (by id, and by filter), then it is the local one
            for args in (
                (stored.id[:8], "--kind", "batch"),
                (stored.id, "--kind", "timeline", "--max-spans", "50"),
                ("model=test_tiny_mlp", "--kind", "compare"),
                ("model=test_tiny_mlp,framework=onnxruntime", "--kind", "latency"),
            ):
                assert chart_of(stored, capsys, *args, "--api", url) == chart_of(stored, capsys, *args), args
        finally:
            server.shutdown()
            app.extensions["mlscope"].agents.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("{id}", "--kind", "batch", "-o", "x.jpg"),
            "-o x.jpg: cannot tell the format from '.jpg': expected",
        ),
        (("{id}", "--kind", "batch"), "missing -o FILE: expected a file ending in .png, .svg or .html"),
        (("{id}", "--kind", "histogram", "-o", "x.png"), "'histogram' is not one of 'latency', 'cdf'"),
        (
            ("ffffffffffff", "--kind", "batch", "-o", "x.png"),
            "ID|FILTER: no evaluation with id 'ffffffffffff'",
        ),
        (
            ("model=nothing", "--kind", "latency", "-o", "x.png"),
            "no succeeded evaluation matches model=nothing",
        ),
        (("mdl=x", "--kind", "compare", "-o", "x.png"), "unknown filter key 'mdl': expected some of model"),
        (
            ("{id},{other}", "--kind", "cdf", "-o", "x.png"),
            "--kind cdf draws one evaluation: expected one id",
        ),
        (
            ("{other}", "--kind", "layers", "-o", "x.png"),
            "has no layer spans (trace level NO_TRACE): run it with --trace-level framework",
        ),
        (("{other}", "--kind", "timeline", "-o", "x.png"), "no spans: run with --trace-level framework"),
    ],
)
def test_mistakes_exit_2_naming_what_is_wrong(
    stored: Stored, capsys: pytest.CaptureFixture[str], tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    given = [a.format(id=stored.id, other=stored.other_id) for a in args]
    given = [str(tmp_path / a) if a.startswith("x.") else a for a in given]
    code, out, err = plot(stored, capsys, *given)
    assert code == 2 and out == ""
    assert message.replace("x.", f"{tmp_path}/x.") in err, err
    assert "Traceback" not in err and not list(tmp_path.iterdir())


def test_run_refuses_a_plot_it_could_not_write_before_running(
    stored: Stored, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    capsys.readouterr()
    with mock.patch.dict(os.environ, stored.env), pytest.raises(SystemExit) as exited:
        main(["run", "test_tiny_mlp", "-f", "onnxruntime", "--plot", str(tmp_path / "x.gif")])
    assert exited.value.code == 2
    assert f"--plot {tmp_path / 'x.gif'}: cannot tell the format from '.gif'" in capsys.readouterr().err
    with mock.patch.dict(os.environ, stored.env), open_store(load_settings().store_url) as store:
        assert store.count_evaluations() == 2  # nothing ran


def test_the_page_draws_in_a_real_browser_with_nothing_fetched(
    stored: Stored, capsys: pytest.CaptureFixture[str]
) -> None:
    chromium = require_chromium()
    from playwright.sync_api import sync_playwright

    # Given the comparison as a page
    page_file = stored.folder / "compare.html"
    code, _, err = plot(stored, capsys, "model=test_tiny_mlp", "--kind", "compare", "-o", str(page_file))
    assert code == 0, err
    chart = chart_of(stored, capsys, "model=test_tiny_mlp", "--kind", "compare")
    # When Chromium opens it from the file
    fetched: list[str] = []
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on("request", lambda request: fetched.append(request.url))
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(page_file.as_uri())
            page.wait_for_selector("g.trace.bars")
            traces = page.evaluate("document.querySelectorAll('g.trace.bars').length")
            legend = page.evaluate("[...document.querySelectorAll('.legendtext')].map(e => e.textContent)")
            title = page.evaluate("document.querySelector('.gtitle').textContent")
        finally:
            browser.close()
    # Then it draws every series, named in the legend (the invalid one as such), with no error and
    # nothing requested but the file itself
    assert traces == len(chart["series"]) and legend == names(chart)
    assert "pytorch · host-2 (invalid)" in legend and title == chart["title"]
    assert errors == [] and fetched == [page_file.as_uri()]


def test_compare_plot_is_checked_before_submitting_and_drawn_from_the_rows(
    stored: Stored, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from mlscope.cli.compare import _write_plot

    # Given a --plot file of no known format, then compare refuses before anything reaches the farm
    capsys.readouterr()
    unreachable = {**stored.env, "MLSCOPE_API_URL": "http://127.0.0.1:9"}
    with mock.patch.dict(os.environ, unreachable), pytest.raises(SystemExit) as exited:
        main(["compare", "-m", "test_tiny_mlp", "-f", "onnxruntime", "--plot", str(tmp_path / "x.txt")])
    assert exited.value.code == 2
    assert f"--plot {tmp_path / 'x.txt'}: cannot tell the format" in capsys.readouterr().err
    # Given the comparison's rows, then the plot is their compare bars, written and said so
    with mock.patch.dict(os.environ, stored.env), open_store(load_settings().store_url) as store:
        rows = store.compare(models=["test_tiny_mlp"])
    _write_plot(rows, str(tmp_path / "compare.png"))
    assert f"plot written to {tmp_path / 'compare.png'}" in capsys.readouterr().err
    assert png_description(tmp_path / "compare.png")["kind"] == "compare"
    # ... and rows with nothing to draw leave a warning, not a failure (the table is written already)
    _write_plot([], str(tmp_path / "empty.png"))
    assert "no plot written to" in capsys.readouterr().err and not (tmp_path / "empty.png").exists()
