"""A PyTorch model run otherwise than as loaded (`options.compile`, `precision`, `quantize`;
docs/frameworks.md): the module as built is cast to the precision asked for or quantised, then
wrapped by torch.compile; inputs follow the precision. The module as built is kept for the model
store, which holds weights as the manifest and the seed make them.
"""

from __future__ import annotations

import importlib.util
import shutil
from typing import cast

import torch

from mlscope.contract.options import PredictorOptions
from mlscope.runtime.predictors.base import PredictorError

__all__ = ["check_compiler", "compiled_frames", "fxgraph_cache_hit", "input_dtype", "variant_module"]

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def input_dtype(options: PredictorOptions) -> torch.dtype | None:
    """The dtype float inputs are cast to, or None to leave them as made."""
    return None if options.precision in (None, "fp32") else _DTYPES[options.precision]


def variant_module(
    module: torch.nn.Module, options: PredictorOptions, device: torch.device
) -> torch.nn.Module:
    """`module` (as built, on `device`) as the options ask it to run: cast to a reduced precision or
    dynamically quantised to int8, then wrapped by torch.compile (which compiles on its first call).

    Raises:
        PredictorError: int8 asked for on a GPU, or of a model with no Linear layer to quantise.
    """
    dtype = input_dtype(options)
    if dtype is not None:
        module = module.to(dtype)
    if options.quantize == "int8":
        module = _quantised(module, device)
    mode = options.compile_mode
    if mode is not None:
        module = cast(torch.nn.Module, torch.compile(module, mode=mode))
    return module


def _quantised(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """Dynamic int8 quantisation of the Linear layers (weights int8 now, activations per batch): what
    torch.ao offers for a model without calibration data, on the CPU only."""
    if device.type != "cpu":
        raise PredictorError(
            f"options.quantize: PyTorch's dynamic int8 quantisation runs on the CPU, not {device}"
        )
    if not any(isinstance(layer, torch.nn.Linear) for layer in module.modules()):
        raise PredictorError(
            "options.quantize: the model has no Linear layer, the only kind dynamic int8 quantisation "
            "converts; it would run unchanged"
        )
    return torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8)


def check_compiler(device: torch.device) -> None:
    """What inductor needs to compile for `device` is here: a C++ compiler for the CPU, Triton for a
    GPU.

    Raises:
        PredictorError: naming what is missing.
    """
    if device.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            raise PredictorError("options.compile: torch.compile on a GPU needs Triton; it is not installed")
        return
    if not any(shutil.which(name) for name in ("g++", "c++", "clang++")):
        raise PredictorError(
            "options.compile: torch.compile for the CPU needs a C++ compiler (g++ or clang++) on PATH; "
            "none was found (install one, or drop the option)"
        )


def compiled_frames() -> int:
    """Frames dynamo compiled in this process (each compile and recompile counts)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


def fxgraph_cache_hit() -> bool:
    """Whether inductor took a graph from its on-disk cache (an earlier process compiled it)."""
    from torch._dynamo.utils import counters

    return bool(counters["inductor"]["fxgraph_cache_hit"])
