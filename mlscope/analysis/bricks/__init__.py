"""Bricks and bounds: a model's ONNX Runtime graph cut into layers measured one by one (DLBricks), its
latency composed from theirs, and its lower bounds from them (Benanza). Pure graph work and
arithmetic: measuring the bricks is `mlscope.workers.bricks`'s.

    graph.py    the graph ORT runs (optimised offline), every value's shape, the layer DAG
    brick.py    a layer as a brick: its key and its one-node model
    compose.py  estimate, interval, sequential and critical-path bounds
    interval.py the estimate's prediction interval: its bricks' noise and this system's past errors
"""

from mlscope.analysis.bricks.brick import (
    BRICK_PREFIX,
    DISPATCH_CHAIN,
    BrickPlan,
    NotABrick,
    brick_model,
    brick_name,
    identity_plan,
    plan_brick,
    plan_bricks,
)
from mlscope.analysis.bricks.compose import BrickTime, Composition, compose, critical_path
from mlscope.analysis.bricks.graph import CONTROL_FLOW, Layer, LayerGraph, TensorFact, decompose, optimise

__all__ = [
    "BRICK_PREFIX",
    "CONTROL_FLOW",
    "DISPATCH_CHAIN",
    "BrickPlan",
    "BrickTime",
    "Composition",
    "Layer",
    "LayerGraph",
    "NotABrick",
    "TensorFact",
    "brick_model",
    "brick_name",
    "compose",
    "critical_path",
    "decompose",
    "identity_plan",
    "optimise",
    "plan_brick",
    "plan_bricks",
]
