"""Hugging Face directories, as save_pretrained writes them (config.json beside the weights): the
manifest is the catalogue's `hf:<model_type>` one, made to load the directory's files and follow its
configuration.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest, parse_manifest
from mlscope.registry.model_options import ModelOptions, apply_options, follow_config
from mlscope.registry.onnx_files import manifest_name
from mlscope.registry.resolvers.base import Resolver, check_framework, unknown_model
from mlscope.registry.resolvers.catalogue import CatalogueResolver
from mlscope.registry.resolvers.forms import looks_like_path
from mlscope.registry.resolvers.manifest import ManifestResolver
from mlscope.runtime.predictors.files import directory_digest, model_files

__all__ = ["HfDirectoryResolver", "hf_directory_manifest", "read_hf_config"]


class HfDirectoryResolver(Resolver):
    """A directory: runs where its template, the name `hf:<model_type>` (its config.json's type),
    runs. The template is looked up as a name is: a manifest file's first, then the catalogue's,
    through those two resolvers (not through the dispatcher).
    """

    kind = "directory"

    def __init__(self, manifests: ManifestResolver, catalogue: CatalogueResolver) -> None:
        self._manifests = manifests
        self._catalogue = catalogue

    def matches(self, ref: str) -> bool:
        return looks_like_path(ref) and Path(ref).expanduser().is_dir()

    def frameworks(self, ref: str) -> list[str]:
        template_ref = _template_ref(read_hf_config(Path(ref).expanduser()))
        return self._named(template_ref).frameworks(template_ref)

    def resolve(self, ref: str, framework: str, options: ModelOptions) -> Manifest:
        directory = Path(ref).expanduser()
        config = read_hf_config(directory)  # read once: it names the template too
        template_ref = _template_ref(config)
        named = self._named(template_ref)
        check_framework(ref, framework, named.frameworks(template_ref))
        template = named.manifest(template_ref, framework)
        return hf_directory_manifest(directory, config, framework, options, template)

    def _named(self, template_ref: str) -> ManifestResolver | CatalogueResolver:
        for named in (self._manifests, self._catalogue):
            if named.matches(template_ref):
                return named
        raise unknown_model(template_ref, self._manifests.names(), self._catalogue.refs(), local_files=True)


def _template_ref(config: dict[str, Any]) -> str:
    return f"hf:{config['model_type']}"


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
    follow_config(document["inputs"], {**config, **options.config})
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
