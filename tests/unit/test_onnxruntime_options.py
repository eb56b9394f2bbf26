"""ONNX Runtime's `precision` and `quantize` at the edges, without running a model: fp32 and int8
admitted (`quantize=none,int8` as two evaluations, the int8 one checked against ONNX Runtime as
loaded), bf16 and fp16 refused in one line naming the option (exit 2, nothing stored), int8 at a
reduced precision refused, and the integer node count of a quantised graph.
tests/integration/test_onnxruntime_quantize.py runs the quantisation."""

from __future__ import annotations

import pytest

from mlscope.contract.settings import load_settings
from mlscope.runtime.predictors.onnxruntime import option_refusal
from mlscope.runtime.predictors.onnxruntime.quantize import quantised_nodes
from mlscope.workers.local import admit_all
from tests.unit.test_compile_options import refused_run

MODEL = "test_tiny_mlp"


def test_fp32_and_int8_are_admitted_as_several_evaluations(mlscope_env: dict[str, str]) -> None:
    # Given ONNX Runtime asked for its model as loaded and int8-quantised, in fp32
    document = {"options": {"quantize": "none,int8", "precision": "fp32"}, "check_parity": True}
    # When it is admitted
    plain, quantised = admit_all(MODEL, ["onnxruntime"], document, settings=load_settings())
    # Then it is two evaluations, in the order given
    assert [a.request.options["quantize"] for a in (plain, quantised)] == ["none", "int8"]
    # And the int8 one is checked against ONNX Runtime as loaded, the plain one against another framework
    assert quantised.parity_against == "onnxruntime"
    assert plain.parity_against not in (None, "onnxruntime")


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (
            ["-f", "onnxruntime", "--option", "precision=fp16"],
            "options.precision: ONNX Runtime runs mlscope's fp32 graphs in fp32 only (fp16",
        ),
        (["-f", "onnxruntime", "--option", "precision=bf16"], "no bf16 kernels"),
        (["-f", "onnxruntime", "--option", "precision=fp32,fp16"], "options.precision"),
        (["-f", "onnxruntime", "--option", "quantize=int4"], "options.quantize"),
        (
            ["-f", "onnxruntime", "--option", "quantize=int8", "--option", "precision=fp16"],
            "options.precision",
        ),
        (["-f", "onnxruntime", "--option", "quantize=int8", "--scenario", "generate"], "options.quantize"),
    ],
)
def test_a_precision_or_quantisation_it_cannot_run_is_refused_in_one_line_storing_nothing(
    mlscope_env: dict[str, str], capsys: pytest.CaptureFixture[str], arguments: list[str], named: str
) -> None:
    # Given a request ONNX Runtime cannot run as asked, When it is run, Then it is refused in one
    # line naming the option, exit 2, nothing stored
    err = refused_run(mlscope_env, capsys, arguments)
    assert named in err, err


def test_the_refusal_names_precision_and_passes_fp32_on_any_device() -> None:
    # Given the plain precisions, When asked on the CPU or a GPU, Then nothing is refused
    for options in ({}, {"precision": "fp32"}, {"precision": "f32"}, {"quantize": "int8"}):
        assert option_refusal(options, "cpu") is None and option_refusal(options, "cuda:0") is None
    # And a reduced one is refused, its first words the field
    for precision in ("bf16", "fp16"):
        refusal = option_refusal({"precision": precision}, "cpu")
        assert refusal is not None and refusal.startswith("options.precision: ") and precision in refusal


def test_a_quantised_graphs_integer_nodes_are_counted_by_kind() -> None:
    # Given the node kinds of a dynamically quantised graph, When counted, Then only integer ones count
    kinds = ["DynamicQuantizeLinear", "ConvInteger", "Relu", "ConvInteger", "MatMulInteger", "Mul", "Gemm"]
    assert quantised_nodes(kinds) == {"ConvInteger": 2, "MatMulInteger": 1}
    assert quantised_nodes(["MatMul", "Relu"]) == {}
