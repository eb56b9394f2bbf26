"""`mlscope run --device cuda` end to end on the GPU: a real predictor process, the real SQLite store.
One evaluation of a model whose inference is the GPU's work (tests/fixtures/gpu.py's wide MLP),
traced to the HARDWARE level, gives every check here: NVML's energy counter over the measured
queries, the allocator's peak device memory, the LIBRARY pass's CUDA kernels, and the HARDWARE pass's
NVML samples. Figures are never asserted against fixed numbers: relations between independent
readings, and sizes derived from the model, are."""

from __future__ import annotations

import statistics
from typing import Any

import pytest
import torch

from mlscope.store import open_store
from tests.fixtures.gpu import WIDE_MLP, WIDE_MLP_WIDTH
from tests.fixtures.models import tiny_mlp
from tests.integration.test_run_cli import json_lines, mlscope

pytestmark = pytest.mark.slow

BATCH = 1024
MIB = 2**20
# The measured window's mean power (NVML's energy counter over the measured seconds) and the HARDWARE
# pass's median power sample (NVML's power reading, the same model back to back) agree within this
# factor: the two windows differ (warm-up, the counters' own averaging), a unit slip (mJ for J, mW
# for W) does not hide in it.
POWER_FACTOR = 3.0
# A GPU-bound run: measured long enough for NVML's energy counter to move, stable or not.
MEASURE = [
    "--min-seconds", "1", "--min-count", "20", "--max-seconds", "10", "--measure", "warmup_seconds=0.2",
    "--measure", "stability=0.99", "--measure", "contention_limit=1.0",
]  # fmt: skip


@pytest.fixture(scope="module")
def evaluation(gpu_env: dict[str, str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The result of the wide MLP on CUDA at batch BATCH, traced at HARDWARE, and its spans."""
    done = mlscope(
        gpu_env,
        "run", WIDE_MLP, "-f", "pytorch", "--device", "cuda", "-b", str(BATCH),
        "--trace-level", "HARDWARE", "--json", *MEASURE,
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr[-3000:]
    (result,) = json_lines(done.stdout)
    assert result["status"] == "succeeded" and result["device"] == "cuda", result.get("error")
    with open_store(gpu_env["MLSCOPE_STORE_URL"]) as store:
        spans = store.get_spans(result["id"], limit=200_000)
    return result, spans


def weights_bytes() -> int:
    """The wide MLP's weights, counted on the CPU from the model itself."""
    return sum(p.numel() * p.element_size() for p in tiny_mlp(WIDE_MLP_WIDTH).parameters())


def gpu_samples(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        s["attributes"] for s in spans if s["level"] == "HARDWARE" and s["attributes"].get("kind") == "gpu"
    ]


def test_nvml_energy_of_the_measured_queries_is_positive_and_matches_the_power_readings(
    evaluation: tuple[dict[str, Any], list[dict[str, Any]]], record_property: Any
) -> None:
    result, spans = evaluation
    (measurement,) = result["measurements"]
    energy = measurement["energy"]
    # Then the energy comes from NVML's counter and is positive, per inference too
    assert energy.get("source") == "nvml", energy
    assert energy["joules"] > 0 and energy["joules_per_inference"] > 0, energy
    assert energy["joules_per_inference"] == pytest.approx(energy["joules"] / energy["samples"], rel=1e-3)
    # And its mean power over the measured seconds is NVML's power reading of the same load
    mean_w = energy["joules"] / measurement["duration_s"]
    powers = [s["power_w"] for s in gpu_samples(spans) if s.get("power_w") is not None]
    assert powers, "the HARDWARE pass read no GPU power"
    sampled_w = statistics.median(powers)
    assert sampled_w / POWER_FACTOR <= mean_w <= sampled_w * POWER_FACTOR, (mean_w, sampled_w)
    record_property(
        "figure",
        f"{energy['joules']:.1f} J over {measurement['duration_s']:.2f} s ({mean_w:.0f} W); "
        f"NVML power samples median {sampled_w:.0f} W",
    )


def test_peak_device_memory_holds_the_weights_and_a_batch_of_hidden_activations(
    evaluation: tuple[dict[str, Any], list[dict[str, Any]]], record_property: Any
) -> None:
    result, spans = evaluation
    peak_mb = result["memory"]["peak_device_mb"]
    # Then the allocator's peak holds the weights and the hidden layer's output for one batch
    weights_mb = weights_bytes() / MIB
    hidden_mb = BATCH * WIDE_MLP_WIDTH * torch.finfo(torch.float32).bits / 8 / MIB
    assert peak_mb >= weights_mb + hidden_mb, (peak_mb, weights_mb, hidden_mb)
    # And NVML saw at least that much memory in use on the device while the model ran
    used = [s["memory_used_mb"] for s in gpu_samples(spans) if s.get("memory_used_mb") is not None]
    assert used and max(used) >= peak_mb, (used, peak_mb)
    record_property(
        "figure",
        f"peak {peak_mb:.0f} MiB >= weights {weights_mb:.1f} + activations {hidden_mb:.0f} MiB; "
        f"NVML used {max(used):.0f} MiB",
    )


def test_the_library_pass_records_the_cuda_kernels_of_each_inference(
    evaluation: tuple[dict[str, Any], list[dict[str, Any]]], record_property: Any
) -> None:
    result, spans = evaluation
    assert result["trace_level"] == "HARDWARE"
    inferences = [s for s in spans if s["name"] == "inference" and s["attributes"].get("pass") == "LIBRARY"]
    kernels = [s for s in spans if s["level"] == "LIBRARY" and s["attributes"].get("kind") == "kernel"]
    launches = [s for s in spans if s["level"] == "LIBRARY" and s["attributes"].get("kind") == "runtime"]
    # Then the pass traced its inferences, and each ran at least its two matrix products and ReLU
    # as kernels on the GPU, each named, on device 0, with a launch on the host
    assert inferences, "no LIBRARY inference spans"
    assert len(kernels) >= 3 * len(inferences), (len(kernels), len(inferences))
    assert all(k["name"] and k["end_ns"] >= k["start_ns"] for k in kernels)
    assert {k["attributes"].get("device") for k in kernels} == {0}
    correlations = {s["attributes"].get("correlation") for s in launches}
    assert all(k["attributes"].get("correlation") in correlations for k in kernels)
    # And each kernel hangs under the aten operator that launched it, in a layer of the model
    operators = {k["attributes"].get("operator") for k in kernels}
    assert None not in operators and all(name.startswith("aten::") for name in operators), operators
    assert {k["attributes"].get("layer") for k in kernels} >= {"0", "2"}
    names = sorted({k["name"] for k in kernels})
    record_property("figure", f"{len(kernels)} kernels in {len(inferences)} inferences; {len(names)} names")


def test_the_hardware_pass_samples_the_gpu_through_nvml(
    evaluation: tuple[dict[str, Any], list[dict[str, Any]]], record_property: Any
) -> None:
    _, spans = evaluation
    samples = gpu_samples(spans)
    # Then the GPU was sampled through the pass with its utilisation, memory, power and clocks
    assert len(samples) >= 2, samples
    assert {s["gpu_index"] for s in samples} == {0}
    for key in ("utilization_gpu", "memory_used_mb", "memory_total_mb", "power_w", "sm_clock_mhz"):
        assert all(s.get(key) is not None for s in samples), (key, samples[0])
    # And the model kept the GPU busy: some sample saw it working, none above the total memory
    assert max(s["utilization_gpu"] for s in samples) > 0
    assert all(s["memory_used_mb"] <= s["memory_total_mb"] for s in samples)
    busiest = max(s["utilization_gpu"] for s in samples)
    record_property("figure", f"{len(samples)} samples; utilisation up to {busiest}%")
