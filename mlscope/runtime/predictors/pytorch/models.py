"""Build a PyTorch module from a manifest's source: torchvision, timm, transformers, or a factory.

Shared by the PyTorch predictor and the ONNX exporter, so both run the very same graph with the
very same (seeded) random weights.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import torch

from mlscope.contract.manifest import Manifest
from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.files import local_file

__all__ = ["build_module", "torchvision_kwargs"]


class _SelectOutput(torch.nn.Module):
    """Calls a transformers model with named inputs and returns one named output as a tensor."""

    def __init__(self, model: torch.nn.Module, input_names: tuple[str, ...], output: str) -> None:
        super().__init__()
        self.model = model
        self.input_names = input_names
        self.output = output

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        result = self.model(**dict(zip(self.input_names, inputs, strict=True)))
        return getattr(result, self.output)


def torchvision_kwargs(name: str) -> dict[str, Any]:
    """What torchvision's builder `name` is called with for random weights and no download.

    `weights=None` alone is not enough for segmentation and detection builders: their backbone
    defaults to ImageNet weights (`weights_backbone`), which torchvision would download and load.

    Raises:
        PredictorError: torchvision has no builder of that name.
    """
    import torchvision

    try:
        builder = torchvision.models.get_model_builder(name)
    except ValueError as exc:
        raise PredictorError(f"torchvision has no model {name!r}") from exc
    kwargs: dict[str, Any] = {"weights": None}
    if "weights_backbone" in inspect.signature(builder).parameters:
        kwargs["weights_backbone"] = None
    return kwargs


def _from_torchvision(name: str) -> torch.nn.Module:
    import torchvision

    return torchvision.models.get_model(name, **torchvision_kwargs(name))


def _from_timm(name: str) -> torch.nn.Module:
    """timm's model `name` with random weights: `pretrained=False` downloads nothing, and only a name
    timm registers is built (a hub reference, "hf-hub:...", would be fetched; the manifest's schema
    refuses those too).

    Raises:
        PredictorError: timm has no model of that name.
    """
    import timm

    if not timm.is_model(name):
        raise PredictorError(f"timm {timm.__version__} has no model {name!r}")
    return timm.create_model(name, pretrained=False)


def _from_transformers(manifest: Manifest) -> torch.nn.Module:
    import transformers

    options = manifest.source.options
    config = transformers.AutoConfig.for_model(manifest.source.target, **dict(options.get("config") or {}))
    model = transformers.AutoModel.from_config(config)
    output = options.get("output") or manifest.outputs[0].name
    return _SelectOutput(model, tuple(spec.name for spec in manifest.inputs), output)


def _from_factory(target: str, kwargs: dict[str, Any]) -> torch.nn.Module:
    module_name, _, attribute = target.partition(":")
    factory = getattr(importlib.import_module(module_name), attribute)
    model = factory(**kwargs)
    if not isinstance(model, torch.nn.Module):
        raise PredictorError(f"{target} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def build_module(manifest: Manifest, seed: int = 0) -> torch.nn.Module:
    """The manifest's model as an eval-mode module on the CPU, with its weights.

    Random weights are drawn from a generator seeded with `seed`, so every process that builds the
    same manifest gets the same weights.
    """
    source = manifest.source
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if source.kind == "torchvision":
            model = _from_torchvision(source.target)
        elif source.kind == "timm":
            model = _from_timm(source.target)
        elif source.kind == "transformers":
            model = _from_transformers(manifest)
        elif source.kind == "python":
            model = _from_factory(source.target, dict(source.options.get("kwargs") or {}))
        else:
            raise PredictorError(f"PyTorch cannot build a model from a {source.kind!r} source")
    if manifest.weights.kind == "url" and manifest.weights.url:
        state = torch.load(local_file(manifest.weights.url, manifest.weights.sha256), map_location="cpu")
        model.load_state_dict(state)
    return model.eval()
