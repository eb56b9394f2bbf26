"""Reduced precision and dynamic int8 quantisation of a PyTorch model, for real: one `mlscope run`
measures the model as loaded and quantised with accuracy on a dataset beside each, the quantised
model's outputs compared with its framework's as loaded (the parity check says how far they moved);
bf16 runs and differs from fp32 by a bf16's rounding, not more."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.integration.test_run_cli import FAST, mlscope, printed_results

pytestmark = pytest.mark.slow


def test_one_run_measures_a_model_as_loaded_and_int8_quantised_with_accuracy_beside_each(
    mlscope_env: dict[str, str],
) -> None:
    done = mlscope(
        mlscope_env, "run", "test_digits_conv", "-f", "pytorch", "--option", "quantize=none,int8",
        "--dataset", "digits", "--limit", "100", "--check-parity", "--json", *FAST,
    )  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr
    plain, quantised = printed_results(done.stdout)
    assert plain["status"] == quantised["status"] == "succeeded", (plain.get("error"), quantised.get("error"))
    # Then each has its accuracy on the same 100 digits
    assert plain["accuracy"]["count"] == quantised["accuracy"]["count"] == 100
    # And the quantised one says so, and was checked against the model as loaded, whose outputs its
    # int8 weights moved (a quantisation that changed nothing would not be one)
    assert quantised["framework"]["quantize"] == "int8" and "quantize" not in plain["framework"]
    parity = quantised["parity"]
    assert parity["against"] == "pytorch" and parity["max_abs"] > 0, parity
    assert parity["top1_agreement"] >= 0.9, parity
    # And the model as loaded was checked against the other framework, as ever
    assert plain["parity"]["against"] == "onnxruntime" and plain["parity"]["verdict"] == "same"


def test_bf16_runs_and_differs_from_fp32_by_its_rounding(mlscope_env: dict[str, str]) -> None:
    done = mlscope(
        mlscope_env, "run", "test_tiny_mlp", "-f", "pytorch", "--option", "precision=bf16", "--check-parity",
        "--json", *FAST,
    )  # fmt: skip
    check_bf16_result(done)


def check_bf16_result(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one bf16 result `done` printed (also on a GPU: tests/gpu), measured, its outputs within bf16's
    rounding of PyTorch's as loaded; its parity section."""
    assert done.returncode in (0, 1, 3), done.stderr[-3000:]
    (result,) = printed_results(done.stdout)
    assert result["status"] == "succeeded", result.get("error")
    assert result["framework"]["precision"] == "bf16"
    assert all(m["latency_ms"]["count"] > 0 for m in result["measurements"])
    parity: dict[str, Any] = result["parity"]
    assert parity["against"] == "pytorch"
    # bf16 keeps 8 bits of mantissa: outputs move by about 2^-8 of their size, no more
    assert 0 < parity["max_rel"] < 0.1, parity
    assert parity["cosine"] > 0.999, parity
    return parity
