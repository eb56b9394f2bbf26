"""`mlscope bricks --device`: a device the bricks cannot run on is refused with exit code 2 and a
message naming it and what is available; on the CPU, PyTorch's bricks are timed by the host's clock
around the call, as before the GPU path; and cuDNN's benchmark-on bricks are keys of their own,
measured in a job of their own. (The GPU path itself needs a GPU: none here.)"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from mlscope.analysis.bricks import BrickPlan
from mlscope.analysis.bricks.fx import (
    cudnn_benchmark_plan,
    decompose_module,
    is_convolution,
    module_brick,
    plan_module_bricks,
)
from mlscope.cli import main
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.predictors.pytorch import bricks as runtime_bricks
from mlscope.services.bricks.pytorch import TorchBricks
from mlscope.workers.bricks import BrickJobReport
from tests.fixtures import torch_bricks

EXECUTION = {"threads": 1, "framework": "pytorch"}


def _no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.mark.parametrize(
    ("framework", "device", "says"),
    [
        ("pytorch", "cuda", ["'cuda' is not available", "sees no CUDA device", "available here: cpu"]),
        ("pytorch", "cuda:1", ["'cuda:1' is not available", "available here: cpu"]),
        ("pytorch", "tpu", ["'tpu' is not supported", "available here: cpu"]),
        ("onnxruntime", "cuda", ["'cuda'", "onnxruntime's bricks are measured on the CPU only", "cpu"]),
    ],
)
def test_a_device_the_bricks_cannot_run_on_exits_2_naming_it(
    framework: str,
    device: str,
    says: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a machine whose PyTorch sees no CUDA device
    _no_cuda(monkeypatch)
    # When bricks are asked of that device
    with pytest.raises(SystemExit) as ended:
        main(["bricks", str(tmp_path / "x.onnx"), "--framework", framework, "--device", device])
    # Then it is a user's mistake: exit 2, one message naming the device and what is available, no trace
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert all(part in err for part in says), err
    assert "Traceback" not in err


def test_the_cpu_is_always_a_device_pytorch_bricks_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_cuda(monkeypatch)
    assert runtime_bricks.device_refusal("cpu") is None
    assert runtime_bricks.device_refusal("cuda") is not None


def test_on_the_cpu_a_brick_run_is_timed_by_the_host_clock_around_the_call() -> None:
    # Given a Linear brick opened on the CPU, and a clock that counts its readings (+1000 ns each)
    plans = plan_module_bricks(
        decompose_module(torch_bricks.mlp_first(), (torch.randn(1, 256),)), execution=EXECUTION
    )
    plan = next(p for p in plans if isinstance(p, BrickPlan))
    graph = decompose_module(torch_bricks.mlp_first(), (torch.randn(1, 256),))
    brick = runtime_bricks._ModuleBrick(module_brick(plan, graph), torch.Generator().manual_seed(0))
    readings = iter(range(0, 10_000, 1000))
    calls: list[str] = []
    inner = brick.module.forward

    def forward(*args: Any) -> Any:
        calls.append("layer")
        return inner(*args)

    brick.module.forward = forward  # type: ignore[method-assign]
    # When it runs once
    latency = brick.run(lambda: next(readings))
    # Then there is no GPU timer, the layer ran once, and the latency is the two readings around
    # the call (the 2nd and 3rd: the 1st starts the untimed preparation) while the brick's own
    # time counts from the first reading to the last
    assert brick.gpu is None and calls == ["layer"]
    assert latency == 1000 and brick.own_ns == 2000
    assert next(readings) == 3000  # three readings a run, as before the GPU path


def test_a_cpu_job_leaves_the_cudnn_setting_as_it_was() -> None:
    # Given cuDNN's benchmark flag off, and a small conv net's bricks
    graph = decompose_module(torch_bricks.small_conv(), (torch.randn(1, 3, 16, 16),))
    plans = [p for p in plan_module_bricks(graph, execution=EXECUTION) if isinstance(p, BrickPlan)]
    specs = [module_brick(plan, graph) for plan in plans]
    settings = MeasureSettings(warmup_count=1, warmup_seconds=0.0, min_count=3, min_seconds=0.0,
                               max_seconds=0.2, stability=0.5, bootstrap_resamples=20)  # fmt: skip
    torch.backends.cudnn.benchmark = False
    # When they are measured on the CPU with the flag set for the job
    job = runtime_bricks.measure_module_bricks(specs, settings, threads=1, cudnn_benchmark=True)
    # Then every brick is measured and the flag is back as it was
    assert all(outcome.measurement is not None for outcome in job.outcomes)
    assert torch.backends.cudnn.benchmark is False


def test_a_convolution_has_a_benchmark_on_brick_of_its_own_key() -> None:
    # Given a small conv net's plans
    graph = decompose_module(torch_bricks.small_conv(), (torch.randn(1, 3, 16, 16),))
    plans = [p for p in plan_module_bricks(graph, execution=EXECUTION) if isinstance(p, BrickPlan)]
    convolutions = [plan for plan in plans if is_convolution(plan)]
    # Then its Conv2d layers are convolutions and no other layer is
    assert {plan.layer.op_type for plan in convolutions} == {"Conv2d"} and len(convolutions) < len(plans)
    # and a convolution's benchmark-on brick is the same layer under another key, which says why
    variant = cudnn_benchmark_plan(convolutions[0])
    assert variant.key != convolutions[0].key and variant.layer is convolutions[0].layer
    assert variant.document["execution"] == {**EXECUTION, "cudnn_benchmark": True}


def test_benchmark_on_bricks_are_measured_in_a_job_of_their_own() -> None:
    # Given PyTorch's bricks on a (pretended) GPU, whose runs record the jobs they are asked for
    jobs: list[tuple[list[str], bool]] = []

    def measure_modules(bricks: list[tuple[Any, ...]], cudnn_benchmark: bool = False) -> BrickJobReport:
        jobs.append(([key for key, *_ in bricks], cudnn_benchmark))
        return BrickJobReport(results={key: f"measured {cudnn_benchmark}" for key, *_ in bricks})

    bench = SimpleNamespace(device="cuda", threads=1, framework="pytorch",
                            runs=SimpleNamespace(measure_modules=measure_modules))  # fmt: skip
    kind = TorchBricks(bench)  # type: ignore[arg-type]
    graph = decompose_module(torch_bricks.small_conv(), (torch.randn(1, 3, 16, 16),))
    plans = [p for p in plan_module_bricks(graph, execution=kind.execution()) if isinstance(p, BrickPlan)]
    variants = kind.cudnn_variants(plans)
    # When the model's bricks and the convolution's benchmark-on brick are measured together
    asked = [(p.key, p.name, None, 1) for p in [*plans, *variants.values()]]
    report = kind.measure(asked)
    # Then the execution names the device, and two jobs ran: the bricks with the benchmark off, the
    # convolution's variant with it on
    assert kind.execution()["device"] == "cuda"
    assert jobs == [([p.key for p in plans], False), ([v.key for v in variants.values()], True)]
    assert set(report.results) == {p.key for p in plans} | {v.key for v in variants.values()}
    assert set(variants) == {p.key for p in plans if p.layer.op_type == "Conv2d"}


def test_on_the_cpu_a_pytorch_brick_key_does_not_name_a_device() -> None:
    # The CPU's brick keys stay those stored before --device existed: reused, not measured again
    kind = TorchBricks(SimpleNamespace(device="cpu", threads=1, framework="pytorch"))  # type: ignore[arg-type]
    assert kind.execution() == {"threads": 1, "framework": "pytorch", "method": "job-flush-eager"}


@pytest.mark.slow
def test_bricks_measured_apart_run_in_a_process_of_their_own() -> None:
    # Given a small conv net's bricks (what the benchmark-on job gets: modules with their weights)
    graph = decompose_module(torch_bricks.small_conv(), (torch.randn(1, 3, 16, 16),))
    plans = [p for p in plan_module_bricks(graph, execution=EXECUTION) if isinstance(p, BrickPlan)]
    specs = [module_brick(plan, graph) for plan in plans if is_convolution(plan)]
    settings = MeasureSettings(warmup_count=1, warmup_seconds=0.0, min_count=3, min_seconds=0.0,
                               max_seconds=0.2, stability=0.5, bootstrap_resamples=20)  # fmt: skip
    # When they are measured apart (a spawned process: its cuDNN cache starts empty), here on the CPU
    job = runtime_bricks.measure_module_bricks_apart(specs, settings, threads=1, cudnn_benchmark=True)
    # Then the specs and the outcomes crossed the process boundary: each brick measured, by name
    assert [outcome.name for outcome in job.outcomes] == list(dict.fromkeys(spec.name for spec in specs))
    assert all(o.measurement and o.measurement["latency_ms"]["count"] >= 3 for o in job.outcomes)
    assert job.framework_version == str(torch.__version__)
