"""Model references: every way a model can be named, and the options that go with one.

    resnet18                      a manifest name (shipped, or in MLSCOPE_MANIFESTS)
    torchvision:efficientnet_b0   a catalogue name (also hf:gpt2, timm:convnext_tiny)
    ./model.onnx                  an ONNX file: inputs, dtypes and shapes read from the graph
    ./net.py:make_model           a Python factory returning a torch.nn.Module (never over HTTP)
    ./my-bert/                    a Hugging Face directory, as save_pretrained writes it
    sha256:<hex>                  an ONNX file uploaded to a farm's API

`ModelOptions` carries what a reference alone cannot say: the input shapes (`--input-shape`), a
Hugging Face config's overrides (`--config`) and a local checkpoint (`--weights`). A path is told
from a name by its look: it contains a '/', starts with '.' or '~', or ends with '.onnx'.

Each kind is resolved to a manifest by its own resolver (`mlscope.registry.resolvers`, which also
fixes the order in which a reference's kind is chosen); the options are `mlscope.registry.model_options`.
This module names what callers use of both, in one place.
"""

from __future__ import annotations

from mlscope.registry.model_options import ModelOptions, apply_options
from mlscope.registry.resolvers import reference_kind
from mlscope.registry.resolvers.factory import factory_manifest
from mlscope.registry.resolvers.forms import UPLOAD_REF, is_factory_ref, looks_like_path
from mlscope.registry.resolvers.hf_directory import hf_directory_manifest, read_hf_config

__all__ = [
    "UPLOAD_REF",
    "ModelOptions",
    "apply_options",
    "factory_manifest",
    "hf_directory_manifest",
    "is_factory_ref",
    "looks_like_path",
    "read_hf_config",
    "reference_kind",
]
