"""PyTorch's side of a warm start: a loaded module's tensors as bytes for the model store, and a
module built on the meta device with the store's mapped tensors attached in place of its empty ones
(no random initialisation, no weights file read, no copy)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import torch

from mlscope.runtime.model_store import MappedModel
from mlscope.runtime.predictors.base import PredictorError

__all__ = ["attach_mapped", "module_tensors"]


def _unique_tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter and buffer once (a tied weight under its first name), non-persistent
    buffers included: a warm module has nothing else to take them from."""
    yield from model.named_parameters()
    yield from model.named_buffers()


def module_tensors(model: torch.nn.Module) -> tuple[list[tuple[str, str, tuple[int, ...], memoryview]], int]:
    """The module's tensors as (name, dtype, shape, bytes) on the host, and their total size.

    Raises:
        PredictorError: a tensor is of a kind the store cannot hold (sparse, quantised).
    """
    tensors = []
    total = 0
    for name, tensor in _unique_tensors(model):
        if tensor.layout != torch.strided or tensor.is_quantized:
            raise PredictorError(f"{name}: a {tensor.layout} tensor cannot be shared through the model store")
        host = tensor.detach().to("cpu").contiguous()
        raw = host.reshape(-1).view(torch.uint8).numpy()
        tensors.append((name, str(host.dtype).removeprefix("torch."), tuple(host.shape), raw.data))
        total += raw.nbytes
    return tensors, total


def _mapped_tensor(mapped: MappedModel, name: str) -> torch.Tensor:
    stored = mapped.tensors[name]
    dtype = getattr(torch, stored.dtype)
    if stored.nbytes == 0:
        return torch.empty(stored.shape, dtype=dtype)
    with warnings.catch_warnings():
        # The mapping is read-only on purpose: a write would fault instead of changing every
        # process's weights. Inference never writes a weight.
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        flat = torch.frombuffer(mapped.view(name), dtype=dtype)
    return flat.reshape(stored.shape)


def attach_mapped(model: torch.nn.Module, mapped: MappedModel) -> torch.nn.Module:
    """Put the store's tensors in place of a meta-device module's parameters and buffers.

    A tensor shared by several modules (tied weights) is replaced everywhere it is held.

    Raises:
        PredictorError: the store's entry and the module disagree (a name missing on either side).
    """
    replacements: dict[int, torch.Tensor] = {}
    names = dict(_unique_tensors(model))
    missing = sorted(set(names) - set(mapped.tensors))
    if missing:
        raise PredictorError(
            f"model store entry {mapped.key} lacks {', '.join(missing[:5])}: it was written for another "
            "module"
        )
    for name, old in names.items():
        new = _mapped_tensor(mapped, name)
        if tuple(new.shape) != tuple(old.shape):
            raise PredictorError(
                f"model store entry {mapped.key}: {name} is {tuple(new.shape)}, "
                f"the module's is {tuple(old.shape)}"
            )
        # One replacement per original tensor: a tied weight stays one Parameter, held by each module.
        replacements[id(old)] = (
            torch.nn.Parameter(new, requires_grad=False) if isinstance(old, torch.nn.Parameter) else new
        )
    for module in model.modules():
        for leaf, parameter in module._parameters.items():
            if parameter is not None and id(parameter) in replacements:
                module._parameters[leaf] = replacements[id(parameter)]  # type: ignore[assignment]
        for leaf, buffer in module._buffers.items():
            if buffer is not None and id(buffer) in replacements:
                module._buffers[leaf] = replacements[id(buffer)]
    left = [name for name, tensor in _unique_tensors(model) if tensor.is_meta]
    if left:
        raise PredictorError(f"model store entry {mapped.key}: {', '.join(left[:5])} stayed without weights")
    return model.eval()
