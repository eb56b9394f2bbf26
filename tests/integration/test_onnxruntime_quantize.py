"""ONNX Runtime's dynamic int8 quantisation for real: one `mlscope run` measures mlscope's trained
digits model as loaded and int8-quantised, with accuracy on the held-out digits beside each, the int8
graph's outputs checked against ONNX Runtime as loaded; the quantised graph is made once, cached by
its source graph's hash, and a graph with nothing to quantise is refused."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.onnxruntime.quantize import quantised_graph, recorded_nodes
from tests.fixtures.onnx_graphs import onnx_model
from tests.integration.test_run_cli import FAST, mlscope, printed_results

pytestmark = pytest.mark.slow


def test_one_run_measures_the_digits_model_as_loaded_and_int8_with_accuracy_beside_each(
    mlscope_env: dict[str, str],
) -> None:
    # Given mlscope's trained digits model, When one command runs it on ONNX Runtime as loaded and
    # int8-quantised, on the 360 held-out digits, each checked for parity
    done = mlscope(
        mlscope_env, "run", "mlscope:digits_cnn", "-f", "onnxruntime", "--option", "quantize=none,int8",
        "--dataset", "digits", "--check-parity", "--json", *FAST,
    )  # fmt: skip
    # (exit 1 or 3: a point on this shared machine may be invalid, and int8's outputs differ)
    assert done.returncode in (0, 1, 3), done.stderr
    plain, quantised = printed_results(done.stdout)
    assert plain["status"] == quantised["status"] == "succeeded", (plain.get("error"), quantised.get("error"))
    # Then each has its accuracy on the same 360 digits, and latencies
    assert plain["accuracy"]["count"] == quantised["accuracy"]["count"] == 360
    assert all(m["latency_ms"]["count"] > 0 for m in plain["measurements"] + quantised["measurements"])
    # And the int8 run ran a quantised graph (integer nodes, recorded), made from the plain one's graph
    facts = quantised["framework"]
    assert (facts["quantize"], facts["precision"]) == ("int8", "fp32")
    assert facts["quantized_nodes"] and all(count > 0 for count in facts["quantized_nodes"].values())
    assert facts["source_graph"] == plain["framework"]["graph"] != facts["graph"]
    # And its outputs moved (a quantisation that changed nothing would not be one), checked against
    # ONNX Runtime as loaded
    parity = quantised["parity"]
    assert parity["against"] == "onnxruntime" and parity["max_abs"] > 0, parity
    # And int8 costs the trained model no more accuracy than the float figure's own 95% interval
    # spans on these 360 samples: int8 weights move each logit by a fraction of a percent of its
    # size (parity's max_rel), which flips only predictions whose two best logits are that close
    low, high = plain["accuracy"]["ci"]["top1"]
    assert plain["accuracy"]["top1"] > 0.9, plain["accuracy"]
    assert low <= quantised["accuracy"]["top1"] <= high, (plain["accuracy"], quantised["accuracy"])


def test_a_graph_is_quantised_once_and_cached_by_its_hash(tmp_path: Path) -> None:
    # Given a user's graph (MatMul, Relu) and an empty cache
    graph = onnx_model(tmp_path / "mine.onnx")
    cache = tmp_path / "cache"
    # When it is quantised
    made = quantised_graph(graph, cache)
    # Then the int8 graph is beside the export cache, its MatMul now integer, its nodes recorded
    assert made.parent == cache / "onnx" and made.name.endswith(".onnx")
    kinds = [node.op_type for node in onnx.load(str(made)).graph.node]
    assert "MatMulInteger" in kinds and "MatMul" not in kinds
    assert recorded_nodes(made) == {"MatMulInteger": 1}
    # And asking again serves the same file without making it again
    stamp = made.stat().st_mtime_ns
    assert quantised_graph(graph, cache) == made and made.stat().st_mtime_ns == stamp
    # And another graph (other weights) is another file
    other = onnx_model(tmp_path / "other.onnx", seed=1)
    assert quantised_graph(other, cache) != made


def test_a_graph_with_nothing_to_quantise_is_refused(tmp_path: Path) -> None:
    # Given a graph of a Relu alone (no node dynamic quantisation converts)
    from onnx import TensorProto, helper

    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "relu",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    graph = tmp_path / "relu.onnx"
    onnx.save(model, str(graph))
    # When it is quantised, Then that is refused naming the option and what the graph holds
    with pytest.raises(PredictorError) as refused:
        quantised_graph(graph, tmp_path / "cache")
    assert "options.quantize" in str(refused.value) and "Relu" in str(refused.value)
    # And no graph, whole or partial, was left behind
    assert not list((tmp_path / "cache" / "onnx").glob("*.onnx"))
    assert not list((tmp_path / "cache" / "onnx").glob("*.partial"))
