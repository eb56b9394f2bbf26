"""Opening a CUDA device initialises CUDA before it resets the caching allocator's peak: in a process
whose first CUDA call that reset is, PyTorch fails with "Invalid device argument" (seen on the GPU
check's machine, docs/gpu.md). No GPU here: torch.cuda's calls are stood in for by recording ones
that fail as PyTorch's do when CUDA is not yet initialised; tests/gpu runs the real ones."""

from __future__ import annotations

import pytest
import torch

from mlscope.registry.catalogue import Catalogue
from mlscope.runtime.predictors.pytorch.predictor import PyTorchPredictor


def test_the_allocators_peak_is_reset_only_once_cuda_is_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a machine whose one CUDA device no CUDA call of this process has touched yet
    calls: list[str] = []

    def reset_peak_memory_stats(device: torch.device) -> None:
        if "init" not in calls:
            raise RuntimeError("Invalid device argument")
        calls.append(f"reset {device}")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "init", lambda: calls.append("init"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset_peak_memory_stats)
    predictor = PyTorchPredictor(
        manifest=Catalogue.load().manifest("torchvision:resnet18", "pytorch"), device="cuda:0"
    )
    # When the predictor opens its device
    device = predictor._open_device()
    # Then CUDA was initialised first, and the peak reset on that device
    assert device == torch.device("cuda:0")
    assert calls == ["init", "reset cuda:0"]
