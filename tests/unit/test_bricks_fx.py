"""PyTorch bricks without the store: torch.fx decomposition, brick keys shared within and across
models, views costed as dispatches, an untraceable model named as such, and one job measuring
module bricks."""

from __future__ import annotations

import pytest
import torch

from mlscope.analysis.bricks import BrickPlan, NotABrick, critical_path
from mlscope.analysis.bricks.fx import (
    NotTraceable,
    decompose_module,
    module_brick,
    plan_module_bricks,
)
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.predictors.pytorch.bricks import measure_module_bricks
from tests.fixtures import torch_bricks

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


def test_a_hugging_face_model_is_traced_by_dynamo_into_bricks() -> None:
    # Given a 2-layer BERT (random weights from a small config), which torch.fx's tracer cannot trace,
    # called by position as the predictor calls it
    import transformers  # noqa: F401 - installed by the project

    module = torch_bricks.tiny_bert()
    tokens = torch.randint(0, torch_bricks.TINY_BERT["vocab_size"], (1, torch_bricks.TINY_BERT_TOKENS))
    # When it is decomposed
    graph = decompose_module(module, (tokens,))
    plans = plan_module_bricks(graph, execution=EXECUTION)
    # Then TorchDynamo traced it, its graph reproduces the model, and every layer is a brick or a
    # dispatch (no fallback)
    assert graph.tracer == "torch._dynamo.export" and len(graph.graph_inputs) == 1
    with torch.inference_mode():
        assert torch.equal(graph.module(tokens), module(tokens))
    assert all(p.zero_cost for p in plans if isinstance(p, NotABrick))
    # and the two encoder layers' linears (6 each, and the pooler's), layer norms, attention and GELU
    # are the same bricks
    keys = {}
    for plan in plans:
        if isinstance(plan, BrickPlan):
            keys.setdefault(plan.layer.op_type, []).append(plan.key)
    assert len(keys["linear"]) == 6 * 2 + 1 and len(set(keys["linear"])) == 4
    attention = keys["scaled_dot_product_attention"]
    assert len(attention) == 2 and len(set(attention)) == 1
    assert len(keys["gelu"]) == 2 and len(set(keys["gelu"])) == 1
    assert len(set(_keys(plans))) < len(_keys(plans)) / 2
    # and dropout in eval mode is a dispatch, not a brick
    assert "dropout" not in keys
    linear = next(p for p in plans if isinstance(p, BrickPlan) and p.layer.op_type == "linear")
    assert [shape for shape, _, _ in linear.document["inputs"]] == [[1, 16, 64], [64, 64], [64]]


def test_a_hugging_face_model_dynamo_cannot_export_says_why() -> None:
    # Given a transformers model with a branch on a tensor's value
    import transformers

    class Branchy(transformers.PreTrainedModel):
        config_class = transformers.PretrainedConfig

        def __init__(self, config: object) -> None:
            super().__init__(config)
            self.linear = torch.nn.Linear(8, 8)
            self.post_init()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x) if x.sum() > 0 else -self.linear(x)

    # Then neither tracer can trace it, and the reason names both
    with pytest.raises(NotTraceable, match=r"torch\.fx cannot trace.*nor can torch\._dynamo\.export"):
        decompose_module(Branchy(transformers.PretrainedConfig()).eval(), (torch.randn(1, 8),))


class _Noisy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand_like(x)


def test_a_graph_that_does_not_reproduce_the_model_is_not_decomposed() -> None:
    with pytest.raises(NotTraceable, match="does not reproduce the model's output"):
        decompose_module(_Noisy(), (torch.randn(1, 8),))


class _WholeTuple(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat(x.chunk(2, dim=1), dim=0)


def test_a_layer_that_cannot_be_measured_alone_is_named() -> None:
    # Given a cat of a tuple of tensors made by one node (passed whole)
    plans = _plans(_WholeTuple(), 1, 8)
    # Then the cat is not a brick, and not free: the model falls back naming that layer
    (cat,) = [p for p in plans if isinstance(p, NotABrick) and not p.zero_cost]
    assert cat.layer == "cat" and "not measured alone" in cat.reason
