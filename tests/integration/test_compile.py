"""torch.compile for real (inductor, this machine's C++ compiler): one `mlscope run` measures a model
eager and compiled, the compile timed apart from the first inference and from the measurements, no
graph compiled while a point is measured, the compiled model's outputs the same as eager's, and
`mlscope diff` naming the compile as the difference and comparing the two. Inductor's cache is the
test's own, so the first compile is a cold one."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.integration.test_run_cli import FAST, mlscope, printed_results

pytestmark = pytest.mark.slow

MODEL = "test_tiny_mlp"


def test_one_run_measures_a_model_eager_and_compiled_and_diff_compares_them(
    mlscope_env: dict[str, str], tmp_path: object
) -> None:
    env = {**mlscope_env, "TORCHINDUCTOR_CACHE_DIR": f"{tmp_path}/inductor"}
    # When the model is run eager and compiled at two batch sizes, each checked for parity
    done = mlscope(
        env, "run", MODEL, "-f", "pytorch", "--option", "compile=none,default", "-b", "1,4",
        "--check-parity", "--json", *FAST,
    )  # fmt: skip
    # Then each was measured, the compile apart from the inferences and cold, the outputs eager's
    eager, compiled = check_eager_and_compiled(done)
    # And diff names the compile as what differs, and compares the two point by point when told to
    refused = mlscope(env, "diff", eager["id"], compiled["id"])
    assert refused.returncode == 2 and "options.compile: unset (A) vs default (B)" in refused.stderr
    compared = mlscope(env, "diff", eager["id"], compiled["id"], "--allow-different", "--json")
    assert compared.returncode == 0, compared.stderr
    report = json.loads(compared.stdout)
    assert sorted(point["batch_size"] for point in report["points"]) == [1, 4], report


def check_eager_and_compiled(done: subprocess.CompletedProcess[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two results of `-o compile=none,default -b 1,4 --check-parity` that `done` printed (also on a
    GPU: tests/gpu), checked: the eager one without compile figures; the compiled one's compile timed
    apart from its first inference and cold, batch 4 compiled before it was measured, no recompile
    while measured, and its outputs eager PyTorch's."""
    assert done.returncode in (0, 3), done.stderr[-3000:]
    eager, compiled = printed_results(done.stdout)
    assert eager["status"] == compiled["status"] == "succeeded", (eager.get("error"), compiled.get("error"))
    # The eager one has no compile figures
    assert eager["request"]["options"]["compile"] == "none"
    assert "compile" not in eager["framework"] and "compile_ms" not in eager["cold_start"]
    assert all("recompiles" not in m and "compile_ms" not in m for m in eager["measurements"])
    # The compiled one's compile is timed apart from its first inference, and cold
    assert compiled["framework"]["compile"] == "default"
    cold = compiled["cold_start"]
    assert cold["compile_ms"] > 0 and cold["compile_cached"] is False
    assert cold["first_inference_ms"] < cold["compile_ms"] / 10, cold
    # Batch size 4 was compiled before it was measured, so no point compiled while measured
    by_size = {m["batch_size"]: m for m in compiled["measurements"]}
    assert "compile_ms" not in by_size[1] and by_size[4]["compile_ms"] > 0
    assert [by_size[size]["recompiles"] for size in (1, 4)] == [0, 0]
    # Its outputs are eager PyTorch's
    assert compiled["parity"]["against"] == "pytorch" and compiled["parity"]["verdict"] == "same", compiled[
        "parity"
    ]
    return eager, compiled


def test_a_second_process_takes_the_compiled_graph_from_inductors_cache(
    mlscope_env: dict[str, str], tmp_path: object
) -> None:
    env = {**mlscope_env, "TORCHINDUCTOR_CACHE_DIR": f"{tmp_path}/inductor"}
    runs = [
        mlscope(env, "run", MODEL, "-f", "pytorch", "--option", "compile=default", "--json", *FAST)
        for _ in range(2)
    ]
    first, second = (printed_results(run.stdout)[0] for run in runs)
    # The first process compiled cold; the second found the graph in the cache, and says so
    assert first["cold_start"]["compile_cached"] is False
    assert second["cold_start"]["compile_cached"] is True
