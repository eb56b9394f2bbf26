"""PyTorch bricks measured in one job (DLBricks, arXiv 1911.07967): each brick a tiny eager module that
runs one layer of a traced model on random inputs of the shapes (and strides) it had there, all of a
model's bricks in one process with torch imported once, under `torch.inference_mode` and the thread
count of the whole-model run.

The timing is the ONNX Runtime brick job's (`mlscope.runtime.bricks.run_job`): the same untimed
preparation of every run (the core's private caches flushed, the inputs rewritten), the same stopping
rule per brick and the same validity verdict. Only opening a brick differs: a module and its input
tensors instead of a session and its bindings. Eager PyTorch allocates a layer's output in the model as
well, so the brick's output is allocated in its timed run too.

Imports nothing but the contract and the runtime: it runs where a predictor runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mlscope.runtime.bricks import BrickJob, run_job
from mlscope.runtime.measure.settings import MeasureSettings

__all__ = ["ModuleBrickSpec", "TensorSpec", "measure_module_bricks"]


@dataclass(frozen=True)
class TensorSpec:
    """One input of a brick as the layer saw it in its model: shape, stride (a transposed view stays
    one), and dtype (torch's name, "float32")."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class ModuleBrickSpec:
    """A brick to measure: its name, the module that runs its one layer (called with its inputs in
    order), those inputs, and the batch size it runs."""

    name: str
    module: torch.nn.Module
    inputs: tuple[TensorSpec, ...]
    batch_size: int = 1


def _tensor(spec: TensorSpec, generator: torch.Generator) -> torch.Tensor:
    dtype = getattr(torch, spec.dtype)
    if not spec.shape:
        size = 1
    else:  # the storage a view of these strides reaches into
        size = 1 + sum((extent - 1) * step for extent, step in zip(spec.shape, spec.stride, strict=True))
    if dtype.is_floating_point or dtype.is_complex:
        storage = torch.randn(max(size, 1), generator=generator).mul_(0.5).to(dtype)
    else:  # indices, masks: zeros are in range for every lookup
        storage = torch.zeros(max(size, 1), dtype=dtype)
    return storage.as_strided(spec.shape, spec.stride or ())


class _ModuleBrick:
    """A brick's module with its inputs made, its first run done, and its runs so far."""

    def __init__(self, spec: ModuleBrickSpec, generator: torch.Generator) -> None:
        self.spec = spec
        started = time.perf_counter()
        self.module = spec.module.eval()
        # (tensor the layer reads, the values it is rewritten with before each run)
        self.inputs = [(tensor, tensor.clone()) for tensor in (_tensor(s, generator) for s in spec.inputs)]
        self.load_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        with torch.inference_mode():
            self.module(*(tensor for tensor, _ in self.inputs))
        self.first_ms = (time.perf_counter() - started) * 1000
        self.latencies: list[int] = []
        self.own_ns = 0
        self.warmups = 0

    def run(self, clock: Callable[[], int], evict: np.ndarray | None = None) -> int:
        """One timed run, prepared untimed as `mlscope.runtime.bricks` prepares an ORT brick's: the
        private caches flushed by writing `evict`, then the inputs rewritten (an in-place layer, such
        as ReLU(inplace=True), changed them last run; and in the model the layer before just wrote
        them). Returns the run's latency, ns; what the brick cost the job is added to `own_ns`."""
        began = clock()
        if evict is not None:
            evict += 1
        for target, source in self.inputs:
            target.copy_(source)
        module, tensors = self.module, [tensor for tensor, _ in self.inputs]
        started = clock()
        with torch.inference_mode():
            module(*tensors)
        ended = clock()
        self.own_ns += ended - began
        return ended - started


def measure_module_bricks(
    specs: Sequence[ModuleBrickSpec],
    settings: MeasureSettings,
    *,
    threads: int | None = None,
    seed: int = 0,
    note: Callable[[str], None] = lambda line: None,
) -> BrickJob:
    """Measure every brick of `specs` in this process, one after the other, as
    `mlscope.runtime.bricks.measure_bricks` measures ONNX Runtime's (a name given k times: k modules
    timed in turn as one brick).

    Args:
        threads: torch's intra-op threads during the job (None: as they are); restored after.

    Returns:
        An outcome per brick, in the order first given; a brick whose module fails on its inputs is
        reported with its error, the others are measured.
    """
    generator = torch.Generator().manual_seed(seed)
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        seconds = {"import": 0.0}
        return run_job(
            specs,
            lambda spec: _ModuleBrick(spec, generator),
            settings,
            str(torch.__version__),
            seconds,
            note,
        )
    finally:
        torch.set_num_threads(before)
