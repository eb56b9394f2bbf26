"""Which models the JAX predictor has a Flax definition of (docs/jax.md): read at admission, so a
model it cannot run is refused before anything is stored. Imports no framework."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlscope.runtime.predictors.jax import SUPPORTED

if TYPE_CHECKING:
    from mlscope.contract.manifest import Manifest

__all__ = ["SUPPORTED", "model_refusal"]


def _listed() -> str:
    return "; ".join(f"{kind} {', '.join(targets)}" for kind, targets in SUPPORTED.items())


def model_refusal(manifest: Manifest) -> str | None:
    """Why JAX cannot run the manifest's model, in one line naming what it can run; None when it can
    (a transformers model also needs token ids as its one input, its last_hidden_state as the output
    and no weights directory)."""
    source = manifest.source
    if source.target in SUPPORTED.get(source.kind, ()):
        if source.kind != "transformers":
            return None
        output = source.options.get("output") or manifest.outputs[0].name
        inputs = [spec.name for spec in manifest.inputs]
        if output == "last_hidden_state" and inputs == ["input_ids"] and not source.options.get("directory"):
            return None
    return (
        f"{manifest.name}: JAX has no Flax definition of {source.kind} {source.target}; "
        f"it runs {_listed()} (a transformers model taking input_ids, returning last_hidden_state)"
    )
