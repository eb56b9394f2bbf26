"""`mlscope bricks --framework pytorch --device cuda` on the GPU: PyTorch's bricks and the model
whole measured on the device, and the cuDNN algorithm gap over the model's convolutions (each
convolution brick measured again with torch.backends.cudnn.benchmark on; docs/bricks.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from tests.fixtures.torch_bricks import small_conv
from tests.integration.test_run_cli import mlscope

pytestmark = pytest.mark.slow


def test_bricks_on_cuda_estimate_the_model_and_report_the_cudnn_gap_of_each_convolution(
    gpu_env: dict[str, str], record_property: Any
) -> None:
    # Given a small conv net with two convolutions of different shapes, counted from the model itself
    convolutions = [m for m in small_conv().modules() if isinstance(m, torch.nn.Conv2d)]
    # When its bricks are measured on the GPU (the whole model briefly)
    done = mlscope(
        gpu_env,
        "bricks", "bricks_small_conv", "--framework", "pytorch", "--device", "cuda", "--json",
        "--min-seconds", "0.3", "--max-seconds", "5",
        timeout=420,
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr[-3000:]
    report, summary = map(json.loads, done.stdout.splitlines())
    # Then the model is estimated from its bricks on the device and measured whole there
    assert report["device"].startswith("cuda") and report.get("fallback") is None, report
    assert report["estimate_ms"] > 0 and report["measured_ms"] > 0 and summary["models"] == 1
    # And the cuDNN section covers each convolution layer, each measured with the benchmark on too
    cudnn = report["cudnn"]
    assert "error" not in cudnn, cudnn
    assert cudnn["convolution_layers"] == len(convolutions)
    bricks = cudnn["bricks"]
    assert bricks["unique"] == len(convolutions) == bricks["measured_now"] + bricks["reused"]
    assert cudnn["benchmark_off_ms"] > 0 and cudnn["benchmark_on_ms"] > 0
    # and the gap is their difference (either sign: the heuristics may pick as well as the benchmark)
    assert cudnn["gap_ms"] == pytest.approx(cudnn["benchmark_off_ms"] - cudnn["benchmark_on_ms"], abs=1e-9)
    assert done.returncode == (0 if report["validity"]["valid"] else 3)
    record_property(
        "figure",
        f"estimate {report['estimate_ms']:.3f} ms vs measured {report['measured_ms']:.3f} ms; cuDNN gap "
        f"{cudnn['gap_ms']:.4f} ms over {cudnn['convolution_layers']} convolutions "
        f"(off {cudnn['benchmark_off_ms']:.4f}, on {cudnn['benchmark_on_ms']:.4f} ms)",
    )
