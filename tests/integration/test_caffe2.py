"""Caffe2 (through PyTorch 1.10.2, Python 3.9) end to end: the real predictor runs ResNet-18 in a
Python 3.9 environment through the process runner, and agrees with PyTorch 1.10.2 in that same
environment on the same seeded weights and input.

The environment is made once per machine in ${XDG_CACHE_HOME:-~/.cache}/mlscope-test-envs, named by
a hash of the Caffe2 and runtime pins and the Python version, from `ops/images/caffe2.requirements.txt`
+ `ops/images/runtime.requirements.txt` + this checkout (editable, no dependencies); a later run
reuses it. No Python 3.9 here, or an environment that cannot be made: skipped locally, failed in CI.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.workers.envs import EnvBuildError, EnvInfo, create_env
from tests.conftest import REPO
from tests.integration.conftest import _unavailable

pytestmark = pytest.mark.slow

PINS = REPO / "ops" / "images" / "caffe2.requirements.txt"
RUNTIME_PINS = REPO / "ops" / "images" / "runtime.requirements.txt"
_READY = "mlscope-test-env.json"


def _test_envs_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mlscope-test-envs"


@pytest.fixture(scope="session")
def caffe2_env() -> EnvInfo:
    """The Caffe2 environment of the current pins, made by `mlscope env create caffe2`'s code on first
    use (the pins ask for Python 3.9) and reused afterwards."""
    try:
        info, _ = create_env("caffe2", _test_envs_cache())
    except (UserError, EnvBuildError) as exc:
        _unavailable(f"the Caffe2 environment cannot be made here: {exc}")
        raise
    return info


@pytest.fixture(scope="module")
def caffe2_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache shared by this module's tests, so ResNet-18 is converted to Caffe2 nets once."""
    return tmp_path_factory.mktemp("caffe2-cache")


def _pinned(name: str) -> str:
    for line in PINS.read_text().splitlines():
        if line.lower().startswith(f"{name}=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"{name} is not pinned in {PINS.name}")


def _run_job(python: Path, cache: Path, *, device: str = "cpu", trace_level: str = "NO_TRACE") -> Any:
    from mlscope.contract.job import Job
    from mlscope.registry.models import ModelRegistry
    from mlscope.workers.runners.process import ProcessRunner

    manifest = ModelRegistry.load().get("resnet18", "caffe2")
    job = Job(
        evaluation_id="caffe2-test",
        manifest=manifest.to_dict(),
        origin=manifest.origin,
        framework="caffe2",
        device=device,
        batch_sizes=(1,),
        scenarios=("single_stream",),
        measure={
            "min_seconds": 0.2,
            "min_count": 5,
            "max_seconds": 5,
            "warmup_seconds": 0.05,
            "trace_iterations": 2,
            "trace_warmup": 1,
        },
        cache_dir=str(cache),
        trace_level=trace_level,
    )
    return ProcessRunner(python=str(python)).run(job, lambda event: None, timeout_s=600)


# Runs in the Caffe2 environment: the predictor on the nets the run cached, and PyTorch 1.10 on the
# same seeded model and input, so both see the very same weights.
_AGREEMENT_PROBE = """
import json, sys
from pathlib import Path
from typing import Any
import numpy as np, torch
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.predictors import PredictorOptions
from mlscope.runtime.predictors.caffe2.predictor import Caffe2Predictor, build_torchvision_model, nets_dir
from mlscope.runtime.predictors.inputs import synthetic_batches

manifest = ModelRegistry.load().get("resnet18", "caffe2")
cache = Path(sys.argv[1])
predictor = Caffe2Predictor(manifest=manifest, options=PredictorOptions(seed=0), cache_dir=cache)
predictor.load()
arrays = synthetic_batches(manifest, 2, 1, seed=0)[0]
caffe2_logits = predictor.outputs_to_numpy(predictor.predict(predictor.prepare(arrays)))["logits"]
with torch.no_grad():
    torch_logits = build_torchvision_model(manifest, seed=0)(torch.from_numpy(arrays["input"])).numpy()
print(json.dumps({
    "cached": predictor.describe()["conversion"]["cached"],
    "nets_dir_exists": nets_dir(manifest, cache, 0).is_dir(),
    "shape": list(caffe2_logits.shape),
    "finite": bool(np.isfinite(caffe2_logits).all()),
    "top1_caffe2": caffe2_logits.argmax(axis=1).tolist(),
    "top1_torch": torch_logits.argmax(axis=1).tolist(),
    "max_abs_diff": float(np.abs(caffe2_logits - torch_logits).max()),
    "logit_scale": float(np.abs(torch_logits).max()),
    "torch": torch.__version__,
}))
"""


def test_the_environment_holds_the_pinned_stack_on_python_39_and_is_reused(caffe2_env: EnvInfo) -> None:
    # Given the environment the fixture made or found
    probe = (
        "import importlib.metadata as m, platform; from caffe2.python import workspace; "
        "print(platform.python_version(), m.version('torch'), m.version('onnx'), m.version('numpy'))"
    )
    done = subprocess.run([str(caffe2_env.python), "-c", probe], capture_output=True, text=True, check=True)
    # Then it is Python 3.9 with the pinned torch, onnx and numpy, and Caffe2 imports
    python_version, *versions = done.stdout.split()
    assert python_version.startswith("3.9.") and caffe2_env.python_version.startswith("3.9.")
    assert versions == [_pinned("torch"), _pinned("onnx"), _pinned("numpy")]
    assert caffe2_env.version.split("+")[0] == _pinned("torch")
    # When it is asked for again, Then the same one is reused, not made again
    again, made = create_env("caffe2", _test_envs_cache())
    assert not made and again.python == caffe2_env.python


def test_resnet18_runs_on_caffe2_through_the_process_runner_with_operator_averages(
    caffe2_env: EnvInfo, caffe2_cache: Path
) -> None:
    # Given ResNet-18's Caffe2 manifest and a Python 3.9 environment with torch 1.10.2
    # When the process runner runs it there at batch 1, traced down to operators
    outcome = _run_job(caffe2_env.python, caffe2_cache, trace_level="LIBRARY")
    # Then it succeeds on the pinned torch's Caffe2, on the CPU, with finite latencies
    assert outcome.error is None, f"{outcome.error}\n{outcome.log}"
    result = outcome.result
    framework = result["framework"]
    assert framework["name"] == "caffe2" and framework["device"] == "cpu"
    assert framework["version"].split("+")[0] == _pinned("torch")
    conversion = framework["conversion"]
    assert conversion["opset"] == 9 and conversion["cached"] is True
    assert conversion["global_pool_renamed"] == 1  # ResNet's one GlobalAveragePool
    assert conversion["init_ops"]["kept"] < conversion["init_ops"]["converted"]
    (measurement,) = result["measurements"]
    latency = measurement["latency_ms"]
    assert latency["count"] >= 5 and 0 < latency["min"] <= latency["median"] <= latency["max"]
    assert all(math.isfinite(latency[key]) for key in ("min", "median", "max"))
    # And the LIBRARY pass is one average inference whose operators say they are averages
    spans = result["trace"]["spans"]
    operators = [s for s in spans if s["level"] == "LIBRARY"]
    (inference,) = [s for s in spans if s["name"] == "inference" and s["attributes"].get("pass") == "LIBRARY"]
    assert inference["attributes"]["timing"] == "average" and inference["attributes"]["averaged_over"] == 2
    assert len(operators) == conversion["predict_ops"]
    assert sum(s["name"] == "Conv" for s in operators) == 20  # ResNet-18: 20 convolutions
    for span in operators:
        assert span["parent_id"] == inference["span_id"]
        assert span["attributes"]["timing"] == "average" and span["attributes"]["synthetic_timestamps"]
        assert inference["start_ns"] <= span["start_ns"] <= span["end_ns"] <= inference["end_ns"]


def test_caffe2_gives_the_logits_of_pytorch_110_on_the_same_weights(
    caffe2_env: EnvInfo, caffe2_cache: Path
) -> None:
    # Given the nets converted and cached by a run (made here if that test did not run first)
    if not any((caffe2_cache / "caffe2").glob("*")):
        assert _run_job(caffe2_env.python, caffe2_cache).error is None
    # When the predictor and PyTorch 1.10 run the same seeded ResNet-18 on the same batch of 2
    done = subprocess.run(
        [str(caffe2_env.python), "-c", _AGREEMENT_PROBE, str(caffe2_cache)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    # Then the predictor read the cached nets, and its logits are finite and PyTorch's
    assert facts["cached"] is True and facts["nets_dir_exists"] is True
    assert facts["torch"].split("+")[0] == _pinned("torch")
    assert facts["shape"] == [2, 1000] and facts["finite"] is True
    assert facts["top1_caffe2"] == facts["top1_torch"]
    assert facts["max_abs_diff"] <= 1e-4 * max(1.0, facts["logit_scale"])


def test_a_gpu_device_is_refused_naming_what_the_build_can_do(
    caffe2_env: EnvInfo, caffe2_cache: Path
) -> None:
    # Given the Caffe2 environment (no GPU is needed: the request is refused before any device use)
    # When a run asks for cuda:0
    outcome = _run_job(caffe2_env.python, caffe2_cache, device="cuda:0")
    # Then it fails in its load phase, saying that Caffe2 nets run on the CPU only and what the build is
    assert outcome.result is None and outcome.error is not None
    assert outcome.error["type"] == "PredictorError" and outcome.error["phase"] == "load"
    assert "CPU only" in outcome.error["message"] and "CUDA 10.2 build" in outcome.error["message"]
