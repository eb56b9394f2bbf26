"""Synthetic inputs made from a manifest's input specification.

Latency does not depend on input values for the models mlscope ships, but it can depend on their
distribution (denormals, token ids out of range), so each dtype gets values of a realistic range.
"""

from __future__ import annotations

import numpy as np

from mlscope.contract.manifest import Manifest, TensorSpec

__all__ = ["synthetic_batch", "synthetic_batches"]

_INTEGER_DEFAULT_RANGE = (0, 100)


def _one(spec: TensorSpec, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    shape = (batch_size, *spec.shape)
    dtype = np.dtype("float32" if spec.dtype == "bfloat16" else spec.dtype)
    if dtype.kind == "f":
        if spec.value_range is not None:
            lo, hi = spec.value_range
            return rng.uniform(lo, hi, size=shape).astype(dtype)
        # Normalised images and embeddings are roughly standard normal.
        return rng.standard_normal(size=shape, dtype=np.float32).astype(dtype)
    if dtype.kind in "iu":
        lo, hi = spec.value_range if spec.value_range is not None else _INTEGER_DEFAULT_RANGE
        return rng.integers(int(lo), int(hi), size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    raise ValueError(f"input {spec.name}: no synthetic data for dtype {spec.dtype}")


def synthetic_batch(manifest: Manifest, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One batch for every input of the manifest, by input name."""
    return {spec.name: _one(spec, batch_size, rng) for spec in manifest.inputs}


def synthetic_batches(
    manifest: Manifest, batch_size: int, count: int, seed: int = 0
) -> list[dict[str, np.ndarray]]:
    """`count` distinct batches, the same for the same seed on every framework."""
    rng = np.random.default_rng([seed, batch_size])
    return [synthetic_batch(manifest, batch_size, rng) for _ in range(count)]
