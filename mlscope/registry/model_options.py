"""Model options: what resolves a model reference besides its name (a request's `model_options`,
the CLI's `--input-shape`, `--config`, `--weights`), and how they apply to a manifest. Every
resolver of `mlscope.registry.resolvers` applies them through this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest, parse_manifest
from mlscope.registry.onnx_files import shapes_by_input
from mlscope.runtime.predictors.files import file_sha256

__all__ = [
    "ModelOptions",
    "apply_options",
    "checkpoint",
    "follow_config",
    "options_dtypes",
    "options_shapes",
]

# Source kinds whose model is a torch.nn.Module a checkpoint (`--weights`) can be loaded into.
_TORCH_SOURCES = ("torchvision", "transformers", "python", "timm")


@dataclass(frozen=True)
class ModelOptions:
    """What resolves a reference besides its name (a request's `model_options`).

    Attributes:
        input_shapes: full shapes, batch axis first, by input name ("" for a model's only input).
        input_dtypes: dtypes by input name ("" for the only input); float32 when not given.
        config: overrides of a Hugging Face model's configuration.
        weights: a local checkpoint (a state dict saved by torch.save, or .safetensors).
    """

    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    input_dtypes: Mapping[str, str] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    weights: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ModelOptions:
        data = data or {}
        return cls(
            input_shapes={name: tuple(shape) for name, shape in (data.get("input_shapes") or {}).items()},
            input_dtypes=dict(data.get("input_dtypes") or {}),
            config=dict(data.get("config") or {}),
            weights=data.get("weights"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The non-empty options, as a request's `model_options` holds them."""
        data: dict[str, Any] = {}
        if self.input_shapes:
            data["input_shapes"] = {name: list(shape) for name, shape in self.input_shapes.items()}
        if self.input_dtypes:
            data["input_dtypes"] = dict(self.input_dtypes)
        if self.config:
            data["config"] = dict(self.config)
        if self.weights:
            data["weights"] = self.weights
        return data

    def __bool__(self) -> bool:
        return bool(self.to_dict())

    def key(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def options_shapes(options: ModelOptions, names: Sequence[str], what: str) -> dict[str, tuple[int, ...]]:
    """The options' input shapes by input name ("" becomes a single input's name); see `shapes_by_input`."""
    return {name: tuple(shape) for name, shape in shapes_by_input(options.input_shapes, names, what).items()}


def options_dtypes(options: ModelOptions, names: Sequence[str]) -> dict[str, str]:
    """The options' input dtypes by input name ("" becomes a single input's name)."""
    dtypes = dict(options.input_dtypes)
    if "" in dtypes and len(names) == 1:
        dtypes[names[0]] = dtypes.pop("")
    return dtypes


def checkpoint(path_text: str) -> dict[str, str]:
    """A manifest's `weights` for the local checkpoint `--weights path_text` (its path and SHA-256).

    Raises:
        UserError: no such file (field `model_options.weights`).
    """
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise UserError(f"--weights {path_text}: no such file", field="model_options.weights")
    return {"url": str(path.resolve()), "sha256": file_sha256(path)}


def apply_options(manifest: Manifest, options: ModelOptions) -> Manifest:
    """The manifest with the options applied: input shapes and dtypes replaced, the Hugging Face
    config's overrides merged (inputs follow its vocabulary and image size), the checkpoint named.

    Raises:
        UserError: an option that does not apply to this model, an unknown input name, a shape of
            another rank, a missing checkpoint file (the field is the option's).
    """
    if not options:
        return manifest
    document = manifest.to_dict()
    kind = next(iter(document["source"]))
    if options.config:
        if kind != "transformers":
            raise UserError(
                f"--config applies to Hugging Face models (hf:<type> or a model directory); {manifest.name} "
                f"is built from {kind}",
                field="model_options.config",
            )
        spec = document["source"]["transformers"]
        spec["config"] = {**spec.get("config", {}), **options.config}
        follow_config(document["inputs"], spec["config"])
        given = ", ".join(f"{key}={value}" for key, value in options.config.items())
        document["description"] = (
            f"{document.get('description', '')} Configuration overrides: {given}.".strip()
        )
    names = [spec["name"] for spec in document["inputs"]]
    for name, shape in options_shapes(options, names, manifest.name).items():
        spec = next(item for item in document["inputs"] if item["name"] == name)
        if len(shape) - 1 != len(spec["shape"]):
            raise UserError(
                f"{manifest.name}: input {name!r} has {len(spec['shape']) + 1} dimensions (batch first, then "
                f"{'x'.join(map(str, spec['shape']))}); --input-shape gives {len(shape)}",
                field="model_options.input_shapes",
            )
        spec["shape"] = list(shape[1:])
    for name, dtype in options_dtypes(options, names).items():
        next(item for item in document["inputs"] if item["name"] == name)["dtype"] = dtype
    if options.weights:
        if kind not in _TORCH_SOURCES:
            raise UserError(
                f"--weights loads a PyTorch checkpoint; {manifest.name} is built from {kind}, which "
                "has its weights in its own file",
                field="model_options.weights",
            )
        document["weights"] = checkpoint(options.weights)
    document["attributes"] = {**document.get("attributes", {}), "model_options": options.to_dict()}
    return parse_manifest(document, f"{manifest.origin} with {options.key()}")


def follow_config(inputs: list[dict[str, Any]], config: Mapping[str, Any]) -> None:
    """Token ids stay inside the vocabulary, images take the configured size and channels."""
    vocabulary = config.get("vocab_size")
    image_size = config.get("image_size")
    channels = config.get("num_channels")
    for spec in inputs:
        low_high = spec.get("value_range")
        if isinstance(vocabulary, int) and vocabulary > 0 and low_high and spec["dtype"].startswith("int"):
            spec["value_range"] = [low_high[0], min(low_high[1], vocabulary)]
        if len(spec["shape"]) == 3 and spec["dtype"].startswith("float"):
            if isinstance(image_size, int) and image_size > 0:
                spec["shape"][1:] = [image_size, image_size]
            if isinstance(channels, int) and channels > 0:
                spec["shape"][0] = channels
