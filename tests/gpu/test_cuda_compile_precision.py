"""torch.compile and bf16 on the GPU (docs/frameworks.md): one `mlscope run --device cuda`
measures the test model eager and compiled (Inductor's Triton kernels, its cache the test's own so the
compile is a cold one), the compile timed apart from the first inference, each batch size compiled
before it is measured and the compiled outputs eager's; and bf16 on the device moves the outputs by
its rounding, no more. As `tests/integration/test_compile.py` and `test_precision.py` hold on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_run_cli import mlscope, printed_results

pytestmark = pytest.mark.slow

MODEL = "test_tiny_mlp"
MEASURE = [
    "--min-seconds", "0.2", "--min-count", "20", "--max-seconds", "5", "--measure", "warmup_seconds=0.1",
    "--measure", "stability=0.99", "--measure", "contention_limit=1.0",
]  # fmt: skip


def test_torch_compile_on_the_gpu_is_timed_apart_and_answers_as_eager(
    gpu_env: dict[str, str], tmp_path: Path, record_property: Any
) -> None:
    env = {**gpu_env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    # When the model runs eager and compiled on the GPU at two batch sizes, each checked for parity
    done = mlscope(
        env, "run", MODEL, "-f", "pytorch", "--device", "cuda", "--option", "compile=none,default",
        "-b", "1,4", "--check-parity", "--json", *MEASURE,
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr[-3000:]
    eager, compiled = printed_results(done.stdout)
    assert eager["status"] == compiled["status"] == "succeeded", (eager.get("error"), compiled.get("error"))
    assert eager["device"].startswith("cuda") and compiled["device"].startswith("cuda")
    # Then the compile is timed apart from the first inference, and cold
    assert compiled["framework"]["compile"] == "default"
    cold = compiled["cold_start"]
    assert cold["compile_ms"] > 0 and cold["compile_cached"] is False
    assert cold["first_inference_ms"] < cold["compile_ms"] / 10, cold
    # And batch size 4 was compiled before it was measured: no point compiled while measured
    by_size = {m["batch_size"]: m for m in compiled["measurements"]}
    assert "compile_ms" not in by_size[1] and by_size[4]["compile_ms"] > 0
    assert [by_size[size]["recompiles"] for size in (1, 4)] == [0, 0]
    # And the compiled outputs are eager PyTorch's on the same device
    assert compiled["parity"]["against"] == "pytorch" and compiled["parity"]["verdict"] == "same", compiled[
        "parity"
    ]
    medians = [
        {m["batch_size"]: m["latency_ms"]["median"] for m in result["measurements"]}[4]
        for result in (eager, compiled)
    ]
    record_property(
        "figure",
        f"compile {cold['compile_ms']:.0f} ms (b4 {by_size[4]['compile_ms']:.0f} ms); b4 median eager "
        f"{medians[0]:.3f} ms, compiled {medians[1]:.3f} ms; parity {compiled['parity']['verdict']}",
    )


def test_bf16_on_the_gpu_differs_from_fp32_by_its_rounding(
    gpu_env: dict[str, str], record_property: Any
) -> None:
    # When the model runs in bf16 on the GPU, checked against PyTorch as loaded on the same device
    done = mlscope(
        gpu_env, "run", MODEL, "-f", "pytorch", "--device", "cuda", "--option", "precision=bf16",
        "--check-parity", "--json", *MEASURE,
    )  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr[-3000:]
    (result,) = printed_results(done.stdout)
    assert result["status"] == "succeeded", result.get("error")
    assert result["framework"]["precision"] == "bf16"
    assert all(m["latency_ms"]["count"] > 0 for m in result["measurements"])
    parity = result["parity"]
    assert parity["against"] == "pytorch"
    # Then bf16's 8 bits of mantissa move the outputs by about 2^-8 of their size, no more
    assert 0 < parity["max_rel"] < 0.1, parity
    assert parity["cosine"] > 0.999, parity
    record_property("figure", f"max_rel {parity['max_rel']:.4f}, cosine {parity['cosine']:.6f} against fp32")
