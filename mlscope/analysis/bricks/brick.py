"""Bricks (DLBricks, arXiv 1911.07967): a layer of the optimised graph as a tiny model of its own,
keyed by what its cost depends on, so that a layer met again (in the same model or another) is
measured once.

A brick's key is the SHA-256 of a canonical JSON document: op type, domain, attributes, and per input
its kind, dtype and shape; integer inputs (Reshape shapes, Gather indices, Slice starts) also by their
VALUES, since those change what the op does and costs. Float initializers count by shape only: the
brick model gets random ones, seeded by the key.

A brick model is one node. Its float activations whose first axis is the brick's batch axis are graph
inputs (fed by the predictor, so the op reads them as in the model, not as prepacked constants);
integer activations become constants holding the values they had in the model; a float activation of
another leading size becomes a random constant (`BrickPlan.notes` says so). A layer that cannot be a
brick (control flow, a constant, an integer input too large to embed) is reported with the reason.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlscope.analysis.bricks.graph import CONTROL_FLOW, SMALL, Layer, LayerGraph

__all__ = [
    "BRICK_PREFIX",
    "VIEW_OPS",
    "BrickPlan",
    "NotABrick",
    "brick_model",
    "brick_name",
    "identity_plan",
    "plan_brick",
    "plan_bricks",
]

BRICK_PREFIX = "brick-"
# Ops whose output ONNX Runtime's CPU kernels declare an alias of their data input: in a model the
# allocation planner gives the output the input's buffer and the kernel copies nothing (measured here:
# 40 Reshapes of a 64 KB tensor added 0.2 µs each to a model, one dispatch), so the layer costs one
# node dispatch. A brick cannot show that: its output is a graph output of its own, so it copies (about
# 2-7 µs a Reshape of ShuffleNet x0.5's). These are costed as dispatches, like shape arithmetic.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
# The one graph input of a brick whose inputs are all constants: nothing reads it.
_FEED = "brick_feed"


@dataclass(frozen=True)
class NotABrick:
    """A layer that is not measured as a brick. zero_cost: it does not make the model undecomposable:
    a constant ORT folds at load (costs nothing), or shape arithmetic on tiny tensors (dispatch_only:
    costs one node dispatch, calibrated once rather than measured as hundreds of bricks)."""

    layer: str
    op_type: str
    reason: str
    zero_cost: bool = False
    dispatch_only: bool = False


@dataclass
class BrickPlan:
    """A layer as a brick: its key and canonical document, the batch size its graph inputs share, and
    the layer (to build its model from)."""

    key: str
    document: dict[str, Any]
    batch_size: int
    layer: Layer
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return brick_name(self.key)


def brick_name(key: str) -> str:
    """The model name a brick's results are stored under."""
    return f"{BRICK_PREFIX}{key[:16]}"


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def _attribute(attribute: Any) -> Any:
    from onnx import helper, numpy_helper

    value = helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list):
        return [item.decode(errors="replace") if isinstance(item, bytes) else item for item in value]
    if hasattr(value, "dims"):  # a TensorProto
        array = numpy_helper.to_array(value)
        return {"dtype": str(array.dtype), "shape": list(array.shape), "sha256": _digest(array)}
    if isinstance(value, float):
        return round(value, 9)
    return value


def _unbrickable(layer: Layer) -> str | None:
    if layer.op_type in CONTROL_FLOW or any(attribute.g.node for attribute in layer.node.attribute):
        return f"control flow ({layer.op_type}): its cost depends on data and on its subgraphs"
    return None


def _input_document(fact: Any, graph: LayerGraph, batch: int | None) -> tuple[dict[str, Any], str]:
    """The key document of one input, and how the brick model supplies it ("feed", "value", "random",
    "absent")."""
    if fact.kind == "absent":
        return {"kind": "absent"}, "absent"
    kind = np.dtype(fact.dtype).kind if fact.dtype else "?"
    entry: dict[str, Any] = {"kind": fact.kind, "dtype": fact.dtype, "shape": list(fact.shape)}
    if kind in "iub" or (len(fact.shape) < 2 and fact.name in graph.values):
        array = graph.values.get(fact.name)
        if array is None and fact.name in graph.initializers:
            from onnx import numpy_helper

            array = numpy_helper.to_array(graph.initializers[fact.name])
        if array is None:
            raise ValueError(f"integer input {fact.name!r} ({fact.shape}) is too large to embed its values")
        entry["values"] = _digest(array) if array.size > 64 else array.ravel().tolist()
        return entry, "value"
    if fact.kind == "activation" and batch is not None and len(fact.shape) >= 2 and fact.shape[0] == batch:
        return entry, "feed"
    return entry, "random"


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape)) if shape else 1


def _shape_arithmetic(layer: Layer, graph: LayerGraph) -> bool:
    """Whether the layer only computes on tiny tensors (Shape, Gather of a dimension, Concat of
    sizes, ...): its cost is ORT's per-node dispatch, whatever its inputs."""
    if any(output and output not in graph.facts for output in layer.outputs):
        return False
    facts = [graph.facts[output] for output in layer.outputs if output]
    if not facts or any(_size(shape) > SMALL for _, shape in facts):
        return False
    # Shapes and sizes are integers, or float scalars and vectors (TF-style padding arithmetic): a
    # float output with a batch axis is data, however small.
    if not all(np.dtype(dtype).kind in "iub" or len(shape) < 2 for dtype, shape in facts if dtype):
        return False
    return all(
        fact.kind != "activation"
        or (fact.dtype != "" and _size(fact.shape) <= SMALL)
        or layer.op_type == "Shape"
        for fact in layer.inputs
    )


def _batch(layer: Layer) -> int | None:
    for fact in layer.inputs:
        if (
            fact.kind == "activation"
            and fact.dtype
            and np.dtype(fact.dtype).kind == "f"
            and len(fact.shape) >= 2
        ):
            return fact.shape[0]
    return None


def plan_brick(layer: Layer, graph: LayerGraph, *, execution: dict[str, Any]) -> BrickPlan | NotABrick:
    """The brick of `layer`, or why it is none.

    Args:
        execution: what else the measurement depends on (threads, optimisation level), part of the key.
    """
    reason = _unbrickable(layer)
    if reason:
        return NotABrick(layer.name, layer.op_type, reason)
    if not any(fact.kind == "activation" for fact in layer.inputs):
        return NotABrick(layer.name, layer.op_type, "constant: every input is an initializer", zero_cost=True)
    if layer.op_type in VIEW_OPS and layer.domain in ("", "ai.onnx"):
        return NotABrick(
            layer.name,
            layer.op_type,
            "a view of its input (ORT aliases the output, copying nothing): one node dispatch",
            zero_cost=True,
            dispatch_only=True,
        )
    if _shape_arithmetic(layer, graph):
        return NotABrick(
            layer.name,
            layer.op_type,
            "shape arithmetic on tiny tensors: one node dispatch",
            zero_cost=True,
            dispatch_only=True,
        )
    batch = _batch(layer)
    inputs, notes = [], []
    try:
        for fact in layer.inputs:
            entry, how = _input_document(fact, graph, batch)
            inputs.append(entry)
            if how == "random" and fact.kind == "activation":
                notes.append(f"activation {fact.name} {list(fact.shape)} is a random constant in the brick")
    except ValueError as exc:
        return NotABrick(layer.name, layer.op_type, str(exc))
    document = {
        "op_type": layer.op_type,
        "domain": layer.domain,
        "opset": graph.opsets.get(layer.domain, graph.opsets.get("ai.onnx", 0)),
        "attributes": {attribute.name: _attribute(attribute) for attribute in layer.node.attribute},
        "inputs": inputs,
        "outputs": len(layer.outputs),
        "execution": execution,
    }
    return BrickPlan(brick_key(document), document, batch or 1, layer, notes)


def brick_key(document: dict[str, Any]) -> str:
    """A brick's key: the SHA-256 of its document as canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def plan_bricks(graph: LayerGraph, *, execution: dict[str, Any]) -> list[BrickPlan | NotABrick]:
    """A plan per layer, in the graph's order."""
    return [plan_brick(layer, graph, execution=execution) for layer in graph.layers]


def brick_model(plan: BrickPlan, graph: LayerGraph) -> Any:
    """The one-node ONNX model (a ModelProto) of `plan`: fed inputs as graph inputs, integer inputs as
    constants with their values, float initializers (and activations of another leading size) as
    random constants seeded by the key."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(int(plan.key[:15], 16))
    layer = plan.layer
    graph_inputs, constants, names = [], [], []
    for position, fact in enumerate(layer.inputs):
        if fact.kind == "absent":
            names.append("")
            continue
        name = f"in{position}"
        names.append(name)
        _, how = _input_document(fact, graph, plan.batch_size)
        dtype = np.dtype(fact.dtype)
        if how == "feed":
            element = helper.np_dtype_to_tensor_dtype(dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, element, list(fact.shape)))
        elif how == "value":
            array = graph.values.get(fact.name)
            if array is None:
                array = numpy_helper.to_array(graph.initializers[fact.name])
            constants.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), name))
        else:
            array = rng.standard_normal(size=fact.shape, dtype=np.float32).astype(dtype) * 0.1
            constants.append(numpy_helper.from_array(array, name))
    if not graph_inputs:
        graph_inputs.append(helper.make_tensor_value_info(_FEED, 1, [plan.batch_size, 1]))
    outputs = []
    for position, output in enumerate(layer.outputs):
        name = f"out{position}" if output else ""
        if output and output in graph.facts:
            dtype_name, shape = graph.facts[output]
            element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype_name))
            outputs.append(helper.make_tensor_value_info(name, element, list(shape)))
    node = helper.make_node(
        layer.op_type,
        names,
        [f"out{position}" if output else "" for position, output in enumerate(layer.outputs)],
        name=plan.name,
        domain=layer.domain or None,
    )
    node.attribute.extend(layer.node.attribute)
    body = helper.make_graph([node], plan.name, graph_inputs, outputs, initializer=constants)
    opsets = [helper.make_opsetid(domain, version) for domain, version in graph.opsets.items()]
    model = helper.make_model(body, opset_imports=opsets, producer_name="mlscope-bricks")
    model.ir_version = graph.ir_version
    return model


# The calibration chain's length: its per-node cost, over one Identity's, is a node's dispatch.
DISPATCH_CHAIN = 33


def identity_plan(execution: dict[str, Any], opset: int = 17, chain: int = 1) -> tuple[str, Any]:
    """A calibration brick on a float32[1, 1]. chain 1: one Identity, whose latency is one session
    run's cost and nothing else; chain n: n Adds one after another, whose difference with the one
    Identity is what n - 1 more nodes cost to dispatch (a kernel call on a tiny tensor: what shape
    arithmetic costs). Returns its key and model."""
    from onnx import helper

    document = {
        "op_type": "Identity" if chain == 1 else "Add",
        "calibration": True,
        "chain": chain,
        "execution": execution,
    }
    key = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
    names = ["x", *(f"t{index}" for index in range(1, chain)), "y"]
    body = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])]
        if chain == 1
        else [helper.make_node("Add", [a, a], [b]) for a, b in itertools.pairwise(names)],
        brick_name(key),
        [helper.make_tensor_value_info("x", 1, [1, 1])],
        [helper.make_tensor_value_info("y", 1, [1, 1])],
    )
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return key, model
