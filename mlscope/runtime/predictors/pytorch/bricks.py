"""PyTorch bricks measured in one job (DLBricks, arXiv 1911.07967): each brick a tiny eager module that
runs one layer of a traced model on random inputs of the shapes (and strides) it had there, all of a
model's bricks in one process with torch imported once, under `torch.inference_mode` and the thread
count of the whole-model run.

The timing is the ONNX Runtime brick job's (`mlscope.runtime.bricks.run_job`): the same untimed
preparation of every run (the core's private caches flushed, the inputs rewritten), the same stopping
rule per brick and the same validity verdict. Only opening a brick differs: a module and its input
tensors instead of a session and its bindings. Eager PyTorch allocates a layer's output in the model as
well, so the brick's output is allocated in its timed run too.

On a GPU (`device="cuda"`), a brick's module and inputs live on the device, each run is timed by the
GPU's own clock (CUDA events around the call, waited for: the predictor's `CudaEventTimer`), and the
untimed preparation also flushes the GPU's L2 cache (a device buffer twice its size written, shared by
the job's bricks). On the CPU nothing of this applies and the host's clock times the call, as before.

cuDNN's algorithm choice (Benanza's "cuDNN gap"): with `torch.backends.cudnn.benchmark` off, cuDNN
picks a convolution's algorithm by heuristics; on, it times the candidates at the first call of each
shape and keeps the fastest. PyTorch caches the choice per process (per thread in its cuDNN v8 path)
under a key that does not include the flag, so a convolution timed with benchmark off leaves the
heuristic's choice cached and a later benchmark-on run of the same shapes reuses it without
benchmarking (and the other way round). `measure_module_bricks_apart` therefore measures bricks in a
process of their own (spawned: a fresh cache), which is how the benchmark-on measurements are taken.

Imports nothing but the contract and the runtime: it runs where a predictor runs.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from mlscope.runtime.bricks import BrickJob, run_job
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.predictors.pytorch.predictor import CudaEventTimer

__all__ = [
    "ModuleBrickSpec",
    "TensorMeta",
    "device_refusal",
    "measure_module_bricks",
    "measure_module_bricks_apart",
]


@dataclass(frozen=True)
class TensorMeta:
    """A tensor's metadata without its values, as a layer saw it in its model (a brick's input):
    shape, stride (a transposed view stays one), and dtype (torch's name, "float32"). A manifest's
    input is the contract's `TensorSpec`."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class ModuleBrickSpec:
    """A brick to measure: its name, the module that runs its one layer (called with its inputs in
    order), those inputs, and the batch size it runs."""

    name: str
    module: torch.nn.Module
    inputs: tuple[TensorMeta, ...]
    batch_size: int = 1


def device_refusal(device: str) -> str | None:
    """Why PyTorch's bricks cannot be measured on `device` here (naming it and what is available), or
    None when they can: the CPU always, a CUDA device when this PyTorch sees it."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        parsed = None
    cuda = torch.cuda.is_available()
    available = "cpu" + (f" and cuda (0..{torch.cuda.device_count() - 1})" if cuda else "")
    if parsed is not None and parsed.type == "cpu":
        return None
    if parsed is None or parsed.type != "cuda":
        return f"device {device!r} is not supported for PyTorch bricks; available here: {available}"
    if not cuda:
        return (
            f"device {device!r} is not available: this PyTorch ({torch.__version__}) sees no CUDA "
            f"device; available here: {available}"
        )
    if (parsed.index or 0) >= torch.cuda.device_count():
        return (
            f"device {device!r} is not available: {torch.cuda.device_count()} CUDA device(s); "
            f"available here: {available}"
        )
    return None


def _tensor(
    spec: TensorMeta, generator: torch.Generator, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The input (a view of `spec`'s strides) and the storage it views, as a flat tensor."""
    dtype = getattr(torch, spec.dtype)
    if not spec.shape:
        size = 1
    else:  # the storage a view of these strides reaches into
        size = 1 + sum((extent - 1) * step for extent, step in zip(spec.shape, spec.stride, strict=True))
    if dtype.is_floating_point or dtype.is_complex:
        storage = torch.randn(max(size, 1), generator=generator).mul_(0.5).to(dtype)
    else:  # indices, masks: zeros are in range for every lookup
        storage = torch.zeros(max(size, 1), dtype=dtype)
    # The storage moved whole, then viewed: the layer's strides kept on any device (the CPU: no copy).
    storage = storage.to(device)
    return storage.as_strided(spec.shape, spec.stride or ()), storage


_CPU = torch.device("cpu")


class _ModuleBrick:
    """A brick's module with its inputs made (on `device`), its first run done, and its runs so far.

    `gpu`: on a CUDA device, the job's GPU timer and the device buffer that flushes the GPU's L2
    cache; None on the CPU."""

    def __init__(
        self,
        spec: ModuleBrickSpec,
        generator: torch.Generator,
        device: torch.device = _CPU,
        gpu: tuple[CudaEventTimer, torch.Tensor] | None = None,
    ) -> None:
        self.spec = spec
        self.gpu = gpu
        started = time.perf_counter()
        self.module = spec.module.eval().to(device)
        # (tensor the layer reads, its storage, the values that is rewritten with before each run):
        # the storage is, since a tensor of a stride 0 (an expand) cannot be written through.
        self.inputs = [
            (tensor, storage, storage.clone())
            for tensor, storage in (_tensor(s, generator, device) for s in spec.inputs)
        ]
        self.load_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        with torch.inference_mode():
            self.module(*(tensor for tensor, _, _ in self.inputs))
        if gpu is not None:
            torch.cuda.synchronize(device)
        self.first_ms = (time.perf_counter() - started) * 1000
        self.latencies: list[int] = []
        self.own_ns = 0
        self.warmups = 0

    def run(self, clock: Callable[[], int], evict: np.ndarray | None = None) -> int:
        """One timed run, prepared untimed as `mlscope.runtime.bricks` prepares an ORT brick's: the
        private caches flushed by writing `evict` (and, on a GPU, its L2 by writing the device
        buffer; neither for a hot run, `evict` None), then the inputs rewritten (an in-place layer,
        such as ReLU(inplace=True), changed them last run; and in the model the layer before just
        wrote them). Returns the run's latency, ns; what the brick cost the job is added to
        `own_ns`."""
        began = clock()
        if evict is not None:
            evict += 1
        for _, target, source in self.inputs:
            target.copy_(source)
        module, tensors = self.module, [tensor for tensor, _, _ in self.inputs]
        if self.gpu is None:  # the CPU: the layer runs within the call, the host's clock times it
            started = clock()
            with torch.inference_mode():
                module(*tensors)
            ended = clock()
            latency = ended - started
        else:  # a GPU: the call only queues the layer; two CUDA events on its stream time it
            timer, l2_flush = self.gpu
            if evict is not None:  # queued before the start event: done, and untimed, when it starts
                l2_flush += 1
            latency = timer.time(_call_inference, (module, tensors))
            ended = clock()
        self.own_ns += ended - began
        return latency


def _call_inference(batch: tuple[torch.nn.Module, list[torch.Tensor]]) -> None:
    module, tensors = batch
    with torch.inference_mode():
        module(*tensors)


def _gpu(device: torch.device) -> tuple[CudaEventTimer, torch.Tensor] | None:
    """On a CUDA device, the job's event timer and a float32 buffer twice its L2 cache's size."""
    if device.type != "cuda":
        return None
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    return CudaEventTimer(device), torch.zeros(max(2 * l2_bytes // 4, 1), device=device)


def measure_module_bricks(
    specs: Sequence[ModuleBrickSpec],
    settings: MeasureSettings,
    *,
    threads: int | None = None,
    seed: int = 0,
    note: Callable[[str], None] = lambda line: None,
    device: str = "cpu",
    cudnn_benchmark: bool | None = None,
) -> BrickJob:
    """Measure every brick of `specs` in this process, one after the other, as
    `mlscope.runtime.bricks.measure_bricks` measures ONNX Runtime's (a name given k times: k modules
    timed in turn as one brick).

    Args:
        threads: torch's intra-op threads during the job (None: as they are); restored after.
        device: where the bricks run ("cpu", "cuda", "cuda:1"); the caller checks it first
            (`device_refusal`).
        cudnn_benchmark: `torch.backends.cudnn.benchmark` during the job (None: as it is); restored
            after. In this process cuDNN's algorithm cache may hold choices made under the other
            setting: see the module docstring, and `measure_module_bricks_apart`.

    Returns:
        An outcome per brick, in the order first given; a brick whose module fails on its inputs is
        reported with its error, the others are measured.
    """
    generator = torch.Generator().manual_seed(seed)
    place = torch.device(device)
    gpu = _gpu(place)
    before = torch.get_num_threads(), torch.backends.cudnn.benchmark
    if threads:
        torch.set_num_threads(threads)
    if cudnn_benchmark is not None:
        torch.backends.cudnn.benchmark = cudnn_benchmark
    try:
        seconds = {"import": 0.0}
        return run_job(
            specs,
            lambda spec: _ModuleBrick(spec, generator, place, gpu),
            settings,
            str(torch.__version__),
            seconds,
            note,
        )
    finally:
        torch.set_num_threads(before[0])
        torch.backends.cudnn.benchmark = before[1]


def measure_module_bricks_apart(
    specs: Sequence[ModuleBrickSpec],
    settings: MeasureSettings,
    *,
    threads: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    cudnn_benchmark: bool | None = None,
) -> BrickJob:
    """`measure_module_bricks` in a process of its own (spawned, so torch and cuDNN start afresh: no
    algorithm chosen under another `cudnn_benchmark` setting is reused), waited for. The specs and
    the job's outcome cross the process boundary pickled."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        job = pool.submit(
            measure_module_bricks,
            specs,
            settings,
            threads=threads,
            seed=seed,
            device=device,
            cudnn_benchmark=cudnn_benchmark,
        )
        return job.result()
