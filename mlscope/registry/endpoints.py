"""The manifest of a model behind an OpenAI-compatible endpoint: what the store records of it.

Nothing of such a model is loaded here, so its manifest only names it, says where it is served, and
describes its input as the token ids a prompt becomes. Its name is the one the request gave when that
is a valid manifest name (`hf:gpt2`, so a served run sits beside the in-process one in `compare`),
else a slug of it under `endpoint:` (`Qwen/Qwen3-0.6B` → `endpoint:qwen-qwen3-0.6b`).
"""

from __future__ import annotations

import re

from mlscope.contract.generation import ENDPOINT_FRAMEWORK
from mlscope.contract.manifest import Manifest, parse_manifest

__all__ = ["endpoint_manifest", "endpoint_model_name"]

_VALID_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*(:[a-z0-9][a-z0-9_.-]*)?$")


def endpoint_model_name(model: str) -> str:
    """The manifest name of `model`: itself when valid, else `endpoint:<slug>`."""
    if _VALID_NAME.match(model):
        return model
    slug = re.sub(r"[^a-z0-9_.-]+", "-", model.lower()).strip("-._") or "model"
    return f"endpoint:{slug[:200]}"


def endpoint_manifest(model: str, url: str, served_as: str | None = None) -> Manifest:
    """The manifest of `model` served at `url` (the name sent to the server: `served_as`, else
    `model`)."""
    return parse_manifest(
        {
            "name": endpoint_model_name(model),
            "version": "served",
            "task": "other",
            "description": f"{served_as or model} behind the OpenAI-compatible endpoint {url}; "
            "its weights are whatever the server loaded.",
            "framework": {"name": ENDPOINT_FRAMEWORK},
            "source": {"served": url},
            "weights": "random",
            "inputs": [{"name": "input_ids", "shape": [1], "dtype": "int64"}],
            "outputs": [{"name": "tokens"}],
            "attributes": {"served_model": served_as or model, "weights": "the server's"},
        },
        origin=f"endpoint {url}",
    )
