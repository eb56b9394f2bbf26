"""The graph ONNX Runtime runs, as layers: the model optimised offline by ONNX Runtime itself (so the
fused ops it executes, FusedConv, NchwcConv, FusedMatMul, ..., are what is decomposed, not the
exporter's unfused ones), every value's dtype and shape (and the values of integer tensors) learnt by
running the optimised graph once with every intermediate as an output, and the layer DAG by tensor
names.

onnx and onnxruntime are imported on first use: importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CONTROL_FLOW", "SMALL", "Layer", "LayerGraph", "TensorFact", "decompose", "optimise"]

# Tensors of at most this many elements are "small": shape arithmetic, not data.
SMALL = 64
# Ops with subgraphs: their cost depends on data and on the subgraph, not on one node's inputs.
CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})

# The optimisation levels of onnxruntime.GraphOptimizationLevel, by the names the predictor uses.
_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
           "all": "ORT_ENABLE_ALL"}  # fmt: skip


@dataclass(frozen=True)
class TensorFact:
    """One input of a layer. kind: "activation" (made by another layer or fed by the user),
    "initializer" (a constant of the graph), "absent" (an optional input left out, name "")."""

    name: str
    kind: str
    dtype: str = ""
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class Layer:
    """One node of the optimised graph, with what it reads and writes."""

    index: int
    name: str
    op_type: str
    domain: str
    inputs: tuple[TensorFact, ...]
    outputs: tuple[str, ...]
    node: Any = field(repr=False, compare=False)  # the onnx NodeProto


@dataclass
class LayerGraph:
    """The optimised graph's layers in execution (topological) order, with what a brick needs: each
    value's dtype and shape, integer values' contents, the initializers and the opsets."""

    layers: list[Layer]
    facts: dict[str, tuple[str, tuple[int, ...]]]
    values: dict[str, np.ndarray]
    initializers: dict[str, Any]  # name -> onnx TensorProto
    opsets: dict[str, int]
    ir_version: int
    graph_inputs: tuple[str, ...]

    def producers(self) -> dict[str, int]:
        """Which layer (by index) writes each tensor."""
        return {output: layer.index for layer in self.layers for output in layer.outputs if output}

    def edges(self) -> list[tuple[int, int]]:
        """(producer, consumer) pairs of layer indices: the DAG Benanza's critical path walks."""
        made_by = self.producers()
        pairs = {
            (made_by[fact.name], layer.index)
            for layer in self.layers
            for fact in layer.inputs
            if fact.kind == "activation" and fact.name in made_by
        }
        return sorted(pairs)


def _ort() -> Any:
    try:
        import onnxruntime
    except ImportError:
        from mlscope.contract.errors import UserError

        raise UserError(
            "decomposing a model into bricks needs ONNX Runtime: pip install 'mlscope[onnxruntime]'",
            field="framework",
        ) from None
    return onnxruntime


def optimise(source: Path, target: Path, *, level: str = "all", threads: int | None = None) -> Path:
    """Write the graph ONNX Runtime's CPU provider makes of `source` at `level` to `target`: what a
    session with that level runs. Shape computations fold away only where `source`'s axes are fixed
    (decompose's `fix_shapes`); with a dynamic axis they stay in the graph, as they run."""
    ort = _ort()
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[level])
    options.optimized_model_filepath = str(target)
    options.log_severity_level = 3  # the NCHWc "hardware specific" warning: we run where we optimise
    if threads:
        options.intra_op_num_threads = threads
    ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])
    return target


def fix_input_shapes(model: Any, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Give every graph input of `model` (an onnx ModelProto, changed in place) its full shape."""
    for value in model.graph.input:
        if value.name not in shapes:
            continue
        dims = value.type.tensor_type.shape.dim
        for dim, size in zip(dims, shapes[value.name], strict=True):
            dim.Clear()
            dim.dim_value = int(size)


def _capture(model: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of `model` (a ModelProto) for `feeds`: the graph run once, unoptimised (it is the
    optimised graph already), with every node output as a graph output."""
    import onnx

    ort = _ort()
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {value.name for value in probe.graph.output}
    for node in probe.graph.node:
        for output in node.output:
            if output and output not in known:
                probe.graph.output.add().name = output
                known.add(output)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(
        probe.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
    )
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


def decompose(
    source: Path,
    feeds: Mapping[str, np.ndarray],
    work_dir: Path,
    *,
    level: str = "all",
    threads: int | None = None,
    fix_shapes: bool = False,
) -> LayerGraph:
    """The layers ONNX Runtime runs for the model at `source` fed `feeds` (one batch; its shapes fix
    every dynamic axis).

    Args:
        source: the ONNX file.
        feeds: an array per graph input (initializers left out).
        work_dir: where the fixed-shape and optimised copies are written.
        level: ONNX Runtime's graph optimisation level the model is measured at.
        threads: the intra-op threads of the measured session (some fusions depend on them).
        fix_shapes: fix every dynamic axis to the feeds' sizes before optimising, so that shape
            computations fold away. Off by default: the model is measured as exported (a dynamic batch
            axis), and ORT then runs those Shape/Gather/Concat nodes every inference (a share of a small
            model's latency that docs/bricks.md measures), so they are layers too.
    """
    import onnx
    from onnx import helper

    work_dir.mkdir(parents=True, exist_ok=True)
    if fix_shapes:  # loaded only then: a large graph takes a while to parse
        model = onnx.load(str(source))
        fix_input_shapes(model, {name: tuple(array.shape) for name, array in feeds.items()})
        fixed = work_dir / "fixed.onnx"
        onnx.save(model, str(fixed))
        source = fixed
    optimised_path = optimise(source, work_dir / f"optimised-{level}.onnx", level=level, threads=threads)
    optimised = onnx.load(str(optimised_path))
    graph = optimised.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    values = _capture(optimised, feeds)
    facts: dict[str, tuple[str, tuple[int, ...]]] = {
        name: (str(array.dtype), tuple(int(d) for d in array.shape)) for name, array in values.items()
    }
    for name, array in feeds.items():
        facts[name] = (str(array.dtype), tuple(array.shape))
    for name, tensor in initializers.items():
        element = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
        facts[name] = (str(element), tuple(int(d) for d in tensor.dims))
    layers = []
    for index, node in enumerate(graph.node):
        inputs = []
        for name in node.input:
            if not name:
                inputs.append(TensorFact("", "absent"))
                continue
            dtype, shape = facts.get(name, ("", ()))
            kind = "initializer" if name in initializers else "activation"
            inputs.append(TensorFact(name, kind, dtype, shape))
        layers.append(
            Layer(
                index,
                node.name or f"{node.op_type}_{index}",
                node.op_type,
                node.domain,
                tuple(inputs),
                tuple(node.output),
                node,
            )
        )
    # Integer tensors (shapes, indices) keep their values in a brick; so do tiny float ones (the
    # scalars of shape arithmetic), which cannot be fed: a fed input needs a batch axis.
    integer_values = {
        name: array
        for name, array in {**values, **dict(feeds)}.items()
        if (np.dtype(array.dtype).kind in "iub" and array.size <= 1 << 16) or array.size <= SMALL
    }
    return LayerGraph(
        layers=layers,
        facts=facts,
        values=integer_values,
        initializers=initializers,
        opsets={entry.domain: entry.version for entry in optimised.opset_import},
        ir_version=optimised.ir_version,
        graph_inputs=tuple(feeds),
    )
