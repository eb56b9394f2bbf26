"""The chart builders (mlscope.analysis.chart_builders) on results in the store's public shape, built here
from known latencies so every bin, step, whisker and note can be checked against them. Given / When /
Then in each test's comments."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from mlscope.analysis.chart_builders import (
    HISTOGRAM_MAX_BINS,
    batch_curve,
    cold_start_bars,
    compare_bars,
    latency_cdf,
    latency_histogram,
    layer_bars,
    throughput_latency,
    timeline,
)
from mlscope.analysis.chart_generation import pareto_chart, request_cdf, server_metrics_chart
from mlscope.analysis.charts import CHART_KINDS, Chart, to_plotly
from mlscope.contract.errors import UserError
from mlscope.contract.generation import GenerationSettings
from mlscope.contract.load import LoadSettings
from mlscope.runtime.generate.sweep import run_sweep

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def measurement(
    batch_size: int,
    latencies_ms: list[float] | np.ndarray,
    *,
    scenario: str = "single_stream",
    reasons: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A measurement whose summary is computed from `latencies_ms`, invalid when given reasons."""
    values = np.asarray(latencies_ms, dtype=float)
    median = float(np.median(values))
    return {
        "scenario": scenario,
        "batch_size": batch_size,
        "latency_ms": {
            "count": len(values),
            "mean": float(values.mean()),
            "median": median,
            "p90": float(np.percentile(values, 90)),
            "p95": float(np.percentile(values, 95)),
            "p99": float(np.percentile(values, 99)),
            "p999": float(np.percentile(values, 99.9)),
            "min": float(values.min()),
            "max": float(values.max()),
            "median_ci": [median * 0.98, median * 1.03],
        },
        "throughput": 1000.0 * batch_size / median,
        "validity": {"valid": not reasons, "reasons": list(reasons)},
        "latencies_ns": [round(v * MS) for v in values],
        "settings": {"confidence": 0.95},
    }


def evaluation(measurements: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    return {
        "id": "a1b2c3d4" * 4,
        "status": "succeeded",
        "model": {"name": "resnet18", "version": "1.0"},
        "framework": {"name": "onnxruntime", "version": "1.17.0"},
        "system": {"id": "sys-1", "hostname": "host-1"},
        "trace_level": "NO_TRACE",
        "cold_start": {"import_ms": 812.5, "load_ms": 95.25, "first_inference_ms": 12.0, "fetch_ms": 0.5},
        "measurements": measurements,
        **overrides,
    }


RNG = np.random.default_rng(7)
FAST = RNG.gamma(9.0, 0.25, size=600) + 1.0  # about 3.25 ms
SLOW = RNG.gamma(9.0, 0.5, size=200) + 4.0  # about 8.5 ms
TWO_POINTS = evaluation([measurement(4, SLOW, reasons=("too few samples",)), measurement(1, FAST)])


def test_histogram_puts_every_point_on_the_same_bins_as_shares() -> None:
    # Given an evaluation with a valid batch 1 and an invalid batch 4
    # When its latency histogram is built
    chart = latency_histogram(TWO_POINTS)
    # Then one bar series per point, in batch order, the invalid one named so, over the same bins
    assert chart.kind == "latency" and chart.barmode == "overlay"
    assert [s.name for s in chart.series] == [
        "single_stream · batch 1",
        "single_stream · batch 4 (invalid)",
    ]
    first, second = chart.series
    assert first.kind == second.kind == "bar"
    assert list(first.x) == list(second.x) and list(first.width or []) == list(second.width or [])
    assert 10 <= first.points <= HISTOGRAM_MAX_BINS
    # ... the bins cover every latency of both points, edge to edge
    low = first.x[0] - first.width[0] / 2  # type: ignore[index]
    high = first.x[-1] + first.width[-1] / 2  # type: ignore[index]
    assert low == pytest.approx(min(FAST.min(), SLOW.min()), rel=1e-6)
    assert high == pytest.approx(max(FAST.max(), SLOW.max()), rel=1e-6)
    # ... each point's shares add up to 100%, and match a count by hand in one bin
    assert sum(first.y) == pytest.approx(100.0) and sum(second.y) == pytest.approx(100.0)
    busiest = int(np.argmax(first.y))
    lo, hi = first.x[busiest] - first.width[busiest] / 2, first.x[busiest] + first.width[busiest] / 2  # type: ignore[index]
    fast = FAST
    by_hand = np.count_nonzero((fast >= lo - 1e-9) & (fast < hi - 1e-9))
    assert first.y[busiest] == pytest.approx(100.0 * by_hand / len(FAST), abs=100.0 / len(FAST))
    assert first.text is not None and first.text[busiest].endswith(f"of {len(FAST)}")
    # ... and a note counts the invalid point and says why
    assert chart.notes == ("1 of 2 points invalid: single_stream · batch 4 (too few samples)",)


def test_histogram_of_identical_latencies_and_of_no_raw_latencies() -> None:
    # Given a point whose latencies are all the same (a timer's resolution)
    chart = latency_histogram(evaluation([measurement(1, [2.0] * 50)]))
    # Then one bin holds them all
    assert max(chart.series[0].y) == pytest.approx(100.0)
    # Given an evaluation read without its raw latencies, then a clear error, not numpy's
    bare = evaluation([{k: v for k, v in measurement(1, FAST).items() if k != "latencies_ns"}])
    with pytest.raises(UserError, match="has no raw latencies"):
        latency_histogram(bare)
    with pytest.raises(UserError, match="has no raw latencies"):
        latency_cdf(evaluation([], status="failed"))


def test_a_far_straggler_does_not_squeeze_the_histogram_and_the_cdf_reads_it_on_a_log_axis() -> None:
    # Given 999 inferences near 0.04 ms and one 8 ms stall (a real tiny model's run had such a tail)
    rng = np.random.default_rng(3)
    values = np.concatenate([0.04 + 0.002 * rng.standard_normal(999), [8.0]])
    chart = latency_histogram(evaluation([measurement(1, values)]))
    # Then the bins stop at twice the p99, so the bulk spreads over many bins, not the first one
    (series,) = chart.series
    high = series.x[-1] + series.width[-1] / 2  # type: ignore[index]
    assert high == pytest.approx(2 * np.percentile(values, 99), rel=1e-4)  # stored as integer ns
    assert max(series.y) < 50
    # ... the straggler is counted in a note, and the shares drawn leave it out (they sum to 99.9%)
    (note,) = chart.notes
    assert note.startswith("1 of 1,000 latencies above 0.089") and "(the slowest 8 ms)" in note
    assert sum(series.y) == pytest.approx(99.9)
    # ... and the CDF keeps it, on a logarithmic latency axis
    cdf = latency_cdf(evaluation([measurement(1, values)]))
    assert cdf.x_type == "log" and max(cdf.series[0].x) == pytest.approx(8.0)
    # Without such a tail: every latency in the bins, a linear axis, no note
    assert latency_cdf(evaluation([measurement(1, FAST)])).x_type == "linear"
    assert not latency_histogram(evaluation([measurement(1, FAST)])).notes


def test_histogram_says_when_the_latencies_are_a_subsample() -> None:
    point = {**measurement(1, FAST), "latencies_sampled": {"kept": 600, "of": 1800, "every": 3}}
    chart = latency_histogram(evaluation([point]))
    assert chart.notes == (
        "single_stream · batch 1: a subsample of the latencies, 600 of 1,800 (one in every 3)",
    )


def test_cdf_steps_through_every_latency_thinned_for_many() -> None:
    # Given 600 and 5,000 latencies
    many = RNG.gamma(9.0, 0.25, size=5000) + 1.0
    chart = latency_cdf(evaluation([measurement(1, FAST), measurement(8, many)]))
    small, large = chart.series
    # Then the small point is drawn step by step: every latency, up to 100%
    assert small.kind == "step" and small.points == len(FAST)
    assert list(small.x) == pytest.approx(sorted(FAST.tolist()), abs=1e-6)  # ns resolution
    assert small.y[0] == pytest.approx(100 / len(FAST)) and small.y[-1] == pytest.approx(100.0)
    # ... the large one through 1,000 of its steps, the fastest and slowest kept, in order
    assert large.points == 1000
    assert large.x[0] == pytest.approx(many.min()) and large.x[-1] == pytest.approx(many.max())
    assert list(large.x) == sorted(large.x) and large.y[-1] == pytest.approx(100.0)
    # ... and a step's height is the share at or below its latency
    middle = large.points // 2
    assert large.y[middle] == pytest.approx(100.0 * np.mean(many <= large.x[middle]), abs=0.05)


def test_batch_curve_has_percentiles_whiskers_throughput_and_marks_invalid_points() -> None:
    # Given batch sizes 1, 4 (invalid) and 16
    result = evaluation(
        [
            measurement(16, SLOW * 3),
            measurement(1, FAST),
            measurement(4, SLOW, reasons=("unstable: cv 0.4",)),
        ]
    )
    chart = batch_curve(result)
    names = [s.name for s in chart.series]
    # Then p50 (with its invalid point marked), p90, p99 and throughput on the right axis
    assert names == ["p50 latency", "p50 latency (invalid)", "p90 latency", "p99 latency", "throughput"]
    by_name = {s.name: s for s in chart.series}
    p50 = by_name["p50 latency"]
    assert list(p50.x) == [1, 4, 16]
    assert list(p50.y) == pytest.approx([np.median(FAST), np.median(SLOW), np.median(SLOW * 3)])
    assert list(p50.error_low or []) == pytest.approx([0.98 * y for y in p50.y])
    assert list(p50.error_high or []) == pytest.approx([1.03 * y for y in p50.y])
    assert list(by_name["p50 latency (invalid)"].x) == [4]
    assert list(by_name["p50 latency (invalid)"].text or []) == [
        "unstable: cv 0.4"
    ]  # hover: the whole reason
    assert by_name["throughput"].axis == "y2" and by_name["p99 latency"].axis == "y"
    assert chart.x_type == "log" and chart.y2_label == "throughput (samples/s)"
    assert chart.notes == (
        "1 of 3 points invalid: single_stream · batch 4 (unstable)",
        "whiskers: the median's 95% confidence interval",
    )


def test_batch_curve_names_scenarios_when_there_are_several() -> None:
    result = evaluation([measurement(1, FAST), measurement(1, SLOW, scenario="offline")])
    names = [s.name for s in batch_curve(result).series]
    assert "offline p50 latency" in names and "single_stream throughput" in names
    with pytest.raises(UserError, match="no measurements to plot: it is failed"):
        batch_curve(evaluation([], status="failed"))


SEARCH = {
    "search": {
        "max_qps": 183.0,
        "probes": [
            {
                "target_qps": 400.0,
                "achieved_qps": 350.2,
                "p50_ms": None,
                "p99_ms": None,
                "passed": False,
                "reason": "could not issue at 400 qps",
            },
            {"target_qps": 183.0, "achieved_qps": 182.4, "p50_ms": 9.0, "p99_ms": 44.0, "passed": True},
            {"target_qps": 90.0, "achieved_qps": 90.1, "p50_ms": 4.0, "p99_ms": 12.0, "passed": True},
        ],
    }
}


def test_throughput_latency_draws_each_evaluation_and_a_search() -> None:
    # Given one evaluation at two batch sizes (one invalid) and one with a server search
    a = TWO_POINTS
    server = {**measurement(1, FAST, scenario="server"), "load": SEARCH}
    b = evaluation([server], id="b" * 32, framework={"name": "pytorch", "version": "2.3.0"})
    chart = throughput_latency([a, b])
    by_name = {s.name: s for s in chart.series}
    # Then p50 and p99 per evaluation against throughput, ordered by throughput
    a_p50 = by_name["resnet18 · onnxruntime 1.17.0 · host-1 p50"]
    assert list(a_p50.x) == sorted(a_p50.x) and a_p50.points == 2
    assert "resnet18 · onnxruntime 1.17.0 · host-1 p50 (invalid)" in by_name
    # ... the search's probes with latencies, by achieved qps, and a note for the one without
    probes = by_name["resnet18 · pytorch 2.3.0 · host-1 search p99"]
    assert list(probes.x) == [90.1, 182.4] and list(probes.y) == [12.0, 44.0]
    assert any(
        "1 search probe(s) without latencies not drawn (400.0 qps: could not issue" in n for n in chart.notes
    )
    assert chart.notes[0].startswith(
        "1 of 3 points invalid: resnet18 · onnxruntime 1.17.0 · host-1 single_stream"
    )
    with pytest.raises(UserError, match="none of the 1 evaluation"):
        throughput_latency([evaluation([], status="failed")])


def row(framework: str, host: str, batch_size: int, median: float, **overrides: Any) -> dict[str, Any]:
    return {
        "model": "resnet18",
        "framework": framework,
        "framework_version": "1.0",
        "system_id": f"sys-{host}",
        "hostname": host,
        "agent_id": None,
        "device": "cpu",
        "scenario": "single_stream",
        "batch_size": batch_size,
        "median_ms": median,
        "ci_low_ms": median - 0.1,
        "ci_high_ms": median + 0.2,
        "count": 300,
        "valid": True,
        "reasons": [],
        **overrides,
    }


def test_compare_bars_groups_by_framework_and_system_and_marks_invalid_rows() -> None:
    # Given two frameworks on two hosts at batch 1 and 8, one row invalid
    rows = [
        row("onnxruntime", "a", 1, 2.0),
        row("onnxruntime", "a", 8, 9.0),
        row("pytorch", "a", 1, 3.0),
        row("pytorch", "a", 8, 12.0, valid=False, reasons=["thermal throttling"]),
        row("onnxruntime", "b", 1, 2.5),
    ]
    chart = compare_bars(rows)
    by_name = {s.name: s for s in chart.series}
    # Then one series per framework × host, the invalid row in a series of its own
    assert list(by_name) == [
        "onnxruntime · a",
        "pytorch · a",
        "pytorch · a (invalid)",
        "onnxruntime · b",
    ]
    assert list(by_name["onnxruntime · a"].x) == ["resnet18 @ 1", "resnet18 @ 8"]
    assert list(by_name["pytorch · a (invalid)"].y) == [12.0]
    assert list(by_name["pytorch · a (invalid)"].text or []) == [
        "12.000 ms, 300 latencies; invalid: thermal throttling"
    ]
    # ... whiskers at the interval's ends
    assert list(by_name["onnxruntime · a"].error_low or []) == pytest.approx([1.9, 8.9])
    assert list(by_name["onnxruntime · a"].error_high or []) == pytest.approx([2.2, 9.2])
    assert chart.notes[0] == "1 of 5 points invalid: pytorch · a resnet18 @ 8 (thermal throttling)"


def test_compare_bars_names_scenarios_and_versions_only_when_they_differ() -> None:
    rows = [
        row("onnxruntime", "a", 1, 2.0, agent_id="agent-7"),
        row("onnxruntime", "a", 1, 2.2, scenario="offline", framework_version="1.18", agent_id="agent-7"),
    ]
    chart = compare_bars(rows)
    assert [s.name for s in chart.series] == ["onnxruntime 1.0 · agent-7", "onnxruntime 1.18 · agent-7"]
    assert list(chart.series[1].x) == ["resnet18 @ 1 offline"]
    with pytest.raises(UserError, match="nothing to compare: 0 row"):
        compare_bars([])


def test_cold_start_bars_in_the_order_they_happen() -> None:
    chart = cold_start_bars(TWO_POINTS)
    (series,) = chart.series
    assert list(series.x) == ["fetch", "framework import", "model load", "first inference"]
    assert list(series.y) == [0.5, 812.5, 95.25, 12.0]
    assert chart.notes == ()
    warm = evaluation([], cold_start={"import_ms": 1.0, "load_ms": 2.0, "warm_process": True})
    assert "warm process" in cold_start_bars(warm).notes[0]
    with pytest.raises(UserError, match="no cold-start figures"):
        cold_start_bars(evaluation([], cold_start=None))


def span(n: int, name: str, level: str, start_ms: float, end_ms: float, **attributes: Any) -> dict[str, Any]:
    return {
        "trace_id": "t" * 32,
        "span_id": f"{n:016x}",
        "parent_id": None,
        "name": name,
        "level": level,
        "start_ns": T0 + round(start_ms * MS),
        "end_ns": T0 + round(end_ms * MS),
        "attributes": attributes,
    }


def framework_pass() -> list[dict[str, Any]]:
    """Two traced inferences of 10 ms at batch 1: Conv 4 + 2 ms, Relu 1 ms, Gemm 0.5 ms, Add 0.25 ms."""
    spans, n = [], 0
    for i in range(2):
        t = i * 20.0
        spans.append(span(n := n + 1, "inference", "MODEL", t, t + 10, batch_size=1, **{"pass": "FRAMEWORK"}))
        for name, kind, start, end in [
            ("conv1", "Conv", 0, 4),
            ("relu", "Relu", 4, 5),
            ("conv2", "Conv", 5, 7),
            ("fc", "Gemm", 7, 7.5),
            ("add", "Add", 7.5, 7.75),
        ]:
            spans.append(
                span(n := n + 1, name, "FRAMEWORK", t + start, t + end, batch_size=1, layer_type=kind)
            )
    return spans


def test_layer_bars_per_inference_with_the_rest_summed() -> None:
    # Given a FRAMEWORK pass, when its two largest layer types are drawn
    chart = layer_bars(TWO_POINTS, framework_pass(), top=2)
    (series,) = chart.series
    # Then the two largest, the rest summed and the inference time between layers, largest on top
    values = dict(zip(series.y, series.x, strict=True))
    assert list(series.y)[-1] == "Conv" and series.kind == "hbar"
    assert values["Conv"] == pytest.approx(6.0)
    assert values["(between layers)"] == pytest.approx(2.25)
    assert values["(3 others)"] == pytest.approx(1.75)
    assert "Relu" not in values
    assert sum(values.values()) == pytest.approx(10.0)
    assert chart.notes[0] == "the 2 largest of 5 layer types; the other 3 summed"
    assert chart.x_label == "time per traced inference (ms)"
    with pytest.raises(UserError, match=r"no layer spans .* --trace-level framework"):
        layer_bars(TWO_POINTS, [span(1, "predict", "APPLICATION", 0, 5)])


def test_timeline_keeps_the_longest_spans_and_says_so() -> None:
    # Given 50,000 spans on three levels of durations 0.001 .. 50 ms
    spans = [
        span(i, f"op{i}", ("APPLICATION", "MODEL", "LIBRARY")[i % 3], i * 0.01, i * 0.01 + (i + 1) / 1000)
        for i in range(50_000)
    ]
    chart = timeline(spans, max_spans=2000)
    # Then 2,000 bars in all, one series per level in level order, the longest kept
    assert [s.name for s in chart.series] == ["APPLICATION", "MODEL", "LIBRARY"]
    assert sum(s.points for s in chart.series) == 2000
    kept = sorted(d for s in chart.series for d in s.x)
    assert kept[0] == pytest.approx(48.001)  # spans 48,000 .. 49,999 are the longest
    assert chart.notes == ("showing the 2,000 longest of 50,000 spans",)
    # ... each bar starting where its span starts, from the trace's first start
    first = chart.series[0]
    index = int(first.text[0].split(":")[0].removeprefix("op"))  # type: ignore[index]
    assert first.base[0] == pytest.approx(index * 0.01)  # type: ignore[index]
    assert set(first.y) == {"APPLICATION"}
    with pytest.raises(UserError, match="no spans: run with --trace-level framework"):
        timeline([])


# A generate evaluation: one point of 4 requests, one of which failed, under a TTFT bound.
GENERATED = evaluation(
    [
        {
            **measurement(1, FAST),
            "scenario": "generate",
            "generation": {
                "per_request": {
                    "ttft_ms": [20.0, 25.0, None, 30.0],
                    "tpot_ms": [1.0, 1.2, None, 1.1],
                    "e2e_ms": [40.0, 45.0, None, 50.0],
                    "error": [None, None, "HTTP 500", None],
                },
                "slo": {"ttft_ms": 28.0},
                "server_metrics": {
                    "source": "vllm",
                    "interval_s": 0.5,
                    "samples": 3,
                    "failed_samples": 1,
                    "t_s": [0.0, 0.5, 1.0],
                    "series": {
                        "kv_cache_usage": [0.1, 0.4, None],
                        "requests_running": [1.0, 2.0, 2.0],
                        "requests_waiting": [0.0, 1.0, 0.0],
                        "generation_tokens_per_s": [None, 80.0, 90.0],
                    },
                    "client_in_flight": [1, 3, 2],
                },
            },
        }
    ]
)


# A concurrency sweep's points, (median TPOT ms, output tokens/s in all) per concurrency: 4 is beaten by
# 8 on both axes, 16 is not valid.
_SWEPT_FIGURES = {1: (5.0, 200.0), 2: (6.0, 330.0), 4: (10.0, 390.0), 8: (8.0, 800.0), 16: (20.0, 900.0)}


def _swept_point(settings: GenerationSettings, load: LoadSettings) -> dict[str, Any]:
    tpot, tokens = _SWEPT_FIGURES[settings.concurrency]
    valid = settings.concurrency != 16
    return {
        **measurement(1, FAST, scenario="generate", reasons=() if valid else ("unstable",)),
        "generation": {"tpot_ms": {"median": tpot}, "output_tokens_per_s": tokens, "requests": 32},
    }


SWEPT = evaluation(
    [run_sweep(GenerationSettings(), LoadSettings(sweep="concurrency=1,2,4,8,16"), _swept_point)]
)


def test_a_sweeps_chart_joins_its_pareto_front_and_marks_the_others() -> None:
    chart = pareto_chart(SWEPT)
    series = {s.name: s for s in chart.series}
    # x is each point's output tokens/s per user (1000 / median TPOT), y its tokens/s in all
    front = series["Pareto front"]
    assert list(front.x) == [1000 / 20.0, 1000 / 8.0, 1000 / 6.0, 1000 / 5.0]
    assert list(front.y) == [900.0, 800.0, 330.0, 200.0]
    assert list(series["points off the front"].text or []) == ["concurrency=4"]
    assert list(series["points (invalid)"].text or []) == ["concurrency=16"]
    assert "Pareto front: concurrency = 16, 8, 2, 1" in chart.notes
    # The measurement kept is the last point's, not valid since one point is not
    assert SWEPT["measurements"][0]["validity"]["valid"] is False
    with pytest.raises(UserError, match="has no sweep"):
        pareto_chart(GENERATED)


def test_every_chart_kind_becomes_a_plotly_figure() -> None:
    # Given a chart of every kind, then each is JSON-able data and plotly traces named as its series
    charts: list[Chart] = [
        latency_histogram(TWO_POINTS),
        latency_cdf(TWO_POINTS),
        batch_curve(TWO_POINTS),
        throughput_latency([TWO_POINTS]),
        layer_bars(TWO_POINTS, framework_pass()),
        compare_bars([row("onnxruntime", "a", 1, 2.0)]),
        cold_start_bars(TWO_POINTS),
        timeline(framework_pass()),
        request_cdf(GENERATED),
        server_metrics_chart(GENERATED),
        pareto_chart(SWEPT),
    ]
    assert sorted(c.kind for c in charts) == sorted(CHART_KINDS)
    for chart in charts:
        figure = json.loads(json.dumps(to_plotly(chart)))
        assert [trace["name"] for trace in figure["data"]] == [s.name for s in chart.series]
        json.dumps(chart.to_dict())


def test_an_invalid_series_is_drawn_apart_in_plotly_and_the_legend_always_shows() -> None:
    # Given a chart with an invalid bar series and invalid markers
    figure = to_plotly(compare_bars([row("pytorch", "a", 1, 3.0, valid=False, reasons=["unstable"])]))
    curve = to_plotly(batch_curve(TWO_POINTS))
    # Then the bars are hatched, the markers crosses, and a single series still has its legend
    (bars,) = figure["data"]
    assert bars["name"] == "pytorch · a (invalid)" and bars["marker"]["pattern"]["shape"] == "/"
    marks = next(trace for trace in curve["data"] if trace["name"] == "p50 latency (invalid)")
    assert marks["mode"] == "markers" and marks["marker"]["symbol"] == "x"
    assert figure["layout"]["showlegend"] is True


def test_the_chart_run_and_compare_write_beside_their_table() -> None:
    from mlscope.cli.plot import results_chart

    one_size = evaluation([measurement(1, FAST)])
    # One evaluation: its batch curve, or its histogram when it measured one batch size
    assert results_chart([TWO_POINTS]).kind == "batch"
    assert results_chart([one_size]).kind == "latency"
    # Several: their comparison rows when there are any, else latency against throughput
    assert results_chart([TWO_POINTS, one_size], [row("onnxruntime", "a", 1, 2.0)]).kind == "compare"
    assert results_chart([TWO_POINTS, one_size]).kind == "throughput-latency"


def test_a_diff_is_drawn_as_ratios_with_intervals_a_series_per_verdict() -> None:
    from mlscope.analysis.chart_compare import diff_ratios

    def point(batch: int, ratio: float, verdict: str) -> dict[str, Any]:
        return {"scenario": "single_stream", "batch_size": batch, "ratio": ratio,
                "ci": [ratio * 0.98, ratio * 1.02], "verdict": verdict, "superiority": 0.5}  # fmt: skip

    side = {"model": "resnet18", "framework": "onnxruntime", "framework_version": "1.17.0", "hostname": "h"}
    report = {
        "a": side,
        "b": {**side, "framework": "pytorch"},
        "threshold": 0.02,
        "confidence": 0.95,
        "points": [
            point(1, 0.8, "faster"),
            point(8, 1.3, "slower"),
            point(16, 1.0, "no detectable difference"),
        ],
        "refused": [{"scenario": "single_stream", "batch_size": 32, "reason": "A invalid: variable"}],
    }
    chart = diff_ratios(report)
    assert [s.name for s in chart.series] == ["B faster", "B slower", "no detectable difference"]
    assert [list(s.x) for s in chart.series] == [
        ["single_stream · batch 1"],
        ["single_stream · batch 8"],
        ["single_stream · batch 16"],
    ]
    assert list(chart.series[1].error_high or []) == pytest.approx([1.3 * 1.02])
    assert chart.notes[0] == "A: resnet18 · onnxruntime 1.17.0 · h · B: resnet18 · pytorch 1.17.0 · h"
    assert "±2%" in chart.notes[1] and chart.notes[2].startswith(
        "1 point(s) not compared: single_stream · batch 32"
    )
    with pytest.raises(UserError, match="compared no point"):
        diff_ratios({**report, "points": []})


def test_a_generate_evaluation_draws_ttft_and_tpot_per_request() -> None:
    chart = request_cdf(GENERATED)
    # A CDF of each metric over the requests that answered, on a log axis (TTFT is 20x TPOT and more)
    assert [s.name for s in chart.series] == ["TTFT · generate · batch 1", "TPOT · generate · batch 1"]
    assert list(chart.series[0].x) == [20.0, 25.0, 30.0] and list(chart.series[1].y)[-1] == pytest.approx(
        100.0
    )
    assert chart.x_type == "log"
    # ... the failed request and the SLO said in notes
    assert chart.notes == ("generate · batch 1: 1 of 4 failed", "SLO: TTFT ≤ 28 ms")
    # An evaluation of another scenario has no such figures: a clear error
    with pytest.raises(UserError, match="only the generate scenario keeps them"):
        request_cdf(TWO_POINTS)


def test_a_generate_evaluation_draws_its_servers_metrics_against_time() -> None:
    chart = server_metrics_chart(GENERATED)
    # The client's requests in flight and the server's counts on one axis, the KV cache's use in %
    # on the right; token rates are not drawn (another scale)
    assert [(s.name, s.axis) for s in chart.series] == [
        ("in flight (client)", "y"),
        ("running (server)", "y"),
        ("waiting (server)", "y"),
        ("KV cache use (server)", "y2"),
    ]
    assert list(chart.series[0].x) == [0.0, 0.5, 1.0] and list(chart.series[0].y) == [1, 3, 2]
    assert list(chart.series[3].y) == [pytest.approx(10.0), pytest.approx(40.0), None]
    assert chart.notes == ("vllm metrics, 3 samples every 0.5 s, 1 failed",)
    # Without a series (not asked for, or nothing answered): a clear error, no empty chart
    with pytest.raises(UserError, match="--server-metrics URL"):
        server_metrics_chart(TWO_POINTS)
