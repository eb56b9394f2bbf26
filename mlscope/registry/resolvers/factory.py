"""Python factories, `path/to/file.py:make_model`: a function returning a torch.nn.Module, its inputs
given by `--input-shape` (they cannot be read from it). Only where this machine's files are read:
the dispatcher refuses a factory on a farm before it gets here (no code travels over the wire).
"""

from __future__ import annotations

import json
from pathlib import Path

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest, parse_manifest
from mlscope.registry.model_options import ModelOptions, checkpoint, options_dtypes, options_shapes
from mlscope.registry.onnx_files import manifest_name
from mlscope.registry.resolvers.base import Resolver, check_framework, frameworks_with_source
from mlscope.registry.resolvers.forms import FACTORY_REF, is_factory_ref
from mlscope.runtime.predictors.files import file_sha256

__all__ = ["FactoryResolver", "factory_manifest"]


class FactoryResolver(Resolver):
    """`file.py:name`: runs on every framework that builds a model from a Python source."""

    kind = "factory"

    def matches(self, ref: str) -> bool:
        return is_factory_ref(ref)

    def frameworks(self, ref: str) -> list[str]:
        return frameworks_with_source("python")

    def resolve(self, ref: str, framework: str, options: ModelOptions) -> Manifest:
        check_framework(ref, framework, self.frameworks(ref))
        return factory_manifest(ref, framework, options)


def factory_manifest(ref: str, framework: str, options: ModelOptions) -> Manifest:
    """The manifest of a Python factory `path/to/file.py:make_model` for `framework`.

    Raises:
        UserError: the file is missing, or no input shape was given (a factory's inputs cannot be
            read from it).
    """
    match = FACTORY_REF.match(ref)
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
    shapes = options_shapes(options, names, ref)
    dtypes = options_dtypes(options, names)
    attribute = match.group("attr")
    document = {
        "name": manifest_name(f"{path.stem}.{attribute}"),
        "version": "1.0",
        "task": "other",
        "description": f"The module {attribute}() in {path.name} returns; synthetic inputs of given shapes.",
        "framework": {"name": framework, "version": "*"},
        "source": {"python": {"factory": f"{path.resolve()}:{attribute}", "sha256": file_sha256(path)}},
        "weights": checkpoint(options.weights) if options.weights else "random",
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
