"""TensorRT on the GPU (docs/gpu.md#tensorrt): `mlscope run -f tensorrt --device cuda` builds an engine
from the test model's ONNX graph (its build the cold start's compile), measures it with CUDA events
at two batch sizes on one engine (its dynamic batch profile), and gives PyTorch's outputs on the same
weights and inputs. The machine needs `tensorrt` installed beside its PyTorch with CUDA: without it
the run fails here, naming what to install (a missing package never skips)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_run_cli import json_lines, mlscope

pytestmark = pytest.mark.slow

MODEL = "test_tiny_mlp"
MEASURE = [
    "--min-seconds", "0.5", "--min-count", "20", "--max-seconds", "5", "--measure", "warmup_seconds=0.1",
]  # fmt: skip


def test_tensorrt_builds_an_engine_from_the_onnx_graph_and_answers_as_pytorch(
    gpu_env: dict[str, str], record_property: Any
) -> None:
    # Given the test model, When it runs on TensorRT on the GPU at batch sizes 1 and 4, checked
    # against PyTorch on the same device
    done = mlscope(
        gpu_env, "run", MODEL, "-f", "tensorrt", "--device", "cuda", "-b", "1,4", "--check-parity",
        "--parity-against", "pytorch", "--json", *MEASURE,
    )  # fmt: skip
    assert done.returncode in (0, 3), (done.stderr[-3000:], done.stdout[-2000:])
    (result,) = json_lines(done.stdout)
    assert result["status"] == "succeeded" and result["device"] == "cuda", result.get("error")
    # Then one engine was built (in the cold start, timed as its compile) and served both sizes
    facts = result["framework"]
    assert facts["name"] == "tensorrt" and facts["precision"] == "fp32" and facts["graph"].endswith(".onnx")
    assert facts["engine"]["engines_built"] == 1 and facts["engine"]["max_batch"] >= 4
    assert result["cold_start"]["compile_ms"] > 0
    # And each batch size was timed, with no engine built while it was measured
    points = result["measurements"]
    assert [m["batch_size"] for m in points] == [1, 4]
    assert all(m["latency_ms"]["count"] > 0 and m["latency_ms"]["median"] > 0 for m in points)
    assert all(m.get("recompiles", 0) == 0 for m in points)
    # And its outputs are PyTorch's on the same weights (fp32, TF32 off)
    parity = result["parity"]
    assert parity["against"] == "pytorch" and parity["verdict"] == "same", parity
    record_property(
        "figure",
        f"TensorRT {facts['version']}: engine built in {result['cold_start']['compile_ms']:.0f} ms; "
        f"median {points[0]['latency_ms']['median'] * 1000:.1f} µs at batch 1; "
        f"parity max |Δ| {parity['max_abs']:.1e}",
    )
