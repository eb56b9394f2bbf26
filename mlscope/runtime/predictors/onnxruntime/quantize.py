"""ONNX Runtime's dynamic int8 quantisation of the graph it runs (`options.quantize=int8`,
docs/frameworks.md#precision-and-quantisation): `onnxruntime.quantization.quantize_dynamic` with its
own defaults, int8 weights and every node kind its dynamic mode converts (Conv to ConvInteger, MatMul
and Gemm to MatMulInteger, ...), activations quantised per batch (DynamicQuantizeLinear). It needs no
calibration data, which is why it is the quantisation mlscope offers, as PyTorch's `quantize_dynamic`
is on that side.

The quantised graph is cached beside the export (`<cache>/onnx/`), named by the source graph's
SHA-256, with the count of its integer nodes beside it (`.json`): a user's file and an export alike
are quantised once, and a container finds the graph its host made (the docker runner's prefetch)
whatever ONNX Runtime each has. The quantiser runs in a child process
(`python -m mlscope.runtime.predictors.onnxruntime.quantize`) for the export's reason: the process
that measures ONNX Runtime does not import onnx and the quantiser.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

from mlscope.runtime.predictors.files import file_sha256, made_by_child

__all__ = ["QUANTISED_KINDS", "quantised_graph", "quantised_nodes", "recorded_nodes"]

# The integer node kinds a dynamically quantised graph computes with.
QUANTISED_KINDS = frozenset({"ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM", "QAttention"})


def quantised_graph(graph: Path, cache_dir: Path, timeout_s: float = 600) -> Path:
    """The cached int8 dynamic quantisation of `graph`, made on first use.

    Concurrent callers wait on a lock; a partial file never becomes visible under the final name; a
    graph already cached is only read (a read-only cache serves it).

    Raises:
        PredictorError: the quantiser failed (its last lines), converted no node (the graph would run
            unchanged), or the graph is not cached and the cache cannot be written.
    """
    target = cache_dir / "onnx" / f"{file_sha256(graph)}-int8-dynamic.onnx"
    made_by_child(
        target,
        [sys.executable, "-m", "mlscope.runtime.predictors.onnxruntime.quantize", str(graph)],
        stdout_to=target.with_suffix(".json"),
        timeout_s=timeout_s,
        unwritable=f"options.quantize: {graph.name} has no int8 graph at {target}, and the cache cannot "
        "be written to make it",
        failed=f"options.quantize: quantising {graph.name} to int8 failed",
    )
    return target


def recorded_nodes(graph: Path) -> dict[str, int]:
    """The integer nodes of a graph `quantised_graph` made, by kind, as recorded beside it (read
    without loading the graph); empty when the record is missing."""
    try:
        return {
            str(kind): int(count)
            for kind, count in json.loads(graph.with_suffix(".json").read_text()).items()
        }
    except (OSError, ValueError, AttributeError):
        return {}


def quantised_nodes(op_types: list[str]) -> dict[str, int]:
    """How many nodes of each integer kind a graph's node list (`op_types`) holds."""
    return dict(sorted(collections.Counter(kind for kind in op_types if kind in QUANTISED_KINDS).items()))


def _quantise(source: Path, target: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(source, target, weight_type=QuantType.QInt8)
    kinds = [node.op_type for node in onnx.load(str(target), load_external_data=False).graph.node]
    if not quantised_nodes(kinds):
        target.unlink()
        present = ", ".join(sorted(set(kinds))) or "none"
        raise SystemExit(
            f"the graph has no node ONNX Runtime's dynamic quantisation converts (Conv, MatMul, Gemm, "
            f"Attention, LSTM); it has {present} and would run unchanged"
        )
    print(json.dumps(quantised_nodes(kinds)))


if __name__ == "__main__":
    _quantise(Path(sys.argv[1]), Path(sys.argv[2]))
