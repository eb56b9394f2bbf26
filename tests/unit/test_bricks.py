"""Bricks and bounds without measuring: decomposition of small ONNX graphs, brick keys and their
deduplication, brick models that ONNX Runtime runs, the composition and the critical path."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnxruntime  # noqa: F401 - installed by the project: a missing install fails, never skips
import pytest

from mlscope.analysis.bricks import (
    BrickPlan,
    BrickTime,
    NotABrick,
    brick_model,
    compose,
    critical_path,
    decompose,
    plan_bricks,
)
from mlscope.cli import main
from mlscope.runtime.bricks import BrickSpec, measure_bricks
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.services.bricks.pipeline import summary
from tests.fixtures.brick_graphs import branchy, flattening, mlp, reshaping, slicing, with_control_flow

EXECUTION = {"threads": 1, "level": "all", "framework": "onnxruntime"}


def _plans(path: Path, tmp_path: Path, width: int) -> list[BrickPlan | NotABrick]:
    feeds = {"x": np.ones((1, width) if "flat" not in path.stem else (1, width, 4, 4), np.float32)}
    graph = decompose(path, feeds, tmp_path / f"work-{path.stem}")
    return plan_bricks(graph, execution=EXECUTION)


def _keys(plans: list[BrickPlan | NotABrick]) -> list[str]:
    return [plan.key for plan in plans if isinstance(plan, BrickPlan)]


def test_two_models_sharing_a_layer_share_its_brick(tmp_path: Path) -> None:
    # Given two MLPs whose first layer has the same shapes (64 -> 32) but other weights, and whose
    # second layers differ (32 -> 16 and 32 -> 8)
    first = _plans(mlp(tmp_path / "a.onnx", [64, 32, 16], seed=1), tmp_path, 64)
    second = _plans(mlp(tmp_path / "b.onnx", [64, 32, 8], seed=2), tmp_path, 64)
    # When their bricks are keyed
    keys_a, keys_b = _keys(first), _keys(second)
    # Then the first layer is one brick for both (so measured once), and the second layers differ
    shared = set(keys_a) & set(keys_b)
    assert keys_a[0] == keys_b[0] and keys_a[0] in shared
    assert set(keys_a) != set(keys_b)
    # and ORT's fusions are what was decomposed: MatMul+Add became one op (no separate Add layer)
    ops = [plan.layer.op_type for plan in first if isinstance(plan, BrickPlan)]
    assert "Add" not in ops and len(ops) < 7


def test_layers_repeated_within_a_model_are_one_brick(tmp_path: Path) -> None:
    # Given an MLP of four identical 32 -> 32 layers
    plans = _plans(mlp(tmp_path / "deep.onnx", [32, 32, 32, 32, 32]), tmp_path, 32)
    keys = _keys(plans)
    # Then its layers are fewer unique bricks than layers
    assert len(set(keys)) < len(keys)


def test_integer_input_values_are_part_of_the_key(tmp_path: Path) -> None:
    # Given two Slices of the same input to different ends (an int64 initializer each)
    first = _plans(slicing(tmp_path / "s1.onnx", 16), tmp_path, 64)
    second = _plans(slicing(tmp_path / "s2.onnx", 32), tmp_path, 64)
    # Then they are different bricks, and the brick keeps the real values
    slices = [p for p in first if isinstance(p, BrickPlan) and p.layer.op_type == "Slice"]
    assert slices and set(_keys(first)) != set(_keys(second))
    assert [16] in [entry.get("values") for entry in slices[0].document["inputs"]]


def test_a_view_costs_one_dispatch_not_a_brick(tmp_path: Path) -> None:
    # Given a Reshape (ONNX Runtime aliases its output to its input: it copies nothing in a model)
    plans = _plans(reshaping(tmp_path / "r.onnx", [8, 8]), tmp_path, 64)
    # Then it is costed as one node dispatch, not measured as a brick (whose output would be a copy)
    assert [(type(p).__name__, p.op_type) for p in plans if isinstance(p, NotABrick)] == [
        ("NotABrick", "Reshape")
    ]
    view = plans[0]
    assert isinstance(view, NotABrick) and view.dispatch_only and "view" in view.reason
    assert not _keys(plans)


def test_a_brick_model_runs_on_onnx_runtime(tmp_path: Path) -> None:
    import onnxruntime as ort

    # Given the bricks of an MLP
    feeds = {"x": np.ones((1, 64), np.float32)}
    graph = decompose(mlp(tmp_path / "m.onnx", [64, 32, 16]), feeds, tmp_path / "work")
    for plan in plan_bricks(graph, execution=EXECUTION):
        assert isinstance(plan, BrickPlan)
        # When its one-node model runs
        session = ort.InferenceSession(brick_model(plan, graph).SerializeToString(),
                                       providers=["CPUExecutionProvider"])  # fmt: skip
        inputs = {i.name: np.zeros(i.shape, np.float32) for i in session.get_inputs()}
        outputs = session.run(None, inputs)
        # Then it makes the output the layer made in the model
        expected = graph.facts[plan.layer.outputs[0]][1]
        assert tuple(outputs[0].shape) == expected


def test_control_flow_is_named_as_not_a_brick(tmp_path: Path) -> None:
    # Given a graph with an If
    plans = _plans(with_control_flow(tmp_path / "if.onnx"), tmp_path, 8)
    # Then its If layer is not a brick, for a reason that says so, and it is not "zero cost"
    blocking = [p for p in plans if isinstance(p, NotABrick) and not p.zero_cost]
    assert [p.op_type for p in blocking] == ["If"]
    assert "control flow" in blocking[0].reason


def test_shape_arithmetic_of_a_dynamic_batch_is_dispatch_only_not_bricks(tmp_path: Path) -> None:
    # Given a graph that flattens with a shape computed at run time (its batch axis is dynamic)
    plans = _plans(flattening(tmp_path / "flat.onnx"), tmp_path, 8)
    by_op = {plan.layer.op_type if isinstance(plan, BrickPlan) else plan.op_type: plan for plan in plans}
    # Then the shape computation is costed as node dispatches, not measured as bricks, and does not
    # block the estimate; so is the Reshape (a view); the Relu (data) is a brick
    shape_ops = [p for p in plans if isinstance(p, NotABrick)]
    assert shape_ops and all(p.zero_cost and p.dispatch_only for p in shape_ops)
    assert isinstance(by_op["Relu"], BrickPlan)
    assert not any(
        isinstance(p, BrickPlan) and p.layer.op_type in ("Shape", "Gather", "Concat") for p in plans
    )


def test_the_critical_path_of_a_diamond_is_its_heavier_branch() -> None:
    # Given a diamond 0 -> (1, 2) -> 3 whose branches take 2 and 5 ms, the ends 1 ms each
    weights, edges = [1.0, 2.0, 5.0, 1.0], [(0, 1), (0, 2), (1, 3), (2, 3)]
    # Then the critical path is 7 ms, the sequential sum 9 ms
    assert critical_path(weights, edges) == pytest.approx(7.0)
    assert sum(weights) == pytest.approx(9.0)


def test_the_layer_dag_of_parallel_branches_has_a_shorter_critical_path(tmp_path: Path) -> None:
    # Given x -> (MatMul, Sigmoid | MatMul, Tanh) -> Mul, decomposed
    feeds = {"x": np.ones((1, 32), np.float32)}
    graph = decompose(branchy(tmp_path / "d.onnx"), feeds, tmp_path / "work")
    # When every layer takes 1 ms
    weights = [1.0] * len(graph.layers)
    # Then the path through the DAG is shorter than the sum: the branches are found parallel
    assert critical_path(weights, graph.edges()) < sum(weights)


def test_critical_path_refuses_a_cycle() -> None:
    with pytest.raises(ValueError, match="cycle"):
        critical_path([1.0, 1.0], [(0, 1), (1, 0)])


def test_the_composition_subtracts_the_call_cost_per_brick_run_and_pays_it_once() -> None:
    # Given three layers: brick a twice, brick b once, a zero-cost layer; each run costs 0.1 ms
    times = {"a": BrickTime(1.1, (1.0, 1.2)), "b": BrickTime(2.1, (2.1, 2.1))}
    call = BrickTime(0.1, (0.1, 0.1))
    # When composed over a chain
    result = compose(["a", "b", "a", None], times, [(0, 1), (1, 2), (2, 3)], call)
    # Then the estimate is the layers' own times plus one call, and the bounds are the layers' sum
    assert result.sequential_ms == pytest.approx(1.0 + 2.0 + 1.0)
    assert result.estimate_ms == pytest.approx(4.1)
    assert result.critical_path_ms == pytest.approx(4.0)
    # and the interval widens with brick a's uncertainty counted twice (the same measurement)
    low, high = result.estimate_ci
    half = 1.96 * 2 * (0.2 / (2 * 1.96))
    assert low == pytest.approx(4.1 - half, rel=1e-3) and high == pytest.approx(4.1 + half, rel=1e-3)


def test_a_layer_keeps_its_own_dispatch_when_the_run_cost_is_subtracted() -> None:
    # Given a run cost of 0.1 ms measured with one Identity node in it, whose dispatch is 0.02 ms
    times = {"a": BrickTime(1.1, (1.1, 1.1))}
    call = BrickTime(0.1, (0.1, 0.1))
    # When a chain of the brick twice and a shape-arithmetic layer (one dispatch) is composed
    result = compose(["a", "a", 0.02], times, [(0, 1), (1, 2)], call, dispatch_ms=0.02)
    # Then each layer is its brick less the bare run (0.08 ms), and the model pays the bare run once
    assert result.layer_ms == pytest.approx([1.02, 1.02, 0.02])
    assert result.estimate_ms == pytest.approx(2.06 + 0.08)


def test_the_bounds_are_built_from_the_least_a_brick_costs_and_the_estimate_from_the_medians() -> None:
    # Given brick a (median 1.1, least 0.9 ms), brick b with no least recorded (median 2.1), and a
    # run cost of median 0.2, fastest 0.15 ms, of which one dispatch is 0.05 ms
    times = {"a": BrickTime(1.1, (1.1, 1.1), min_ms=0.9), "b": BrickTime(2.1, (2.1, 2.1))}
    call = BrickTime(0.2, (0.2, 0.2), min_ms=0.15)
    # When composed over a diamond: a, then a and b side by side, then a fixed-cost layer
    result = compose(["a", "a", "b", 0.05], times, [(0, 1), (0, 2), (1, 3), (2, 3)], call, dispatch_ms=0.05)
    # Then the estimate subtracts the bare run's median (0.15) from each brick's median
    assert result.layer_ms == pytest.approx([0.95, 0.95, 1.95, 0.05])
    assert result.estimate_ms == pytest.approx(0.95 + 0.95 + 1.95 + 0.05 + 0.15)
    # and the bounds subtract the bare run's least (0.10) from each brick's least, brick b falling
    # back to its median
    assert result.bound_layer_ms == pytest.approx([0.8, 0.8, 2.0, 0.05])
    assert result.sequential_ms == pytest.approx(0.8 + 0.8 + 2.0 + 0.05)
    assert result.critical_path_ms == pytest.approx(0.8 + 2.0 + 0.05)


def test_a_brick_job_records_each_bricks_fastest_hot_run_apart_from_its_statistics() -> None:
    # Given a brick whose runs take 5 or 7 ms after a flush and 1 ms when nothing was flushed
    from mlscope.runtime.bricks import HOT_MIN_RUNS, HOT_RUNS, HOT_SHARE, run_job
    from mlscope.runtime.measure.settings import MeasureSettings

    class Timed:
        def __init__(self, spec: object) -> None:
            self.spec, self.load_ms, self.first_ms = spec, 1.0, 1.0
            self.latencies: list[int] = []
            self.own_ns = self.warmups = 0
            self.hot = 0

        def run(self, clock: object, evict: object = None) -> int:
            self.hot += evict is None
            self.flushed = getattr(self, "flushed", 0) + (evict is not None)
            latency = (5_000_000 + 2_000_000 * (self.flushed % 2)) if evict is not None else 1_000_000
            self.own_ns += latency
            return latency

    spec = type("Spec", (), {"name": "b", "batch_size": 1})()
    opened: list[Timed] = []

    def open_brick(s: object) -> Timed:
        opened.append(Timed(s))
        return opened[-1]

    settings = MeasureSettings.from_dict(
        {"warmup_count": 1, "min_count": 5, "min_seconds": 0.0, "max_seconds": 1}
    )
    # When the job measures it, until it is stable, and again until its time is up (runs of 5 and 7 ms
    # in turn: never stable to ±0.01%)
    for stability, reason in ((0.5, "stable"), (0.0001, "max_seconds")):
        opened.clear()
        settings = MeasureSettings.from_dict(
            {
                "warmup_count": 1,
                "min_count": 5,
                "min_seconds": 0.0,
                "max_seconds": 0.1,
                "stability": stability,
            }
        )
        (outcome,) = run_job([spec], open_brick, settings, "x", {}).outcomes
        # Then its statistics are of its flushed runs, and its fastest hot run is recorded beside them
        assert outcome.measurement is not None
        assert outcome.measurement["stop_reason"] == reason
        assert outcome.measurement["latency_ms"]["min"] == pytest.approx(5.0)
        assert outcome.measurement["hot_min_ms"] == pytest.approx(1.0)
        # (as many hot runs, 1 ms each, as a quarter of its timed runs' time allows, within bounds; the
        # job's time spent on the brick, duration_s, counts them too)
        timed_ms = outcome.measurement["duration_s"] * 1000 - opened[0].hot
        assert opened[0].hot == min(HOT_RUNS, max(HOT_MIN_RUNS, math.ceil(HOT_SHARE * timed_ms)))


def test_an_unknown_framework_exits_2_naming_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # When bricks are asked of a framework neither ONNX Runtime nor PyTorch
    with pytest.raises(SystemExit) as ended:
        main(["bricks", str(tmp_path / "x.onnx"), "--framework", "tensorflow"])
    # Then it is a user's mistake, and the message names the framework and what is supported
    assert ended.value.code == 2
    message = capsys.readouterr().err
    assert "'tensorflow'" in message and "only onnxruntime and pytorch" in message


def _reports(*seconds: tuple[float, float]) -> list[dict[str, object]]:
    return [{"seconds": {"bricks": b, "whole": w}, "error_pct": None} for b, w in seconds]


def test_the_summary_says_how_the_time_ratio_grows_with_the_models() -> None:
    # Given three models: the first needed every brick, the next two reused most of them
    reports = _reports((4.0, 2.0), (0.5, 3.0), (0.5, 3.0))
    # When summarised
    total = summary(reports)
    # Then the ratio is given after each model, cumulatively, in the order measured
    assert [step["models"] for step in total["cumulative"]] == [1, 2, 3]
    assert [step["ratio"] for step in total["cumulative"]] == pytest.approx([0.5, 5 / 4.5, 8 / 5])
    assert total["time_ratio_whole_to_bricks"] == pytest.approx(8 / 5)


def test_one_job_measures_many_bricks_on_onnx_runtime(tmp_path: Path) -> None:
    # Given the bricks of an MLP, and one model ONNX Runtime cannot load
    feeds = {"x": np.ones((1, 64), np.float32)}
    graph = decompose(mlp(tmp_path / "job.onnx", [64, 32, 16]), feeds, tmp_path / "work")
    plans = [plan for plan in plan_bricks(graph, execution=EXECUTION) if isinstance(plan, BrickPlan)]
    specs = [BrickSpec(plan.name, brick_model(plan, graph).SerializeToString()) for plan in plans]
    specs.append(BrickSpec("broken", b"not an onnx model"))
    settings = MeasureSettings(warmup_count=2, warmup_seconds=0.0, min_count=10, min_seconds=0.0,
                               max_seconds=0.5, stability=0.05, bootstrap_resamples=50)  # fmt: skip
    # When they are measured in one job
    job = measure_bricks(specs, settings, threads=1)
    # Then every loadable brick has a single_stream measurement of at least min_count runs with a
    # verdict, and the broken one its error, in the specs' order
    assert [outcome.name for outcome in job.outcomes] == [spec.name for spec in specs]
    measured, broken = job.outcomes[:-1], job.outcomes[-1]
    assert len(measured) == len(plans) >= 2
    assert all(o.measurement and o.measurement["latency_ms"]["count"] >= 10 for o in measured)
    for outcome in measured:
        assert outcome.error is None and outcome.measurement is not None
        assert (
            outcome.measurement["scenario"] == "single_stream"
            and outcome.measurement["latency_ms"]["median"] > 0
        )
        assert outcome.measurement["stop_reason"] in ("stable", "max_seconds")
        assert set(outcome.measurement["validity"]) == {"valid", "reasons"}
        assert outcome.cold_start["load_ms"] > 0
    assert broken.measurement is None and broken.error is not None and broken.error["phase"] == "load"
    assert job.framework_version and job.seconds["sessions"] > 0
