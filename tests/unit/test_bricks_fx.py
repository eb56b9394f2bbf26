"""PyTorch bricks without the store: torch.fx decomposition, brick keys shared within and across
models, views costed as dispatches, an untraceable model named as such, and one job measuring
module bricks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from mlscope.analysis.bricks import BrickPlan, NotABrick, critical_path  # noqa: E402
from mlscope.analysis.bricks.fx import (  # noqa: E402
    NotTraceable,
    decompose_module,
    module_brick,
    plan_module_bricks,
)
from mlscope.runtime.measure.settings import MeasureSettings  # noqa: E402
from mlscope.runtime.predictors.pytorch.bricks import measure_module_bricks  # noqa: E402
from tests.fixtures import torch_bricks  # noqa: E402

EXECUTION = {"threads": 1, "framework": "pytorch"}


def _plans(module: torch.nn.Module, *shape: int) -> list[BrickPlan | NotABrick]:
    graph = decompose_module(module, (torch.randn(*shape),))
    return plan_module_bricks(graph, execution=EXECUTION)


def _keys(plans: list[BrickPlan | NotABrick]) -> list[str]:
    return [plan.key for plan in plans if isinstance(plan, BrickPlan)]


def test_two_models_sharing_layers_share_their_bricks() -> None:
    # Given two MLPs alike but for their last layer (other random weights)
    first = _keys(_plans(torch_bricks.mlp_first(), 1, 256))
    second = _keys(_plans(torch_bricks.mlp_second(), 1, 256))
    # Then their shared layers are the same bricks, and the last ones differ
    assert first[:-1] == second[:-1] and first[-1] != second[-1]
    # and within a model, the repeated Linear(256, 256) and ReLU are one brick each
    assert len(set(first)) < len(first)


def test_a_conv_layer_is_keyed_by_its_module_and_its_input() -> None:
    # Given a small conv net, decomposed on a batch of one
    plans = _plans(torch_bricks.small_conv(), 1, 3, 16, 16)
    conv = next(p for p in plans if isinstance(p, BrickPlan) and p.layer.op_type == "Conv2d")
    # Then the conv's key document names its class, constructor arguments and input shape
    assert conv.document["module"] == "torch.nn.modules.conv.Conv2d"
    assert "kernel_size=(3, 3)" in conv.document["extra_repr"] and "bias=False" in conv.document["extra_repr"]
    assert conv.document["inputs"][0][0] == [1, 3, 16, 16]
    # and the size and the view are one dispatch each, not bricks
    views = {p.op_type for p in plans if isinstance(p, NotABrick)}
    assert views == {"Tensor.size", "Tensor.view"} and all(
        p.dispatch_only for p in plans if isinstance(p, NotABrick)
    )


def test_the_layer_dag_of_two_towers_has_a_shorter_critical_path() -> None:
    # Given two towers over one input, every layer 1 ms
    graph = decompose_module(torch_bricks.towers(), (torch.randn(1, 256),))
    weights = [1.0] * len(graph.layers)
    # Then the critical path is one tower and the add, shorter than the sum
    assert critical_path(weights, graph.edges()) == pytest.approx((len(weights) - 1) / 2 + 1)


def test_data_dependent_control_flow_is_not_traceable() -> None:
    with pytest.raises(NotTraceable, match=r"torch\.fx cannot trace"):
        decompose_module(torch_bricks.data_dependent(), (torch.randn(1, 256),))


def test_one_job_measures_module_bricks() -> None:
    # Given the unique bricks of the small conv net
    graph = decompose_module(torch_bricks.small_conv(), (torch.randn(1, 3, 16, 16),))
    plans = {p.key: p for p in plan_module_bricks(graph, execution=EXECUTION) if isinstance(p, BrickPlan)}
    specs = [module_brick(plan, graph) for plan in plans.values()]
    settings = MeasureSettings(warmup_count=2, warmup_seconds=0.0, min_count=10, min_seconds=0.0,
                               max_seconds=0.2, stability=0.05, bootstrap_resamples=50)  # fmt: skip
    # When they are measured in one job on one thread
    job = measure_module_bricks(specs, settings, threads=1)
    # Then each has a single_stream measurement with a verdict, and the job names torch's version
    assert [o.name for o in job.outcomes] == [s.name for s in specs]
    for outcome in job.outcomes:
        assert outcome.error is None and outcome.measurement is not None
        assert outcome.measurement["latency_ms"]["count"] >= 10
        assert set(outcome.measurement["validity"]) == {"valid", "reasons"}
    assert job.framework_version == torch.__version__


class _Shuffle(torch.nn.Module):
    """ShuffleNet's channel shuffle: a transpose (a view), then a flatten that must copy."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (
            torch.flatten(x.view(1, 2, 4, 8, 8).transpose(1, 2), 1, 2)
            + torch.flatten(x, 1)[:, :1, None, None]
        )


def test_a_reshape_is_a_dispatch_only_when_it_does_not_copy() -> None:
    # Given a flatten of a transposed tensor (a copy) and one of a contiguous tensor (a view)
    plans = _plans(_Shuffle(), 1, 8, 8, 8)
    flattens = [p for p in plans if (p.layer.op_type if isinstance(p, BrickPlan) else p.op_type) == "flatten"]
    # Then the first is a brick whose input keeps the transposed strides, the second a dispatch
    assert [type(p).__name__ for p in flattens] == ["BrickPlan", "NotABrick"]
    copy = flattens[0]
    assert isinstance(copy, BrickPlan) and copy.document["inputs"][0][1] == [512, 64, 256, 8, 1]
