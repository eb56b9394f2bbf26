"""A PyTorch model as layers and bricks: traced with torch.fx (symbolic tracing), run once on one
batch with shape propagation (ShapeProp) to learn every node's input and output shapes, strides and
dtypes, and every non-tensor value (sizes computed at run time).

A Hugging Face model (a module holding a `transformers.PreTrainedModel`) that torch.fx's symbolic
tracing cannot trace (its control flow reads sizes and configuration: "Proxy object cannot be
iterated") is traced by TorchDynamo instead (`torch._dynamo.export`), on the batch itself: Python's
control flow runs with the batch's concrete shapes and the model's configuration, and the graph is
specialised to them (one batch size, one sequence length), as the bricks are. Its modules are inlined,
so its layers are functions (linear, layer_norm, conv2d, scaled_dot_product_attention, ...) whose
weights are inputs of the brick. transformers' own tracer (`transformers.utils.fx`) is gone from
transformers 5. Either way, the traced graph's output on the batch must equal the module's own.

A layer is a call_module node (a leaf module: Conv2d, BatchNorm2d, Linear, ...), a call_function node
(torch.add, F.relu, operator.add, torch.cat, ...) or a call_method node (x.mean(...)). Its brick key is
the SHA-256 of: the module's class, its extra_repr() (Conv2d's channels, kernel, stride, padding,
dilation, groups, bias) and its parameters' and buffers' shapes; or the function's qualified name or
the method's; then every non-tensor argument by value and every tensor argument by shape, stride and
dtype; and what the measurement depends on (threads, framework; the torch version is the stored
result's). Views and shape arithmetic (getattr, size, getitem, view, permute, a reshape or
Flatten of a contiguous tensor, Identity, Dropout in eval, anything whose output is not a tensor) cost one
dispatch each and are not measured.

torch is imported with this module: import it only where PyTorch runs.
"""

from __future__ import annotations

import builtins
import copy
import hashlib
import json
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx import GraphModule, Node, symbolic_trace
from torch.fx.passes.shape_prop import ShapeProp
from torch.utils import _pytree as pytree

from mlscope.analysis.bricks.brick import BrickPlan, NotABrick, brick_key, brick_name
from mlscope.analysis.bricks.graph import Layer, LayerGraph, TensorFact
from mlscope.contract.errors import MlscopeError
from mlscope.runtime.predictors.pytorch.bricks import ModuleBrickSpec, TensorMeta

__all__ = [
    "CONVOLUTIONS",
    "ModuleGraph",
    "NotTraceable",
    "calibration_bricks",
    "cudnn_benchmark_plan",
    "decompose_module",
    "is_convolution",
    "module_brick",
    "plan_module_bricks",
]

_VIEW_METHODS = frozenset(
    {"size", "dim", "view", "view_as", "permute", "transpose", "unsqueeze", "squeeze", "expand",
     "expand_as", "t", "chunk", "split", "unbind", "narrow", "select", "detach", "type_as"}
)  # fmt: skip
_VIEW_FUNCTIONS = frozenset(
    {builtins.getattr, operator.getitem, torch.permute, torch.transpose, torch.unsqueeze, torch.squeeze,
     torch.chunk, torch.split, torch.unbind, torch.narrow, torch.select}
)  # fmt: skip
# A reshape or flatten of a contiguous tensor is a view; of another, a copy (measured).
# (`contiguous` of a contiguous tensor returns it.)
_RESHAPES = frozenset({"reshape", "flatten", "contiguous", torch.reshape, torch.flatten})
_VIEW_MODULES = (torch.nn.Identity, torch.nn.Dropout, torch.nn.Dropout2d)
_DROPOUTS = frozenset({torch.nn.functional.dropout, torch.nn.functional.dropout2d, torch.dropout})


@dataclass
class ModuleGraph(LayerGraph):
    """A traced module's layers (LayerGraph: their order and DAG), with what its bricks are built from:
    the traced module and what each node made in the shape run (tensors as TensorMeta). The ONNX
    fields (facts, values, initializers, opsets) are empty."""

    module: Any = None  # the torch.fx GraphModule
    made: dict[str, Any] = field(default_factory=dict)
    tracer: str = "torch.fx"  # or "torch._dynamo.export" (a Hugging Face model: see the docstring)


class NotTraceable(MlscopeError):
    """torch.fx cannot trace the model, or its traced graph cannot run on the batch: why, as text."""


class _Recorder(ShapeProp):
    """ShapeProp that also keeps what every node made, tensors as their metadata only (not their
    values: a model's activations would all stay alive)."""

    def __init__(self, module: GraphModule) -> None:
        super().__init__(module)
        self.made: dict[str, Any] = {}

    def run_node(self, n: Node) -> Any:
        result = super().run_node(n)
        self.made[n.name] = pytree.tree_map(
            lambda value: _meta(value) if isinstance(value, torch.Tensor) else value, result
        )
        return result


def _meta(tensor: torch.Tensor) -> TensorMeta:
    return TensorMeta(tuple(tensor.shape), tuple(tensor.stride()), str(tensor.dtype).removeprefix("torch."))


def decompose_module(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> ModuleGraph:
    """The layers of `module` as torch.fx traces it (TorchDynamo, a Hugging Face model torch.fx cannot
    trace), run once on `inputs` (one batch, positional as the predictor feeds them) to learn shapes.

    Raises:
        NotTraceable: tracing failed (data-dependent control flow, ...), the traced graph failed on
            `inputs`, or its output differs from the module's; the message says which and why.
    """
    traced, tracer = _trace(module, inputs)
    recorder = _Recorder(traced)
    try:
        with torch.inference_mode():
            # (copies: a layer in place on an input would change the other run's)
            result = recorder.propagate(*(tensor.clone() for tensor in inputs))
            expected = module(*(tensor.clone() for tensor in inputs))
    except Exception as exc:
        raise NotTraceable(
            f"the traced graph fails on the synthetic batch: {type(exc).__name__}: {exc}"[:300]
        ) from exc
    if not _same(result, expected):
        raise NotTraceable(f"the graph {tracer} traced does not reproduce the model's output on the batch")
    layers: list[Layer] = []
    placeholders = []
    for node in traced.graph.nodes:
        if node.op == "placeholder":
            placeholders.append(node.name)
        if node.op not in ("call_module", "call_function", "call_method"):
            continue
        facts = []
        for argument in node.all_input_nodes:
            made = recorder.made.get(argument.name)
            kind = "initializer" if argument.op == "get_attr" else "activation"
            if isinstance(made, TensorMeta):
                facts.append(TensorFact(argument.name, kind, made.dtype, made.shape))
            else:
                facts.append(TensorFact(argument.name, kind))
        layers.append(
            Layer(len(layers), node.name, _label(node, traced), "torch", tuple(facts), (node.name,), node)
        )
    return ModuleGraph(
        layers=layers,
        facts={},
        values={},
        initializers={},
        opsets={},
        ir_version=0,
        graph_inputs=tuple(placeholders),
        module=traced,
        made=recorder.made,
        tracer=tracer,
    )


def _trace(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[GraphModule, str]:
    try:
        return symbolic_trace(module), "torch.fx"
    except Exception as exc:
        reason = f"torch.fx cannot trace the model: {type(exc).__name__}: {exc}"[:300]
        if not _holds_hugging_face_model(module):
            raise NotTraceable(reason) from exc
    try:
        with torch.no_grad():
            traced, _ = torch._dynamo.export(module, assume_static_by_default=True)(*inputs)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise NotTraceable(
            f"{reason[:150]}; nor can torch._dynamo.export (the Hugging Face model specialised on the "
            f"batch): {type(exc).__name__}: {first}"[:400]
        ) from exc
    finally:
        torch._dynamo.reset()  # nothing kept of the export in this process
    return traced, "torch._dynamo.export"


def _holds_hugging_face_model(module: torch.nn.Module) -> bool:
    """Whether `module` is or holds a `transformers.PreTrainedModel`; transformers is not imported for
    it (a model of its was built only if it is imported already)."""
    transformers = sys.modules.get("transformers")
    if transformers is None:
        return False
    base = transformers.PreTrainedModel
    return any(isinstance(inner, base) for inner in module.modules())


def _same(result: Any, expected: Any) -> bool:
    """Whether two outputs are alike: the same structure, tensors of the same shape and dtype whose
    values agree to float32's rounding (a traced graph may order a reduction otherwise), other values
    equal."""
    got, structure = pytree.tree_flatten(result)
    wanted, expected_structure = pytree.tree_flatten(expected)
    if structure != expected_structure:
        return False
    for a, b in zip(got, wanted, strict=True):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                return False
            if a.is_floating_point() and not torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True):
                return False
            if not a.is_floating_point() and not torch.equal(a, b):
                return False
        elif isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or a != b:
            return False
    return True


def _qualified(function: Any) -> str:
    module = getattr(function, "__module__", None) or ""
    return f"{module}.{getattr(function, '__qualname__', repr(function))}"


def _label(node: Node, root: torch.nn.Module) -> str:
    if node.op == "call_module":
        return type(root.get_submodule(str(node.target))).__name__
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    return getattr(node.target, "__name__", str(node.target))


@dataclass
class _Arguments:
    """A node's arguments as a brick calls them: `args` and `kwargs` with every other node replaced by
    the value it had and every tensor by None, at the places `slots` ((positional index or keyword,
    index within a list argument or None)) that the brick's inputs, `tensors`, fill in order."""

    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    tensors: list[TensorMeta] = field(default_factory=list)
    slots: list[tuple[int | str, int | None]] = field(default_factory=list)


def _value(argument: Any, made: dict[str, Any]) -> Any:
    if not isinstance(argument, Node):
        return argument
    value = made.get(argument.name)
    if argument.op == "get_attr" and not isinstance(value, TensorMeta):
        return None
    return value


def _arguments(node: Node, made: dict[str, Any]) -> _Arguments:
    """Raises ValueError: a tensor nested deeper than one list, or a structure of tensors made by one
    node (a tuple output passed whole)."""
    found = _Arguments()
    places: list[tuple[int | str, Any]] = [*enumerate(node.args), *node.kwargs.items()]
    for place, argument in places:
        value: Any
        if isinstance(argument, list | tuple) and any(isinstance(item, Node) for item in argument):
            value = [_value(item, made) for item in argument]
            for index, item in enumerate(value):
                if isinstance(item, TensorMeta):
                    found.slots.append((place, index))
                    found.tensors.append(item)
                    value[index] = None
        else:
            value = _value(argument, made)
            if isinstance(value, TensorMeta):
                found.slots.append((place, None))
                found.tensors.append(value)
                value = None
        if any(isinstance(item, TensorMeta) for item in pytree.tree_leaves(value)):
            raise ValueError("a tensor nested in an argument deeper than one list: not measured alone")
        if isinstance(place, int):
            found.args.append(value)
        else:
            found.kwargs[place] = value
    return found


def _canonical(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    return repr(value)


def _dispatch_only(node: Node, graph: ModuleGraph, module: torch.nn.Module | None) -> str | None:
    made = graph.made.get(node.name)
    if not pytree.tree_leaves(made) or not any(isinstance(v, TensorMeta) for v in pytree.tree_leaves(made)):
        return "computes no tensor (sizes, attributes): one dispatch"
    if isinstance(module, _VIEW_MODULES):
        return f"{type(module).__name__} in eval mode is a no-op: one dispatch"
    if node.op == "call_function" and node.target in _DROPOUTS and not _training(node):
        return "dropout not training is a no-op: one dispatch"
    target = node.target
    if (node.op == "call_method" and target in _VIEW_METHODS) or (
        node.op == "call_function" and target in _VIEW_FUNCTIONS
    ):
        return "a view of its input (no copy): one dispatch"
    if (node.op != "call_module" and target in _RESHAPES) or isinstance(module, torch.nn.Flatten):
        source = graph.made.get(node.all_input_nodes[0].name) if node.all_input_nodes else None
        if isinstance(source, TensorMeta) and _contiguous(source):
            return "a reshape of a contiguous tensor is a view (no copy): one dispatch"
    return None


def _training(node: Node) -> Any:
    """A dropout call's `training` argument (third, or by keyword; F.dropout's default is True)."""
    keyword = "train" if node.target is torch.dropout else "training"
    return node.kwargs.get(keyword, (*node.args, True, True)[2])


def _contiguous(spec: TensorMeta) -> bool:
    expected = 1
    for extent, step in reversed(list(zip(spec.shape, spec.stride, strict=True))):
        if extent != 1 and step != expected:
            return False
        expected *= extent
    return True


def plan_module_bricks(graph: ModuleGraph, *, execution: dict[str, Any]) -> list[BrickPlan | NotABrick]:
    """A plan per layer of `graph` (decompose_module's), in its order: a brick keyed by what its cost
    depends on, or why it is none (a view or shape arithmetic: one dispatch)."""
    root: torch.nn.Module = graph.module
    plans: list[BrickPlan | NotABrick] = []
    for layer in graph.layers:
        node: Node = layer.node
        module = root.get_submodule(str(node.target)) if node.op == "call_module" else None
        why = _dispatch_only(node, graph, module)
        if why is not None:
            plans.append(NotABrick(layer.name, layer.op_type, why, zero_cost=True, dispatch_only=True))
            continue
        try:
            arguments = _arguments(node, graph.made)
        except ValueError as exc:
            plans.append(NotABrick(layer.name, layer.op_type, str(exc)))
            continue
        operation: dict[str, Any]
        if module is not None:
            operation = {
                "module": _qualified(type(module)),
                "extra_repr": module.extra_repr(),
                "parameters": [[n, list(p.shape), str(p.dtype)] for n, p in module.named_parameters()],
                "buffers": [[n, list(b.shape), str(b.dtype)] for n, b in module.named_buffers()],
            }
        elif node.op == "call_method":
            operation = {"method": str(node.target)}
        else:
            operation = {"function": _qualified(node.target)}
        document = {
            **operation,
            "arguments": _canonical(arguments.args),
            "keywords": {name: _canonical(value) for name, value in sorted(arguments.kwargs.items())},
            "tensors_at": [list(slot) for slot in arguments.slots],
            "inputs": [[list(t.shape), list(t.stride), t.dtype] for t in arguments.tensors],
            "execution": execution,
        }
        key = brick_key(document)
        tensors = arguments.tensors
        batch = tensors[0].shape[0] if tensors and tensors[0].shape else 1
        plans.append(BrickPlan(key, document, batch, layer))
    return plans


# The layers cuDNN runs as convolutions on a GPU: torch.nn's convolution modules and functions, by the
# label a layer gets (its module's class name, or its function's name).
CONVOLUTIONS = frozenset(
    f"{kind}{dims}d" for kind in ("Conv", "ConvTranspose", "conv", "conv_transpose") for dims in (1, 2, 3)
)


def is_convolution(plan: BrickPlan) -> bool:
    """Whether `plan`'s layer is a convolution (whose algorithm cuDNN chooses on a GPU)."""
    return plan.layer.op_type in CONVOLUTIONS


def cudnn_benchmark_plan(plan: BrickPlan) -> BrickPlan:
    """`plan`'s brick measured with `torch.backends.cudnn.benchmark` on: the same layer under a key of
    its own (its execution says so), so that both measurements are stored and reused apart."""
    document = {**plan.document, "execution": {**plan.document["execution"], "cudnn_benchmark": True}}
    return BrickPlan(brick_key(document), document, plan.batch_size, plan.layer, list(plan.notes))


class _OneLayer(torch.nn.Module):
    """One operation called with its arguments, the brick's inputs put in their places. Kept to a few
    list operations a call: the calibration brick (one add through this same class) measures what the
    wrapper costs, and a costlier rebuild of the arguments (pytree's) would count a few µs against
    every layer."""

    call: Callable[..., Any]

    def __init__(self, call: Any, arguments: _Arguments, module: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.inner = module  # registered: the copy of the layer's module, with its weights
        # A plain attribute, not a registered submodule: looked up as fast as a function is.
        self.__dict__["call"] = call
        self.args, self.kwargs, self.slots = arguments.args, arguments.kwargs, arguments.slots

    def forward(self, *tensors: torch.Tensor) -> Any:
        args, kwargs = list(self.args), self.kwargs
        for (place, index), tensor in zip(self.slots, tensors, strict=True):
            if isinstance(place, str):
                kwargs = {**kwargs, place: tensor}
            elif index is None:
                args[place] = tensor
            else:
                args[place] = [*args[place][:index], tensor, *args[place][index + 1 :]]
        return self.call(*args, **kwargs)


def module_brick(plan: BrickPlan, graph: ModuleGraph) -> ModuleBrickSpec:
    """The module that runs `plan`'s layer alone (a copy of the layer's module, with its weights, for a
    call_module), and its inputs' specs."""
    root: torch.nn.Module = graph.module
    node: Node = plan.layer.node
    module = copy.deepcopy(root.get_submodule(str(node.target))) if node.op == "call_module" else None
    arguments = _arguments(node, graph.made)
    if module is not None:
        layer = _OneLayer(module, arguments, module)
    elif node.op == "call_method":
        layer = _OneLayer(getattr(torch.Tensor, str(node.target)), arguments)
    else:
        layer = _OneLayer(node.target, arguments)
    return ModuleBrickSpec(plan.name, layer, tuple(arguments.tensors), plan.batch_size)


def _adds(length: int) -> Any:
    def chain(x: torch.Tensor) -> torch.Tensor:
        for _ in range(length):
            x = x + x
        return x

    return chain


def calibration_bricks(execution: dict[str, Any], chain: int) -> list[tuple[str, str, ModuleBrickSpec, int]]:
    """The calibration bricks, (key, name, spec, batch size) each, on a float32[1, 1], each called as a
    layer's brick is (_OneLayer): one add (a brick run's own cost with one tiny op in it), and `chain`
    adds one after another (what each further op costs to dispatch)."""
    bricks = []
    for length in (1, chain):
        document = {"calibration": True, "op": "add", "chain": length, "execution": execution}
        key = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
        layer = _OneLayer(_adds(length), _Arguments(args=[None], slots=[(0, None)]))
        spec = ModuleBrickSpec(brick_name(key), layer, (TensorMeta((1, 1), (1, 1), "float32"),))
        bricks.append((key, spec.name, spec, 1))
    return bricks
