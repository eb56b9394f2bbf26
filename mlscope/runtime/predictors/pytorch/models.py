"""Build a PyTorch module from a manifest's source: torchvision, timm, transformers, or a factory.

Shared by the PyTorch predictor and the ONNX exporter, so both run the very same graph with the
very same (seeded) random weights.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

import torch

from mlscope.contract.manifest import Manifest
from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.files import directory_digest, local_file, model_files

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


def _from_transformers(manifest: Manifest, skeleton: bool = False) -> torch.nn.Module:
    import transformers

    options = manifest.source.options
    overrides = dict(options.get("config") or {})
    directory = options.get("directory")
    if directory and skeleton:  # the directory's configuration only: its weights come from elsewhere
        config = transformers.AutoConfig.from_pretrained(directory, local_files_only=True, **overrides)
        model = transformers.AutoModel.from_config(config)
    elif directory:
        _check_directory(Path(directory), options.get("sha256"))
        model = transformers.AutoModel.from_pretrained(directory, local_files_only=True, **overrides)
    else:
        config = transformers.AutoConfig.for_model(manifest.source.target, **overrides)
        model = transformers.AutoModel.from_config(config)
    output = options.get("output") or manifest.outputs[0].name
    return _SelectOutput(model, tuple(spec.name for spec in manifest.inputs), output)


def _check_directory(directory: Path, sha256: str | None) -> None:
    if sha256 and directory_digest(directory, model_files(directory)) != sha256:
        raise PredictorError(f"{directory}: its files changed since the manifest was made (SHA-256 differs)")


def _load_factory(target: str, sha256: str | None) -> Any:
    location, _, attribute = target.rpartition(":")
    if not location.endswith(".py"):
        return getattr(importlib.import_module(location), attribute)
    path = Path(location)
    local_file(str(path), sha256)
    spec = importlib.util.spec_from_file_location(f"mlscope_factory_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise PredictorError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # the file's own imports of its neighbours
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise PredictorError(f"{path} has no {attribute!r}")
        found = getattr(found, part)
    return found


def _from_factory(target: str, kwargs: dict[str, Any], sha256: str | None) -> torch.nn.Module:
    factory = _load_factory(target, sha256)
    if not callable(factory):
        raise PredictorError(
            f"{target} is a {type(factory).__name__}, not a function returning a torch.nn.Module"
        )
    model = factory(**kwargs)  # what it raises is the evaluation's error, under its own type
    if not isinstance(model, torch.nn.Module):
        raise PredictorError(f"{target} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _load_state(model: torch.nn.Module, url: str, sha256: str | None) -> None:
    path = local_file(url, sha256)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    target = model.model if isinstance(model, _SelectOutput) else model
    try:
        target.load_state_dict(state)
    except (RuntimeError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise PredictorError(f"{path}: does not fit the model ({first})") from None


def build_module(manifest: Manifest, seed: int = 0, *, skeleton: bool = False) -> torch.nn.Module:
    """The manifest's model as an eval-mode module on the CPU, with its weights.

    Random weights are drawn from a generator seeded with `seed`, so every process that builds the
    same manifest gets the same weights.

    Args:
        skeleton: build the module on the meta device instead: its structure with no storage, no
            random initialisation and no weights read (a warm start attaches mapped ones).
    """
    source = manifest.source
    on_meta = torch.device("meta") if skeleton else contextlib.nullcontext()
    with torch.random.fork_rng(devices=[]), on_meta:
        torch.manual_seed(seed)
        if source.kind == "torchvision":
            model = _from_torchvision(source.target)
        elif source.kind == "timm":
            model = _from_timm(source.target)
        elif source.kind == "transformers":
            model = _from_transformers(manifest, skeleton)
        elif source.kind == "python":
            kwargs = dict(source.options.get("kwargs") or {})
            model = _from_factory(source.target, kwargs, source.options.get("sha256"))
        else:
            raise PredictorError(f"PyTorch cannot build a model from a {source.kind!r} source")
    # A Hugging Face directory's weights are its own, loaded by from_pretrained above.
    if skeleton:
        return model.eval()
    if manifest.weights.kind == "url" and manifest.weights.url and not source.options.get("directory"):
        _load_state(model, manifest.weights.url, manifest.weights.sha256)
    return model.eval()


def probe_module(manifest: Manifest) -> None:
    """Build the manifest's module and run it once on a synthetic batch of one: how a Python
    factory reference is checked before anything is stored or measured.

    Raises:
        PredictorError: the factory is missing, raises, returns something else than a module, or
            the module fails on inputs of the manifest's shapes; says which.
    """
    import numpy as np

    from mlscope.runtime.predictors.inputs import synthetic_batch

    try:
        model = build_module(manifest)
    except PredictorError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise PredictorError(f"{manifest.source.target} raised {type(exc).__name__}: {first}") from None
    arrays = synthetic_batch(manifest, 1, np.random.default_rng(0))
    shapes = ", ".join(f"{name} {'x'.join(map(str, array.shape))}" for name, array in arrays.items())
    try:
        with torch.inference_mode():
            model(*(torch.from_numpy(arrays[spec.name]) for spec in manifest.inputs))
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise PredictorError(
            f"{manifest.source.target}: the module fails on inputs of shape {shapes} (batch axis first): "
            f"{type(exc).__name__}: {first}; check --input-shape"
        ) from None
