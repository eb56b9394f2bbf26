"""Model references: every way a model can be named, each resolved to a manifest.

    resnet18                      a manifest name (shipped, or in MLSCOPE_MANIFESTS)
    torchvision:efficientnet_b0   a catalogue name (also hf:gpt2, timm:convnext_tiny)
    ./model.onnx                  an ONNX file: inputs, dtypes and shapes read from the graph
    ./net.py:make_model           a Python factory returning a torch.nn.Module (never over HTTP)
    ./my-bert/                    a Hugging Face directory, as save_pretrained writes it
    sha256:<hex>                  an ONNX file uploaded to a farm's API

`ModelOptions` carries what a reference alone cannot say: the input shapes (`--input-shape`), a
Hugging Face config's overrides (`--config`) and a local checkpoint (`--weights`). A path is told
from a name by its look: it contains a '/', starts with '.' or '~', or ends with '.onnx'.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest, parse_manifest
from mlscope.registry.onnx_files import manifest_name, shapes_by_input
from mlscope.runtime.predictors.files import directory_digest, file_sha256, model_files

__all__ = [
    "UPLOAD_REF",
    "ModelOptions",
    "apply_options",
    "factory_manifest",
    "hf_directory_manifest",
    "is_factory_ref",
    "looks_like_path",
    "reference_kind",
]

UPLOAD_REF = re.compile(r"^sha256:([0-9a-f]{64})$")
_FACTORY_REF = re.compile(r"^(?P<file>.+\.py):(?P<attr>[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)$")
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


def is_factory_ref(ref: str) -> bool:
    """Whether `ref` has the form of a Python factory, `path/to/file.py:name`."""
    return bool(_FACTORY_REF.match(ref)) and not ref.lower().endswith(".onnx")


def looks_like_path(ref: str) -> bool:
    return "/" in ref or "\\" in ref or ref.startswith((".", "~")) or ref.lower().endswith(".onnx")


def reference_kind(ref: str) -> str:
    """What `ref` names: "upload" (sha256:<hex>), "factory" (file.py:name), "onnx" (a .onnx file),
    "directory" (a Hugging Face directory) or "name" (a manifest or catalogue name).

    Raises:
        UserError: it looks like a path and nothing is there, or a file that is not .onnx.
    """
    if UPLOAD_REF.match(ref):
        return "upload"
    if is_factory_ref(ref):
        return "factory"
    if not looks_like_path(ref):
        return "name"
    path = Path(ref).expanduser()
    if path.is_dir():
        return "directory"
    if ref.lower().endswith(".onnx") or path.is_file():
        if path.is_file() and path.suffix.lower() != ".onnx":
            raise UserError(
                f"{ref}: a model file must be an ONNX graph ending in .onnx (or a Python factory "
                "file.py:make_model, or a Hugging Face directory)",
                field="model",
            )
        return "onnx"
    raise UserError(
        f"{ref}: no such file or directory (a model reference is a name, an .onnx file, file.py:factory "
        "or a Hugging Face directory)",
        field="model",
    )


def _shapes_by_input(options: ModelOptions, names: Sequence[str], what: str) -> dict[str, tuple[int, ...]]:
    return {name: tuple(shape) for name, shape in shapes_by_input(options.input_shapes, names, what).items()}


def _dtypes_by_input(options: ModelOptions, names: Sequence[str]) -> dict[str, str]:
    dtypes = dict(options.input_dtypes)
    if "" in dtypes and len(names) == 1:
        dtypes[names[0]] = dtypes.pop("")
    return dtypes


def _weights(path_text: str) -> dict[str, str]:
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
        _follow_config(document["inputs"], spec["config"])
        given = ", ".join(f"{key}={value}" for key, value in options.config.items())
        document["description"] = (
            f"{document.get('description', '')} Configuration overrides: {given}.".strip()
        )
    names = [spec["name"] for spec in document["inputs"]]
    for name, shape in _shapes_by_input(options, names, manifest.name).items():
        spec = next(item for item in document["inputs"] if item["name"] == name)
        if len(shape) - 1 != len(spec["shape"]):
            raise UserError(
                f"{manifest.name}: input {name!r} has {len(spec['shape']) + 1} dimensions (batch first, then "
                f"{'x'.join(map(str, spec['shape']))}); --input-shape gives {len(shape)}",
                field="model_options.input_shapes",
            )
        spec["shape"] = list(shape[1:])
    for name, dtype in _dtypes_by_input(options, names).items():
        next(item for item in document["inputs"] if item["name"] == name)["dtype"] = dtype
    if options.weights:
        if kind not in _TORCH_SOURCES:
            raise UserError(
                f"--weights loads a PyTorch checkpoint; {manifest.name} is built from {kind}, which "
                "has its weights in its own file",
                field="model_options.weights",
            )
        document["weights"] = _weights(options.weights)
    document["attributes"] = {**document.get("attributes", {}), "model_options": options.to_dict()}
    return parse_manifest(document, f"{manifest.origin} with {options.key()}")


def _follow_config(inputs: list[dict[str, Any]], config: Mapping[str, Any]) -> None:
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


def factory_manifest(ref: str, framework: str, options: ModelOptions) -> Manifest:
    """The manifest of a Python factory `path/to/file.py:make_model` for `framework`.

    Raises:
        UserError: the file is missing, or no input shape was given (a factory's inputs cannot be
            read from it).
    """
    match = _FACTORY_REF.match(ref)
    if match is None:
        raise UserError(f"{ref}: expected path/to/file.py:factory", field="model")
    path = Path(match.group("file")).expanduser()
    if not path.is_file():
        raise UserError(f"{path}: no such file (the factory reference is {ref})", field="model")
    if not options.input_shapes:
        raise UserError(
            f"{ref}: a Python factory's inputs cannot be read from it; give them with --input-shape "
            "1x3x224x224 (batch axis first; NAME=1x128 for each of several inputs, NAME:int64 for token ids)",
            field="model_options.input_shapes",
        )
    if "" in options.input_shapes and len(options.input_shapes) > 1:
        raise UserError(
            f"{ref}: name every input when there are several (--input-shape NAME=1x3x224x224 each)",
            field="model_options.input_shapes",
        )
    names = ["input"] if list(options.input_shapes) == [""] else list(options.input_shapes)
    shapes = _shapes_by_input(options, names, ref)
    dtypes = _dtypes_by_input(options, names)
    attribute = match.group("attr")
    document = {
        "name": manifest_name(f"{path.stem}.{attribute}"),
        "version": "1.0",
        "task": "other",
        "description": f"The module {attribute}() in {path.name} returns; synthetic inputs of given shapes.",
        "framework": {"name": framework, "version": "*"},
        "source": {"python": {"factory": f"{path.resolve()}:{attribute}", "sha256": file_sha256(path)}},
        "weights": _weights(options.weights) if options.weights else "random",
        "inputs": [
            {"name": name, "shape": list(shapes[name][1:]), "dtype": dtypes.get(name, "float32")}
            for name in names
        ],
        "outputs": [{"name": "output"}],
        "attributes": {"model_options": options.to_dict()},
    }
    for name in names:
        if len(shapes[name]) < 2:
            raise UserError(
                f"{ref}: input {name!r} needs at least one dimension after the batch axis",
                field="model_options.input_shapes",
            )
    manifest = parse_manifest(document, ref)
    # The same module for every framework: built and run once per process (its file's hash is in
    # the key, so an edited file is checked again).
    probed = json.dumps({k: document[k] for k in ("source", "weights", "inputs")}, sort_keys=True)
    if probed not in _PROBED:
        _probe(manifest)
        _PROBED.add(probed)
    return manifest


_PROBED: set[str] = set()


def _probe(manifest: Manifest) -> None:
    """Run the factory once here, so a factory that raises, returns no module or does not take the
    given shapes is one clear line before anything is stored (a factory builds a torch module)."""
    from mlscope.runtime.predictors.base import PredictorError
    from mlscope.runtime.predictors.pytorch.models import probe_module

    try:
        probe_module(manifest)
    except PredictorError as exc:
        raise UserError(str(exc), field="model") from None


def hf_directory_manifest(
    directory: Path, config: dict[str, Any], framework: str, options: ModelOptions, template: Manifest
) -> Manifest:
    """The manifest of a save_pretrained directory, its inputs and outputs those of `template`
    (the catalogue's manifest of the same model type), following the directory's `config`
    (its config.json, as `read_hf_config` read it).

    Raises:
        UserError: no weights file in the directory.
    """
    if options.weights:
        raise UserError(
            f"{directory}: a Hugging Face directory's weights are its own files; --weights is for "
            "models built with random weights",
            field="model_options.weights",
        )
    files = model_files(directory)
    if len(files) == 1:
        raise UserError(
            f"{directory}: no weights (model.safetensors or pytorch_model.bin) beside config.json; "
            "save the model with save_pretrained",
            field="model",
        )
    document = template.to_dict()
    spec = document["source"]["transformers"]
    location = str(directory.resolve())
    digest = directory_digest(directory, files)
    spec["config"] = dict(options.config)
    spec["directory"], spec["sha256"] = location, digest
    _follow_config(document["inputs"], {**config, **options.config})
    document.update(
        name=manifest_name(directory.resolve().name),
        description=(
            f"The {config.get('model_type')} model saved in {directory.resolve().name}/ (files' SHA-256 "
            f"{digest[:12]}...), loaded by from_pretrained; synthetic inputs; the output is {spec['output']}."
        ),
        weights={"url": location, "sha256": digest},
        attributes={"model_type": config.get("model_type"), "model_options": options.to_dict()},
    )
    document["framework"]["name"] = framework
    manifest = parse_manifest(document, str(directory))
    plain = ModelOptions(input_shapes=options.input_shapes, input_dtypes=options.input_dtypes)
    return apply_options(manifest, plain) if plain else manifest


def read_hf_config(directory: Path) -> dict[str, Any]:
    """The directory's config.json.

    Raises:
        UserError: no config.json, it is not JSON, or it names no model_type.
    """
    path = directory / "config.json"
    if not path.is_file():
        raise UserError(
            f"{directory}: no config.json; a Hugging Face model directory holds what save_pretrained writes "
            "(config.json and model.safetensors)",
            field="model",
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON ({exc})", field="model") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise UserError(f"{path}: names no model_type; expected a transformers config", field="model")
    return config
