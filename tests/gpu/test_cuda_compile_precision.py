"""torch.compile and bf16 on the GPU (docs/frameworks.md): one `mlscope run --device cuda`
measures the test model eager and compiled (Inductor's Triton kernels, its cache the test's own so the
compile is a cold one), the compile timed apart from the first inference, each batch size compiled
before it is measured and the compiled outputs eager's; and bf16 on the device moves the outputs by
its rounding, no more. As `tests/integration/test_compile.py` and `test_precision.py` hold on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_compile import check_eager_and_compiled
from tests.integration.test_precision import check_bf16_result
from tests.integration.test_run_cli import mlscope

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
    # Then each was measured on the GPU, the compile apart from the inferences and cold, each batch
    # size compiled before it was measured, the compiled outputs eager's on the same device
    eager, compiled = check_eager_and_compiled(done)
    assert eager["device"].startswith("cuda") and compiled["device"].startswith("cuda")
    cold = compiled["cold_start"]
    by_size = {m["batch_size"]: m for m in compiled["measurements"]}
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
    # Then it was measured, its outputs within bf16's rounding of fp32's on the same device
    parity = check_bf16_result(done)
    record_property("figure", f"max_rel {parity['max_rel']:.4f}, cosine {parity['cosine']:.6f} against fp32")
