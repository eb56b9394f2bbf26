"""TensorRT, the framework that runs on an NVIDIA GPU only, where there is none: `mlscope run -f
tensorrt` refused in one line naming the missing GPU before asking whether TensorRT is installed
(exit 2, nothing stored), a CPU device refused on a machine that has one, and `mlscope frameworks`
saying why it cannot run. NVML's answer is replaced where a test needs a machine other than the one
it runs on. tests/gpu/test_tensorrt.py runs TensorRT on a GPU."""

from __future__ import annotations

import json
from typing import Any

import pytest

import mlscope.runtime.system
import mlscope.workers.admission
from mlscope.cli import main
from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings
from mlscope.runtime.frameworks import get_framework, installed_version
from mlscope.workers.local import admit_all
from tests.unit.test_compile_options import refused_run

ONE_GPU = [{"index": 0, "name": "a GPU", "uuid": "GPU-0", "memory_bytes": 1 << 34}]


def _machine(monkeypatch: pytest.MonkeyPatch, gpus: list[dict[str, Any]]) -> None:
    """NVML sees `gpus` (admission's and the frameworks list's view of the machine)."""
    monkeypatch.setattr(mlscope.workers.admission, "gpu_facts", lambda: gpus)
    monkeypatch.setattr(mlscope.runtime.system, "gpu_facts", lambda: gpus)


@pytest.mark.parametrize("device", [[], ["--device", "cuda"]])
def test_a_run_on_a_machine_without_a_gpu_is_refused_naming_it(
    mlscope_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    device: list[str],
) -> None:
    # Given a machine without an NVIDIA GPU
    _machine(monkeypatch, [])
    # When TensorRT is asked for, on the CPU or a CUDA device
    err = refused_run(mlscope_env, capsys, ["-f", "tensorrt", *device])
    # Then it is refused in one line naming the missing GPU, not the missing package
    assert "TensorRT runs on an NVIDIA GPU only, and this machine has none" in err, err
    assert "install" not in err


def test_on_a_machine_with_a_gpu_the_cpu_is_refused_and_then_the_package_is_asked_for(
    mlscope_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a machine NVML says has a GPU
    _machine(monkeypatch, ONE_GPU)
    settings = load_settings()
    # When TensorRT is asked for on the CPU, Then the device is refused, naming the one to use
    with pytest.raises(UserError) as refused:
        admit_all("resnet18", ["tensorrt"], {}, settings=settings)
    assert refused.value.field == "device" and "use --device cuda" in refused.value.message
    # And on the GPU, the next thing asked is whether TensorRT is installed (it is not, here)
    assert installed_version(get_framework("tensorrt")) is None
    with pytest.raises(UserError) as missing:
        admit_all("resnet18", ["tensorrt"], {"device": "cuda"}, settings=settings)
    assert missing.value.field == "framework" and "pip install tensorrt" in missing.value.message


def test_mlscope_frameworks_says_it_needs_a_gpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a machine without an NVIDIA GPU, When the frameworks are listed
    _machine(monkeypatch, [])
    main(["frameworks", "--json"])
    rows = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    # Then TensorRT is there, cannot run, and says it is the GPU that is missing
    row = rows["tensorrt"]
    assert row["display"] == "TensorRT" and row["available"] is False
    assert row["reason"] == "needs an NVIDIA GPU; this machine has none that NVML can see"
    assert "onnx" in row["sources"] and row["options"] == []
    # And a CPU framework is unaffected
    assert rows["onnxruntime"]["available"] is True and rows["onnxruntime"]["reason"] is None


def test_it_runs_only_when_named() -> None:
    # Given TensorRT's registration, Then it is no default framework and needs the GPU
    spec = get_framework("tensorrt")
    assert spec.needs_gpu and not spec.by_default and spec.unavailable is None
